package policyfile_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zones load on machines without zoneinfo

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

func TestLoadPolicyFile(t *testing.T) {
	ps, err := policyfile.LoadFile("../../internal/seed/policies.yaml")
	if err != nil {
		t.Fatalf("LoadPolicyFile = %v", err)
	}
	if len(ps) != 2 || ps[0].Name() != "push" || ps[1].Name() != "api" {
		t.Fatalf("LoadPolicyFile = %d policies, want push and api", len(ps))
	}
	push, api := ps[0], ps[1]
	if !push.FailOpen() || api.FailOpen() {
		t.Errorf("FailOpen() = %v, %v, want true, false", push.FailOpen(), api.FailOpen())
	}
	if got := push.ShardBy(); !slices.Equal(got, []string{"user"}) {
		t.Errorf("push.ShardBy() = %v, want [user]", got)
	}
	want := []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("user", "content"),
	}
	assertRules(t, push.Rules(), want)
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatalf("no tzdata: %v", err)
	}
	assertRules(t, api.Rules(), []sdk.Rule{
		sdk.GCRA("burst", 30, time.Minute, 14).By("user"),
		sdk.Daily("daily", 3, loc).By("user", "campaign"),
	})
}

func assertRules(t *testing.T, got, want []sdk.Rule) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("Rules() = %d rules, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Algorithm != w.Algorithm || g.Limit != w.Limit || g.Window != w.Window ||
			g.SubWindows != w.SubWindows || g.Burst != w.Burst || g.Calendar != w.Calendar ||
			g.Location.String() != w.Location.String() || !slices.Equal(g.Dimensions, w.Dimensions) {
			t.Errorf("Rules()[%d] = %+v, want %+v", i, g, w)
		}
	}
}

func TestLoadPolicies(t *testing.T) {
	const doc = `
policies:
  - name: p
    failure: closed
    trail: {max: 5}
    hot_deny_cache: 100
    rules:
      - {name: a, algorithm: sliding_window, limit: 3, window: 1d12h, sub_windows: 6, by: [user]}
      - {name: b, algorithm: sliding_log, limit: 2, window: 90s, by: [user]}
      - {name: c, algorithm: fixed_window, calendar: hour, timezone: Asia/Kolkata, limit: 2, by: [user]}
      - {name: d, algorithm: fixed_window, limit: 2, window: 2d, by: [user]}
      - {name: w, algorithm: fixed_window, calendar: week, timezone: Asia/Kolkata, limit: 10, by: [user]}
      - {name: m, algorithm: fixed_window, calendar: month, timezone: Asia/Kolkata, limit: 30, window: 31d, by: [user]}
`
	ps, err := policyfile.Load(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("LoadPolicies = %v", err)
	}
	if got := ps[0].HotDenyCache(); got != 100 {
		t.Errorf("HotDenyCache() = %d, want 100 (hot_deny_cache)", got)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	assertRules(t, ps[0].Rules(), []sdk.Rule{
		sdk.SlidingWindow("a", 3, 36*time.Hour).WithSubWindows(6).By("user"),
		sdk.SlidingLog("b", 2, 90*time.Second).By("user"),
		sdk.Hourly("c", 2, kolkata).By("user"),
		sdk.FixedWindow("d", 2, 48*time.Hour).By("user"),
		sdk.Weekly("w", 10, kolkata).By("user"),
		sdk.Monthly("m", 30, kolkata).By("user"),
	})
}

func TestLoadPoliciesErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want error
		msg  []string // substrings of the error
	}{
		{"empty", "", sdk.ErrInvalidPolicy, []string{"no policies"}},
		{"no policies", "policies: []\n", sdk.ErrInvalidPolicy, []string{"no policies"}},
		{"unknown top key", "polices:\n  - name: p\n", sdk.ErrInvalidPolicy, []string{`line 1: invalid policy: unknown key "polices"`}},
		{"unknown policy key", "policies:\n  - name: p\n    failur: open\n", sdk.ErrInvalidPolicy, []string{`line 3: invalid policy: unknown key "failur"`}},
		{"unknown rule key", "policies:\n  - name: p\n    rules:\n      - name: a\n        algorithm: gcra\n        limit: 1\n        windw: 1s\n", sdk.ErrInvalidPolicy, []string{`line 7: invalid policy: unknown key "windw"`}},
		{"unknown trail key", "policies:\n  - name: p\n    trail: {maxx: 3}\n", sdk.ErrInvalidPolicy, []string{`line 3: invalid policy: unknown key "maxx"`}},
		{"bad duration", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1x, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 4", `invalid duration "1x"`}},
		{"bad days", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1dd, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 4", "invalid duration"}},
		{"negative duration", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: -1s, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 4", "out of range"}},
		{"bad limit type", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: many, window: 1s, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 4"}},
		{"bad failure", "policies:\n  - name: p\n    failure: maybe\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 2", `failure must be open or closed, got "maybe"`}},
		{"unknown algorithm", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: token, limit: 1, window: 1s, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", `rule "a"`, `unknown algorithm "token"`}},
		{"missing algorithm", "policies:\n  - name: p\n    rules:\n      - {name: a, limit: 1, window: 1s, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "algorithm missing"}},
		{"zero limit", "policies:\n  - name: push\n    rules:\n      - {name: ok, algorithm: gcra, limit: 1, window: 1s, by: [u]}\n      - {name: recv-1m, algorithm: sliding_window, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{`line 5: policy "push": rule "recv-1m": invalid rule: limit must be > 0, got 0`}},
		{"calendar without timezone", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, calendar: day, limit: 1, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "requires a location (timezone)"}},
		{"bad calendar", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, calendar: fortnight, timezone: UTC, limit: 1, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", `calendar must be day, hour, week or month, got "fortnight"`}},
		{"month of 30 days", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, calendar: month, timezone: UTC, limit: 1, window: 30d, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "window of a calendar month rule must be 744h0m0s (its nominal length) or unset, got 720h0m0s"}},
		{"timezone without calendar", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, timezone: UTC, limit: 1, window: 1s, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "timezone is only for calendar rules"}},
		{"unknown timezone", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, calendar: day, timezone: Mars/Olympus, limit: 1, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", `timezone "Mars/Olympus"`}},
		{"calendar on gcra", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, calendar: day, timezone: UTC, limit: 1, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "calendar requires algorithm fixed_window"}},
		{"duplicate rule", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}\n", sdk.ErrInvalidPolicy, []string{"line 5", "duplicate rule name"}},
		{"no shared dimension", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}\n      - {name: b, algorithm: gcra, limit: 1, window: 1s, by: [v]}\n", sdk.ErrInvalidPolicy, []string{"line 2", "rules share no dimension"}},
		{"duplicate policy", "policies:\n  - name: p\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n  - name: p\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n", sdk.ErrInvalidPolicy, []string{"line 4", "duplicate policy name"}},
		{"bad dimension", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, by: [u, u]}\n", sdk.ErrInvalidRule, []string{"line 4", `dimension "u" given twice`}},
		{"cells on gcra", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, window: 1s, sub_windows: 4, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "sub_windows is only for sliding_window"}},
		{"negative hot-deny cache", "policies:\n  - name: p\n    hot_deny_cache: -1\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n", sdk.ErrInvalidPolicy, []string{"line 2", "hot-deny cache size must be > 0"}},
		{"negative trail", "policies:\n  - name: p\n    trail: {max: -1}\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n", sdk.ErrInvalidPolicy, []string{"line 2", "trail max must be >= 0"}},
		{"fractional limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1.5, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4: policy \"p\": rule \"a\": invalid rule: limit must be an integer, got 1.5"}},
		{"fractional burst", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 2, burst: 2.5, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "rule \"a\"", "burst must be an integer, got 2.5"}},
		{"fractional sub_windows", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: sliding_window, limit: 2, sub_windows: 7.9, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "rule \"a\"", "sub_windows must be an integer, got 7.9"}},
		{"whole float limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 2.0, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit must be written as an integer, got 2.0"}},
		{"exponent limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 1e3, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit must be written as an integer, got 1e3"}},
		{"nan limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: .nan, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit must be an integer, got .nan"}},
		{"overflowing limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 99999999999999999999, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "rule \"a\"", "limit must be <= 1125899906842624 (MaxLimit), got 99999999999999999999"}},
		{"uint64 limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 18446744073709551615, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit must be <= 1125899906842624 (MaxLimit), got 18446744073709551615"}},
		{"negative overflowing limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: -99999999999999999999, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit is out of range, got -99999999999999999999"}},
		{"limit above MaxLimit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 1125899906842625, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "rule \"a\"", "limit must be <= 1125899906842624 (MaxLimit), got 1125899906842625"}},
		{"infinite limit", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: .inf, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "limit must be <= 1125899906842624 (MaxLimit), got .inf"}},
		{"burst above MaxLimit-1", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 1, burst: 1125899906842624, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "burst must be <= 1125899906842623 (MaxLimit-1), got 1125899906842624"}},
		{"overflowing sub_windows", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: sliding_window, limit: 1, sub_windows: 99999999999999999999, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "sub_windows must be <= 9223372036854775807, got 99999999999999999999"}},
		{"window above MaxWindow", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: fixed_window, limit: 1, window: 30000d, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", "window must be <= 625499h56m53.685248s (MaxWindow)"}},
		{"fractional key line, block style", "policies:\n  - name: p\n    rules:\n      - name: a\n        algorithm: gcra\n        window: 1m\n        limit: 7.9\n        by: [u]\n", sdk.ErrInvalidRule, []string{"line 7: policy \"p\": rule \"a\": invalid rule: limit must be an integer, got 7.9"}},
		{"fractional limit through an alias", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: &n 1.5, window: 1m, by: [u]}\n      - {name: b, algorithm: gcra, limit: *n, window: 1m, by: [u]}\n", sdk.ErrInvalidRule, []string{"line 4", `rule "a"`, "limit must be an integer, got 1.5"}},
		{"fractional sub_windows only through an alias", "policies:\n  - name: p\n    rules:\n      - {name: &n 7.9, algorithm: gcra, limit: 1, window: 1m, by: [u]}\n      - {name: b, algorithm: sliding_window, limit: 1, window: 1m, sub_windows: *n, by: [u]}\n", sdk.ErrInvalidRule, []string{`line 5: policy "p": rule "b": invalid rule: sub_windows must be an integer, got 7.9`}},
		{"fractional hot-deny cache", "policies:\n  - name: p\n    hot_deny_cache: 1.5\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n", sdk.ErrInvalidPolicy, []string{"line 3: policy \"p\": invalid policy: hot_deny_cache must be an integer, got 1.5"}},
		{"fractional trail max", "policies:\n  - name: p\n    trail: {max: 2.5}\n    rules: [{name: a, algorithm: gcra, limit: 1, window: 1s, by: [u]}]\n", sdk.ErrInvalidPolicy, []string{"line 3: policy \"p\": invalid policy: trail max must be an integer, got 2.5"}},
		{"not yaml", "policies: [\n", sdk.ErrInvalidPolicy, []string{"line"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := policyfile.Load(strings.NewReader(tc.doc))
			if ps != nil || !errors.Is(err, tc.want) {
				t.Fatalf("LoadPolicies(%q) = %v, %v, want nil, %v", tc.doc, ps, err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("LoadPolicies(%q) = %v, want it to contain %q", tc.doc, err, m)
				}
			}
		})
	}
}

func TestLoadPoliciesNil(t *testing.T) {
	if _, err := policyfile.Load(nil); !errors.Is(err, sdk.ErrInvalidPolicy) {
		t.Errorf("LoadPolicies(nil) = %v, want %v", err, sdk.ErrInvalidPolicy)
	}
	if _, err := policyfile.LoadFile("testdata/does-not-exist.yaml"); err == nil {
		t.Error("LoadPolicyFile(missing) = nil error, want one")
	}
}

func TestLoadShadowAndOverrides(t *testing.T) {
	ps, err := policyfile.Load(strings.NewReader(`
policies:
  - name: vip
    overrides: true
    rules:
      - {name: daily-50, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
      - {name: daily-40, algorithm: fixed_window, limit: 40, window: 24h, by: [user], shadow: true}
`))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	rules := ps[0].Rules()
	if rules[0].Shadow || !rules[1].Shadow {
		t.Errorf("Rules() shadow = %v, %v, want false, true", rules[0].Shadow, rules[1].Shadow)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"shadow typo", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 5, window: 1m, by: [u], shadw: true}\n", `line 4: invalid policy: unknown key "shadw"`},
		{"overrides typo", "policies:\n  - name: p\n    override: true\n    rules:\n      - {name: a, algorithm: gcra, limit: 5, window: 1m, by: [u]}\n", `line 3: invalid policy: unknown key "override"`},
		{"shadow not bool", "policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 5, window: 1m, by: [u], shadow: maybe}\n", "line 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policyfile.Load(strings.NewReader(tc.file))
			if !errors.Is(err, sdk.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want ErrInvalidPolicy with %q", err, tc.want)
			}
		})
	}
}

// TestParseRebuild: Parse gives each policy as Load does, the settings
// that differ between two files in the file's words, and the policy built
// again with other epochs and the file's options kept.
func TestParseRebuild(t *testing.T) {
	const v1 = `policies:
  - name: push
    failure: open
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
`
	const v2 = `policies:
  - name: push
    overrides: true
    hot_deny_cache: 100
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
`
	a, err := policyfile.Parse([]byte(v1), "v1")
	if err != nil || len(a) != 1 || a[0].Name() != "push" || !a[0].FailOpen() {
		t.Fatalf("Parse(v1) = %v, %v; want push, fail-open", a, err)
	}
	b, err := policyfile.Parse([]byte(v2), "v2")
	if err != nil {
		t.Fatal(err)
	}
	got := b[0].SettingChanges(a[0])
	want := []string{"failure open → closed", "hot_deny_cache 0 → 100", "overrides false → true"}
	if !slices.Equal(got, want) {
		t.Errorf("SettingChanges = %q, want %q", got, want)
	}
	if c := b[0].SettingChanges(b[0]); len(c) != 0 {
		t.Errorf("SettingChanges of itself = %q, want none", c)
	}
	rules := a[0].Rules()
	rules[0].Epoch = 3
	p, err := a[0].Rebuild(rules)
	if err != nil || p.Rules()[0].Epoch != 3 || !p.FailOpen() {
		t.Errorf("Rebuild(epoch 3) = %v, %v; want epoch 3, still fail-open", p, err)
	}
	if _, err := policyfile.Parse([]byte("policies:\n  - name: x\n    windw: 1\n"), "bad"); err == nil || !strings.Contains(err.Error(), "policyfile: bad: line 3") {
		t.Errorf("Parse(bad) = %v, want the line named", err)
	}
}

// TestLoadWide: a policy's wide key declares its dimension sets wide
// (sdk.WithWide); a dimension that is the shard key or no rule's is
// refused with the line; a change of it is a setting change.
func TestLoadWide(t *testing.T) {
	const file = `
policies:
  - name: ad
    wide: [campaign]
    rules:
      - {name: user-day, algorithm: fixed_window, limit: 1000, window: 24h, by: [user]}
      - {name: campaign-day, algorithm: sliding_window, limit: 3, window: 24h, by: [user, campaign]}
`
	ps, err := policyfile.Parse([]byte(file), "ad.yaml")
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if got := ps[0].Wide(); !slices.Equal(got, []string{"campaign"}) {
		t.Errorf("Wide() = %v, want [campaign]", got)
	}
	narrow, err := policyfile.Parse([]byte(strings.Replace(file, "    wide: [campaign]\n", "", 1)), "ad.yaml")
	if err != nil {
		t.Fatalf("Parse without wide = %v", err)
	}
	if got := ps[0].SettingChanges(narrow[0]); !slices.Equal(got, []string{"wide [] → [campaign]"}) {
		t.Errorf("SettingChanges = %q, want the wide change", got)
	}
	for _, tc := range []struct{ name, wide, want string }{
		{"shard dimension", "[user]", `line 3: policy "ad": invalid policy: wide dimension "user" is a shard dimension`},
		{"no rule's", "[device]", `wide dimension "device" is not a dimension of any rule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policyfile.Load(strings.NewReader(strings.Replace(file, "[campaign]\n    rules", tc.wide+"\n    rules", 1)))
			if !errors.Is(err, sdk.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want ErrInvalidPolicy with %q", err, tc.want)
			}
		})
	}
}
