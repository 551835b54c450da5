package policystore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

func mustParse(t *testing.T, src string) []parsed {
	t.Helper()
	ps, err := parse([]byte(src), "test")
	if err != nil {
		t.Fatalf("parse(%q) = %v", src, err)
	}
	return ps
}

// policyOf is a one-policy file "p" with the given rule lines.
func policyOf(rules ...string) string {
	return "policies:\n  - name: p\n    rules:\n      - " + strings.Join(rules, "\n      - ") + "\n"
}

func findRule(t *testing.T, diffs []PolicyDiff, policy, rule string) RuleDiff {
	t.Helper()
	for _, d := range diffs {
		if d.Policy != policy {
			continue
		}
		for _, r := range d.Rules {
			if r.Rule == rule {
				return r
			}
		}
	}
	t.Fatalf("no diff for %s/%s in %+v", policy, rule, diffs)
	return RuleDiff{}
}

func TestDeriveFirstVersion(t *testing.T) {
	next := mustParse(t, policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`))
	lin, diffs, warns := derive(nil, nil, next, 1, time.Unix(1e9, 0))
	if len(lin) != 0 {
		t.Errorf("derive(first) lineage = %v, want empty (epoch 0 everywhere)", lin)
	}
	if len(diffs) != 1 || diffs[0].Kind != Added || len(warns) != 0 {
		t.Fatalf("derive(first) = %+v, %v, want policy p added, no warnings", diffs, warns)
	}
	if r := findRule(t, diffs, "p", "a"); r.Kind != Added || r.Carry != CarriesNothing || r.After.Epoch != 0 {
		t.Errorf("rule a = %+v, want added with epoch 0", r)
	}
}

// TestDeriveRuleChanges is one row per kind of change of one rule from
// version 4 (epoch 2, one live change) to version 5.
func TestDeriveRuleChanges(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	now := at.Add(10 * time.Minute)
	old := sdk.FixedWindow("a", 9, 30*time.Minute).By("user")
	liveChange := sdk.Change{From: old, At: at, Version: 2}
	tests := []struct {
		name       string
		before     string
		after      string
		kind       ChangeKind
		carry      Carry
		fields     []string
		wantEpoch  int64
		newChange  bool // a change from the old rule at version 5
		warnSubstr string
	}{
		{"unchanged", `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`,
			Unchanged, CarriesExactly, nil, 2, false, ""},
		{"limit", `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 4, window: 1h, by: [user]}`,
			Modified, CarriesExactly, []string{"limit 5 → 4"}, 2, false, ""},
		{"burst", `{name: a, algorithm: gcra, limit: 5, window: 1h, burst: 2, by: [user]}`, `{name: a, algorithm: gcra, limit: 5, window: 1h, burst: 3, by: [user]}`,
			Modified, CarriesExactly, []string{"burst 2 → 3"}, 2, false, ""},
		{"shadow on", `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user], shadow: true}`,
			Modified, CarriesExactly, []string{"shadow on"}, 2, false, ""},
		{"window", `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, window: 2h, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"window 1h0m0s → 2h0m0s"}, 5, true, ""},
		{"sub-windows", `{name: a, algorithm: sliding_window, limit: 5, window: 1h, sub_windows: 6, by: [user]}`, `{name: a, algorithm: sliding_window, limit: 5, window: 1h, sub_windows: 12, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"sub_windows 6 → 12"}, 5, true, ""},
		{"algorithm", `{name: a, algorithm: sliding_log, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: gcra, limit: 5, window: 1h, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"algorithm sliding_log → gcra"}, 5, true, ""},
		{"limit across LogLine", `{name: a, algorithm: sliding_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: sliding_window, limit: 101, window: 1h, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"limit 5 → 101"}, 5, true, ""},
		{"limit within LogLine", `{name: a, algorithm: sliding_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: sliding_window, limit: 100, window: 1h, by: [user]}`,
			Modified, CarriesExactly, []string{"limit 5 → 100"}, 2, false, ""},
		{"calendar", `{name: a, algorithm: fixed_window, limit: 5, window: 24h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, calendar: day, timezone: UTC, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"calendar none → day", "timezone none → UTC"}, 5, true, ""},
		{"zone", `{name: a, algorithm: fixed_window, limit: 5, calendar: day, timezone: UTC, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, calendar: day, timezone: Asia/Shanghai, by: [user]}`,
			Reidentified, CarriesConservatively, []string{"timezone UTC → Asia/Shanghai"}, 5, true, ""},
		{"re-keyed", `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`, `{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user, app]}`,
			Rekeyed, CarriesNothing, []string{"by [user] → [user app]"}, 5, false, "re-keyed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prev := mustParse(t, policyOf(tc.before))
			next := mustParse(t, policyOf(tc.after))
			prevLin := lineage{}
			prevLin.set("p", "a", ruleLineage{Epoch: 2, Changes: []sdk.Change{liveChange}})
			lin, diffs, warns := derive(prev, prevLin, next, 5, now)
			r := findRule(t, diffs, "p", "a")
			if r.Kind != tc.kind || r.Carry != tc.carry || !slices.Equal(r.Fields, tc.fields) {
				t.Errorf("derive: rule a = %v, %v, %q, want %v, %v, %q", r.Kind, r.Carry, r.Fields, tc.kind, tc.carry, tc.fields)
			}
			rl := lin.rule("p", "a")
			if rl.Epoch != tc.wantEpoch || r.After.Epoch != tc.wantEpoch {
				t.Errorf("derive: epoch = %d (After %d), want %d", rl.Epoch, r.After.Epoch, tc.wantEpoch)
			}
			if r.Before.Epoch != 2 {
				t.Errorf("derive: Before.Epoch = %d, want 2", r.Before.Epoch)
			}
			switch {
			case tc.kind == Rekeyed:
				if len(rl.Changes) != 0 {
					t.Errorf("derive: re-keyed rule has changes %+v, want none (nothing carries)", rl.Changes)
				}
			case tc.newChange:
				if len(rl.Changes) != 2 || rl.Changes[0].Version != 5 || !rl.Changes[0].At.IsZero() ||
					rl.Changes[0].From.Epoch != 2 || rl.Changes[0].From.Limit != 5 || rl.Changes[1].Version != 2 {
					t.Errorf("derive: changes = %+v, want the change of version 5 from the old rule (epoch 2, At unset), then version 2's", rl.Changes)
				}
			default:
				if len(rl.Changes) != 1 || rl.Changes[0].Version != 2 {
					t.Errorf("derive: changes = %+v, want version 2's kept", rl.Changes)
				}
			}
			if got := strings.Join(warns, "\n"); (tc.warnSubstr == "") != (got == "") || !strings.Contains(got, tc.warnSubstr) {
				t.Errorf("derive: warnings %q, want one containing %q", got, tc.warnSubstr)
			}
			// The lineage builds: the sdk accepts every change derived.
			if _, err := build(next, lin, now); err != nil {
				t.Errorf("build = %v", err)
			}
		})
	}
}

func TestDeriveDropsChangesPastReach(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	from := sdk.FixedWindow("a", 5, time.Hour).By("user")
	prevLin := lineage{}
	prevLin.set("p", "a", ruleLineage{Epoch: 3, Changes: []sdk.Change{
		{From: from, At: now.Add(-30 * time.Minute), Version: 3},
		{From: from, At: now.Add(-3 * time.Hour), Version: 2},
	}})
	src := policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 2h, by: [user]}`)
	lin, _, _ := derive(mustParse(t, src), prevLin, mustParse(t, policyOf(`{name: a, algorithm: fixed_window, limit: 4, window: 2h, by: [user]}`)), 4, now)
	rl := lin.rule("p", "a")
	if rl.Epoch != 3 || len(rl.Changes) != 1 || rl.Changes[0].Version != 3 {
		t.Errorf("derive: lineage %+v, want epoch 3 and only version 3's change (version 2's reach has passed)", rl)
	}
}

func TestDeriveRollbackGetsNewEpoch(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	v1 := policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`)
	v2 := policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 2h, by: [user]}`)
	lin1, _, _ := derive(nil, nil, mustParse(t, v1), 1, t0)
	lin2, _, _ := derive(mustParse(t, v1), withAt(lin1, t0), mustParse(t, v2), 2, t0)
	lin3, diffs, _ := derive(mustParse(t, v2), withAt(lin2, t0.Add(time.Minute)), mustParse(t, v1), 3, t0.Add(2*time.Minute))
	r := findRule(t, diffs, "p", "a")
	rl := lin3.rule("p", "a")
	if r.Kind != Reidentified || rl.Epoch != 3 {
		t.Fatalf("rollback: %v epoch %d, want identity changed, epoch 3 (never epoch 0's stale state)", r.Kind, rl.Epoch)
	}
	if len(rl.Changes) != 2 || rl.Changes[0].From.Epoch != 2 || rl.Changes[1].From.Epoch != 0 {
		t.Errorf("rollback: changes %+v, want from epoch 2 then from epoch 0", rl.Changes)
	}
	if _, err := build(mustParse(t, v1), lin3, t0); err != nil {
		t.Errorf("build = %v", err)
	}
}

// withAt dates a version's own changes, as decode does.
func withAt(l lineage, at time.Time) lineage {
	out := lineage{}
	for pn, rules := range l {
		for rn, rl := range rules {
			cs := slices.Clone(rl.Changes)
			for i := range cs {
				if cs[i].At.IsZero() {
					cs[i].At = at
				}
			}
			out.set(pn, rn, ruleLineage{Epoch: rl.Epoch, Changes: cs})
		}
	}
	return out
}

func TestDerivePolicyLevel(t *testing.T) {
	now := time.Unix(1e9, 0)
	tests := []struct {
		name   string
		before string
		after  string
		check  func(t *testing.T, diffs []PolicyDiff, warns []string)
	}{
		{"rename", policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`), policyOf(`{name: b, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`),
			func(t *testing.T, diffs []PolicyDiff, warns []string) {
				if a, b := findRule(t, diffs, "p", "a"), findRule(t, diffs, "p", "b"); a.Kind != Removed || b.Kind != Added || b.After.Epoch != 2 {
					t.Errorf("rename: a %v, b %v epoch %d, want removed, added with epoch 2", a.Kind, b.Kind, b.After.Epoch)
				}
				if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, "rename") }) {
					t.Errorf("rename: warnings %q, want one naming a rename", warns)
				}
			}},
		{"shard moves", policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user, app]}`),
			policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user, app]}`, `{name: b, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`),
			func(t *testing.T, diffs []PolicyDiff, warns []string) {
				if a := findRule(t, diffs, "p", "a"); a.Kind != Rekeyed {
					t.Errorf("shard moves: rule a %v, want re-keyed (its hash tag moves)", a.Kind)
				}
				if len(diffs[0].Settings) != 1 || !strings.Contains(diffs[0].Settings[0], "shard") {
					t.Errorf("shard moves: settings %q, want the shard change", diffs[0].Settings)
				}
			}},
		{"settings", "policies:\n  - name: p\n    failure: closed\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}\n",
			"policies:\n  - name: p\n    failure: open\n    overrides: true\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}\n",
			func(t *testing.T, diffs []PolicyDiff, warns []string) {
				if want := []string{"failure closed → open", "overrides false → true"}; diffs[0].Kind != Modified || !slices.Equal(diffs[0].Settings, want) {
					t.Errorf("settings: %v %q, want modified %q", diffs[0].Kind, diffs[0].Settings, want)
				}
				if len(warns) != 0 {
					t.Errorf("settings: warnings %q, want none", warns)
				}
			}},
		{"policy removed", policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`) + "  - name: q\n    rules:\n      - {name: x, algorithm: gcra, limit: 5, window: 1h, by: [user]}\n",
			policyOf(`{name: a, algorithm: fixed_window, limit: 5, window: 1h, by: [user]}`),
			func(t *testing.T, diffs []PolicyDiff, warns []string) {
				if len(diffs) != 2 || diffs[0].Kind != Unchanged || diffs[1].Policy != "q" || diffs[1].Kind != Removed {
					t.Errorf("policy removed: %+v, want p unchanged, q removed", diffs)
				}
				if len(warns) != 1 || !strings.Contains(warns[0], `policy "q" is removed`) {
					t.Errorf("policy removed: warnings %q", warns)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, diffs, warns := derive(mustParse(t, tc.before), lineage{}, mustParse(t, tc.after), 2, now)
			tc.check(t, diffs, warns)
		})
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	lin := lineage{}
	from := sdk.Daily("d", 50, shanghai).By("user", "campaign")
	from.Epoch, from.Shadow = 3, true
	lin.set("p", "d", ruleLineage{Epoch: 7, Changes: []sdk.Change{
		{From: from, Version: 7},
		{From: sdk.SlidingWindow("d", 5, time.Hour).WithSubWindows(6).By("user", "campaign"), At: at.Add(-time.Hour), Version: 3},
	}})
	lin.set("p", "g", ruleLineage{Epoch: 2})
	src := []byte("policies: []\n# as applied\n")
	b, err := encodeDocument(src, lin)
	if err != nil {
		t.Fatal(err)
	}
	gotSrc, got, err := decodeDocument(b, at)
	if err != nil {
		t.Fatalf("decodeDocument = %v", err)
	}
	if string(gotSrc) != string(src) {
		t.Errorf("source = %q, want %q", gotSrc, src)
	}
	want := withAt(lin, at)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lineage = %v, want %v", got, want)
	}
	if c := got.rule("p", "d").Changes[0]; !c.At.Equal(at) || c.From.Location.String() != "Asia/Shanghai" || !c.From.Shadow || c.From.Epoch != 3 {
		t.Errorf("change = %+v, want At %v, zone Asia/Shanghai, shadow, epoch 3", c, at)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"not json", "policies: []", "not a freqcap policy document"},
		{"no format", `{"source": ""}`, "not a freqcap policy document"},
		{"other format", `{"format": "freqcap.policies/v9", "source": ""}`, `"freqcap.policies/v9"`},
		{"unknown field", `{"format": "freqcap.policies/v1", "source": "", "extra": 1}`, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeDocument([]byte(tc.doc), at)
			if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeDocument(%s) = %v, want ErrUnknownFormat naming %s", tc.doc, err, tc.want)
			}
		})
	}
}
