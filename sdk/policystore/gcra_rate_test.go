package policystore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// gcraBackends are the backends the GCRA rate tests run the store on:
// memory on a fake clock, Redis and Redis Cluster on the server's clock
// (the tests take no time: 2 h windows, attempts within a second).
func gcraBackends() []struct {
	name  string
	store func(t *testing.T) (*policystore.Store, *sdk.Limiter)
} {
	return []struct {
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
		{"cluster", func(t *testing.T) (*policystore.Store, *sdk.Limiter) {
			lim, st := redisPair(t, true, uniquePrefix(t))
			return st, lim
		}},
	}
}

func gcraDoc(limit, burst int64) string {
	return fmt.Sprintf("policies:\n  - name: p\n    rules:\n      - {name: r, algorithm: gcra, limit: %d, window: 2h, burst: %d, by: [user]}\n", limit, burst)
}

// planned returns the plan of src and its one rule's diff.
func planned(t *testing.T, s *policystore.Store, src string) (*policystore.Plan, policystore.RuleDiff) {
	t.Helper()
	plan, err := s.Plan(context.Background(), []byte(src))
	if err != nil {
		t.Fatalf("Plan = %v", err)
	}
	if len(plan.Diffs) != 1 || len(plan.Diffs[0].Rules) != 1 {
		t.Fatalf("Plan diffs = %+v, want one policy with one rule", plan.Diffs)
	}
	return plan, plan.Diffs[0].Rules[0]
}

// TestStoreGCRARateChange: a GCRA rule's rate changed through the store
// (issue 38). The state is a theoretical arrival time, whose units are
// the emission interval: read at another interval it held another count
// (10/10 shown as 5/10 after 10 → 5 per 2 h, and 5 more admitted). The
// plan now says the identity changed and carries conservatively, and
// the people capped stay capped; a burst-only change keeps the interval
// and carries exactly.
func TestStoreGCRARateChange(t *testing.T) {
	for _, be := range gcraBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			current := func(s *policystore.Store) *sdk.Policy {
				t.Helper()
				v, err := s.Version(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				ps, err := v.Policies()
				if err != nil {
					t.Fatal(err)
				}
				return ps[0]
			}
			take := func(lim *sdk.Limiter, p *sdk.Policy, user string) sdk.Decision {
				t.Helper()
				d, err := lim.Allow(ctx, p, sdk.Subject{"user": user})
				if err != nil {
					t.Fatalf("Allow = %v", err)
				}
				return d
			}
			// used is what the current (not a former) rule reports.
			used := func(d sdk.Decision) (int64, int64) {
				for _, r := range d.Rules {
					if r.Before == 0 {
						return r.Used, r.Limit
					}
				}
				t.Fatalf("decision %+v has no current rule", d)
				return 0, 0
			}

			t.Run("rate lowered, burst kept", func(t *testing.T) {
				s, lim := be.store(t)
				mustApply(t, s, gcraDoc(10, 9), false)
				p := current(s)
				for i := range 10 {
					if !take(lim, p, "full").Allowed {
						t.Fatalf("attempt %d under 10 per 2h burst 9 denied, want allowed", i+1)
					}
				}
				for i := range 4 {
					if !take(lim, p, "four").Allowed {
						t.Fatalf("attempt %d of four denied", i+1)
					}
				}
				plan, rd := planned(t, s, gcraDoc(5, 9))
				if rd.Kind != policystore.Reidentified || rd.Carry != policystore.CarriesConservatively {
					t.Errorf("plan of 10 → 5 per 2h: %v, %v, want identity changed, carries conservatively\n%s", rd.Kind, rd.Carry, plan)
				}
				if _, err := s.Apply(ctx, plan, "t", ""); err != nil {
					t.Fatalf("Apply = %v", err)
				}
				p = current(s)
				d := take(lim, p, "full")
				if u, l := used(d); d.Allowed || u < 10 {
					t.Errorf("after 10 → 5 per 2h, the person at 10/10: allowed %v, used %d/%d; want denied, used 10", d.Allowed, u, l)
				}
				for i := range 5 {
					if take(lim, p, "full").Allowed {
						t.Fatalf("after 10 → 5 per 2h, attempt %d of the person at 10/10 allowed: neither version admits an 11th", i+2)
					}
				}
				// 4 used: the new rule (10 at once, then one per 24 min)
				// admits 6 more, the old one too: 6, not 8.
				admitted := 0
				for range 10 {
					d := take(lim, p, "four")
					if d.Allowed {
						admitted++
					}
				}
				if admitted != 6 {
					t.Errorf("after 10 → 5 per 2h, the person at 4 used was admitted %d more, want 6", admitted)
				}
			})

			t.Run("rate and burst lowered", func(t *testing.T) {
				s, lim := be.store(t)
				mustApply(t, s, gcraDoc(10, 9), false)
				p := current(s)
				rng := rand.New(rand.NewPCG(38, 110))
				fill := make([]int, 110)
				for u := range fill {
					fill[u] = rng.IntN(11)
					for i := range fill[u] {
						if !take(lim, p, fmt.Sprint("p", u)).Allowed {
							t.Fatalf("person %d attempt %d denied under 10 per 2h burst 9", u, i+1)
						}
					}
				}
				plan, rd := planned(t, s, gcraDoc(5, 4))
				if rd.Kind != policystore.Reidentified || rd.Carry != policystore.CarriesConservatively {
					t.Errorf("plan of 10 → 5 per 2h, burst 9 → 4: %v, %v, want identity changed, carries conservatively", rd.Kind, rd.Carry)
				}
				if _, err := s.Apply(ctx, plan, "t", ""); err != nil {
					t.Fatalf("Apply = %v", err)
				}
				p = current(s)
				over := 0
				for u, k := range fill {
					admitted := 0
					for range 6 {
						if take(lim, p, fmt.Sprint("p", u)).Allowed {
							admitted++
						}
					}
					// The new rule admits 5 at once: 5-k more, none past 5.
					if left := max(0, 5-k); admitted != left {
						over++
						t.Errorf("person %d at %d used: %d admitted after 10 → 5 per 2h, burst 9 → 4, want %d (what the new limit left)", u, k, admitted, left)
					}
				}
				if over > 0 {
					t.Errorf("%d of %d people admitted other than the new limit left", over, len(fill))
				}
			})

			t.Run("burst only", func(t *testing.T) {
				s, lim := be.store(t)
				mustApply(t, s, gcraDoc(10, 9), false)
				p := current(s)
				for range 7 {
					take(lim, p, "seven")
				}
				plan, rd := planned(t, s, gcraDoc(10, 4))
				if rd.Kind != policystore.Modified || rd.Carry != policystore.CarriesExactly {
					t.Errorf("plan of burst 9 → 4: %v, %v, want modified, carries exactly", rd.Kind, rd.Carry)
				}
				if _, err := s.Apply(ctx, plan, "t", ""); err != nil {
					t.Fatalf("Apply = %v", err)
				}
				d, err := lim.Peek(ctx, current(s), sdk.Attempt{Subject: sdk.Subject{"user": "seven"}, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				// 7 held, the new limit 5: the state is the same, the
				// report clamps to the limit.
				if u, l := used(d); d.Allowed || u != 5 || l != 5 {
					t.Errorf("after burst 9 → 4, 7 used: allowed %v, used %d/%d, want denied, 5/5", d.Allowed, u, l)
				}
			})
		})
	}
}
