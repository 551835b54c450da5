package policystore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestStoreMessagingCarries: the messaging settings (person, quiet_hours,
// classes) and a rule's headroom are no part of any rule's identity: a
// version changing them plans no transition (every rule carries exactly,
// same ids, no warning), its plan says exactly what changed, and each
// person's counts are the same just after the apply, on memory and Redis.
func TestStoreMessagingCarries(t *testing.T) {
	const quietA = `{zone: UTC, periods: [{from: "03:00", to: "03:01", days: [sun]}]}`
	const quietB = `{zone: Europe/Berlin, periods: [{from: "03:00", to: "03:01", days: [sun]}, {from: "22:00", to: "22:01"}]}`
	doc := func(settings, headroom string) string {
		if headroom != "" {
			headroom = ", headroom: " + headroom
		}
		return "policies:\n  - name: push\n" + settings + "    rules:\n" +
			"      - {name: daily, algorithm: sliding_window, limit: 10, window: 24h, by: [user]" + headroom + "}\n" +
			"      - {name: hourly, algorithm: fixed_window, limit: 8, window: 1h, by: [user, app]}\n"
	}
	tests := []struct {
		name                  string
		before, after         string // the policy's settings
		headBefore, headAfter string // daily's headroom
		settings              []string
		fields                []string // daily's changed fields
		check                 func(t *testing.T, p *sdk.Policy)
	}{
		{name: "person added", after: "    person: user\n", settings: []string{"person none → user"},
			check: func(t *testing.T, p *sdk.Policy) {
				if p.Person() != "user" {
					t.Errorf("Person() = %q, want user", p.Person())
				}
			}},
		{name: "quiet hours added", after: "    quiet_hours: " + quietA + "\n", settings: []string{"quiet_hours none → " + quietA},
			check: func(t *testing.T, p *sdk.Policy) {
				if loc, ps := p.QuietHours(); loc.String() != "UTC" || len(ps) != 1 {
					t.Errorf("QuietHours() = %v, %v, want UTC and one period", loc, ps)
				}
			}},
		{name: "quiet hours changed", before: "    quiet_hours: " + quietA + "\n", after: "    quiet_hours: " + quietB + "\n",
			settings: []string{"quiet_hours " + quietA + " → " + quietB}},
		{name: "quiet hours removed", before: "    quiet_hours: " + quietA + "\n", settings: []string{"quiet_hours " + quietA + " → none"}},
		{name: "classes", before: "    classes:\n      - {name: otp, exempt: all}\n      - {name: alert, quiet_hours: true}\n",
			after:    "    classes:\n      - {name: otp, exempt: all, counted: true}\n      - {name: receipt, exempt: [daily]}\n",
			settings: []string{"class otp: {name: otp, exempt: all} → {name: otp, exempt: all, counted: true}", "class receipt added: {name: receipt, exempt: [daily]}", "class alert removed: {name: alert, quiet_hours: true}"},
			check: func(t *testing.T, p *sdk.Policy) {
				if cs := p.Classes(); len(cs) != 2 || !cs[0].Counted || cs[1].Name != "receipt" {
					t.Errorf("Classes() = %+v, want otp counted and receipt", cs)
				}
			}},
		{name: "headroom added", headAfter: "[{priority: 1, keep: 4}]", fields: []string{"headroom none → [{priority: 1, keep: 4}]"},
			check: func(t *testing.T, p *sdk.Policy) {
				if h := p.Rules()[0].Headroom; !slices.Equal(h, []sdk.Headroom{{Priority: 1, Keep: 4}}) {
					t.Errorf("daily's Headroom = %v, want [{1 4}]", h)
				}
			}},
		{name: "headroom changed", headBefore: "[{priority: 1, keep: 4}]", headAfter: "[{priority: 1, keep: 6}, {priority: 3, keep: 2}]",
			fields: []string{"headroom [{priority: 1, keep: 4}] → [{priority: 1, keep: 6}, {priority: 3, keep: 2}]"}},
		{name: "headroom removed", headBefore: "[{priority: 1, keep: 4}]", fields: []string{"headroom [{priority: 1, keep: 4}] → none"}},
		{name: "all at once", after: "    person: user\n    quiet_hours: " + quietA + "\n    classes: [{name: otp, exempt: all, counted: true, quiet_hours: true}]\n",
			headAfter: "[{priority: 1, keep: 4}]",
			settings:  []string{"person none → user", "quiet_hours none → " + quietA, "class otp added: {name: otp, exempt: all, counted: true, quiet_hours: true}"},
			fields:    []string{"headroom none → [{priority: 1, keep: 4}]"}},
	}
	backends := []struct {
		name string
		new  func(t *testing.T) (*policystore.Store, *sdk.Limiter)
	}{
		{"memory", func(t *testing.T) (*policystore.Store, *sdk.Limiter) {
			clock := fakeclock.New(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
			b := memory.New(&memory.Options{Clock: clock})
			return policystore.New(b, policystore.WithClock(clock)), sdk.New(b)
		}},
		{"redis", func(t *testing.T) (*policystore.Store, *sdk.Limiter) {
			lim, st := redisPair(t, false, uniquePrefix(t))
			return st, lim
		}},
	}
	for _, be := range backends {
		for _, tc := range tests {
			t.Run(be.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				s, lim := be.new(t)
				subject := sdk.Subject{"user": "u", "app": "a"}
				current := func() *sdk.Policy {
					t.Helper()
					v, err := s.Version(ctx, 0)
					if err != nil {
						t.Fatal(err)
					}
					ps, err := v.Policies()
					if err != nil {
						t.Fatalf("Policies() = %v", err)
					}
					return ps[0]
				}
				used := func(p *sdk.Policy) []int64 {
					t.Helper()
					d, err := lim.Peek(ctx, p, sdk.Attempt{Subject: subject})
					if err != nil {
						t.Fatalf("Peek = %v", err)
					}
					var out []int64
					for _, r := range d.Rules {
						out = append(out, r.Used)
					}
					return out
				}
				mustApply(t, s, doc(tc.before, tc.headBefore), false)
				old := current()
				for range 3 {
					if _, err := lim.Take(ctx, old, sdk.Attempt{Subject: subject, Priority: 1}); err != nil {
						t.Fatalf("Take = %v", err)
					}
				}
				before := used(old)
				plan, err := s.Plan(ctx, []byte(doc(tc.after, tc.headAfter)))
				if err != nil {
					t.Fatalf("Plan = %v", err)
				}
				d := plan.Diffs[0]
				if d.Kind != policystore.Modified || !slices.Equal(d.Settings, tc.settings) || len(plan.Warnings) > 0 {
					t.Errorf("Plan = %v, settings %q, warnings %q; want modified, settings %q, no warnings", d.Kind, d.Settings, plan.Warnings, tc.settings)
				}
				for _, rd := range d.Rules {
					var want []string
					if rd.Rule == "daily" {
						want = tc.fields
					}
					if rd.Carry != policystore.CarriesExactly || !slices.Equal(rd.Fields, want) || rd.After.Epoch != 0 {
						t.Errorf("rule %s: %v, %v, fields %q, epoch %d; want carried exactly, fields %q, epoch 0", rd.Rule, rd.Kind, rd.Carry, rd.Fields, rd.After.Epoch, want)
					}
				}
				text := plan.String()
				for _, st := range tc.settings {
					if !strings.Contains(text, "  setting "+st+"\n") {
						t.Errorf("Plan.String() lacks %q:\n%s", "setting "+st, text)
					}
				}
				for _, f := range tc.fields {
					if !strings.Contains(text, "rule daily: modified: "+f+"; carries exactly") {
						t.Errorf("Plan.String() lacks daily's %q:\n%s", f, text)
					}
				}
				if _, err := s.Apply(ctx, plan, "t", tc.name); err != nil {
					t.Fatalf("Apply = %v", err)
				}
				p := current()
				if !slices.Equal(p.RuleIDs(), old.RuleIDs()) {
					t.Errorf("RuleIDs() = %v after the change, %v before: want the same keys", p.RuleIDs(), old.RuleIDs())
				}
				if after := used(p); !slices.Equal(after, before) {
					t.Errorf("used = %v after the change, %v before: want every count carried", after, before)
				}
				if tc.check != nil {
					tc.check(t, p)
				}
			})
		}
	}
}
