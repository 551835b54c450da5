package policystore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestStoreChangesKeepCaps applies each kind of change to a rule through
// the store and decides with the versions as stored: a person capped
// before an identity change stays capped after it and after a rollback;
// a limit change carries the counts exactly; a re-key starts afresh.
func TestStoreChangesKeepCaps(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		testChangesKeepCaps(t, func(t *testing.T) (*policystore.Store, *sdk.Limiter, func(time.Duration)) {
			// 10:00 UTC: inside one UTC day and one Shanghai day (18:00).
			clock := fakeclock.New(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
			b := memory.New(&memory.Options{Clock: clock})
			lim := sdk.New(b)
			return policystore.New(b, policystore.WithClock(clock)), lim, clock.Advance
		})
	})
	t.Run("redis", func(t *testing.T) {
		testChangesKeepCaps(t, func(t *testing.T) (*policystore.Store, *sdk.Limiter, func(time.Duration)) {
			// The server's clock: nothing here waits for a window to pass.
			lim, st := redisPair(t, false, uniquePrefix(t))
			return st, lim, func(time.Duration) {}
		})
	})
}

func testChangesKeepCaps(t *testing.T, newStore func(t *testing.T) (*policystore.Store, *sdk.Limiter, func(time.Duration))) {
	rule := func(def string) string {
		if !strings.Contains(def, "limit:") {
			def = "limit: 3, " + def
		}
		if !strings.Contains(def, "by:") {
			def += ", by: [user]"
		}
		return "policies:\n  - name: p\n    rules:\n      - {name: r, " + def + "}\n"
	}
	tests := []struct {
		name, before, after string
		rekey               bool
		capped              bool // the attempt after the change is denied
	}{
		{"window", "algorithm: fixed_window, window: 1h", "algorithm: fixed_window, window: 2h", false, true},
		{"log window", "algorithm: sliding_log, window: 1h", "algorithm: sliding_log, window: 2h", false, true},
		{"sub-windows", "algorithm: sliding_window, window: 1h, sub_windows: 6", "algorithm: sliding_window, window: 1h, sub_windows: 12", false, true},
		{"fixed to sliding", "algorithm: fixed_window, window: 1h", "algorithm: sliding_window, window: 1h", false, true},
		{"sliding to log", "algorithm: sliding_window, window: 1h", "algorithm: sliding_log, window: 1h", false, true},
		{"log to gcra", "algorithm: sliding_log, window: 1h", "algorithm: gcra, window: 1h, burst: 2", false, true},
		{"gcra to fixed", "algorithm: gcra, window: 1h, burst: 2", "algorithm: fixed_window, window: 1h", false, true},
		{"calendar", "algorithm: fixed_window, window: 24h", "algorithm: fixed_window, calendar: day, timezone: UTC", false, true},
		{"zone", "algorithm: fixed_window, calendar: day, timezone: UTC", "algorithm: fixed_window, calendar: day, timezone: Asia/Shanghai", false, true},
		{"limit", "algorithm: fixed_window, window: 1h", "algorithm: fixed_window, window: 1h, limit: 4", false, false},
		{"re-keyed", "algorithm: fixed_window, window: 1h", "algorithm: fixed_window, window: 1h, by: [user, app]", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, lim, advance := newStore(t)
			subject := sdk.Subject{"user": "u1", "app": "a"}
			allow := func(what string) bool {
				t.Helper()
				v, err := s.Version(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				ps, err := v.Policies()
				if err != nil {
					t.Fatalf("%s: Policies() = %v", what, err)
				}
				d, err := lim.Allow(ctx, ps[0], subject)
				if err != nil {
					t.Fatalf("%s: Allow = %v", what, err)
				}
				return d.Allowed
			}
			mustApply(t, s, rule(tc.before), false)
			for i := range 3 {
				advance(time.Minute)
				if !allow(fmt.Sprintf("attempt %d", i+1)) {
					t.Fatalf("attempt %d under version 1 denied, want allowed", i+1)
				}
			}
			if allow("attempt 4") {
				t.Fatal("attempt 4 under version 1 allowed, want denied (limit 3)")
			}
			advance(time.Minute)
			mustApply(t, s, rule(tc.after), tc.rekey)
			if capped := !allow("after the change"); capped != tc.capped {
				t.Errorf("after the change: capped %v, want %v", capped, tc.capped)
			}
			if tc.name == "limit" && allow("5th under limit 4") {
				// 3 counted before, the 4th admitted: the counts carried exactly.
				t.Errorf("limit 3 → 4: the 5th attempt was allowed, want denied")
			}
			if tc.rekey || tc.name == "limit" {
				return
			}
			// Roll back: a new version, the old identity under a new epoch,
			// seeded from the changed rule: still capped.
			advance(time.Minute)
			if _, err := s.Rollback(ctx, 1, "t", ""); err != nil {
				t.Fatalf("Rollback = %v", err)
			}
			if allow("after the rollback") {
				t.Errorf("after the rollback: allowed, want still capped")
			}
		})
	}
}

// TestStoreAddedRuleKeepsOthers: adding a rule beside a capped one (the
// plan says the capped one is unchanged, carrying exactly) keeps it
// capped, on memory and Redis, whatever the two rules' algorithms.
func TestStoreAddedRuleKeepsOthers(t *testing.T) {
	algos := map[string]string{
		"fixed":   "algorithm: fixed_window, window: 1h",
		"sliding": "algorithm: sliding_window, window: 1h",
		"log":     "algorithm: sliding_log, window: 1h",
		"gcra":    "algorithm: gcra, window: 1h, burst: 2",
	}
	backends := []struct {
		name  string
		store func(t *testing.T) (*policystore.Store, *sdk.Limiter)
	}{
		{"memory", func(t *testing.T) (*policystore.Store, *sdk.Limiter) {
			clock := fakeclock.New(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
			b := memory.New(&memory.Options{Clock: clock})
			lim := sdk.New(b)
			return policystore.New(b, policystore.WithClock(clock)), lim
		}},
		{"redis", func(t *testing.T) (*policystore.Store, *sdk.Limiter) {
			lim, st := redisPair(t, false, uniquePrefix(t))
			return st, lim
		}},
	}
	for _, be := range backends {
		for _, a := range []string{"fixed", "sliding", "log", "gcra"} {
			for _, b := range []string{"fixed", "log"} {
				name := a + " beside added " + b
				t.Run(be.name+"/"+name, func(t *testing.T) {
					ctx := context.Background()
					s, lim := be.store(t)
					allow := func() bool {
						t.Helper()
						v, err := s.Version(ctx, 0)
						if err != nil {
							t.Fatal(err)
						}
						ps, err := v.Policies()
						if err != nil {
							t.Fatal(err)
						}
						d, err := lim.Allow(ctx, ps[0], sdk.Subject{"user": "u1"})
						if err != nil {
							t.Fatal(err)
						}
						return d.Allowed
					}
					v1 := "policies:\n  - name: p\n    rules:\n      - {name: a, limit: 3, by: [user], " + algos[a] + "}\n"
					mustApply(t, s, v1, false)
					for i := range 3 {
						if !allow() {
							t.Fatalf("attempt %d denied, want allowed", i+1)
						}
					}
					if allow() {
						t.Fatal("attempt 4 allowed, want denied")
					}
					mustApply(t, s, v1+"      - {name: b, limit: 100, by: [user], "+strings.Replace(algos[b], "1h", "2h", 1)+"}\n", false)
					if allow() {
						t.Errorf("after adding rule b: allowed, want a still capped")
					}
				})
			}
		}
	}
}
