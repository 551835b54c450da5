package redis

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

// shadowOf returns r marked shadow (driver.Rule.Shadow).
func shadowOf(r driver.Rule) driver.Rule {
	r.Shadow = true
	return r
}

// TestShadowNeverDenies: a shadow rule of each algorithm is evaluated and
// reported, never denies, is consumed only when it admits, and a take it
// would have denied writes one trail entry marked shadow, allowed or not.
func TestShadowNeverDenies(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "shadow")
	for _, tc := range []struct {
		name   string
		shadow driver.Rule
	}{
		{"fixed", s.fixed("sf", 2, time.Hour)},
		{"sliding", s.sliding("ss", 2, time.Hour, 10)},
		{"log", s.log("sl", 2, time.Hour)},
		{"gcra", s.gcra("sg", 1, time.Hour, 1)}, // limit 2 as reported
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "shadow-"+tc.name)
			sh := tc.shadow
			sh.Key = s.key(sh.Name)
			rules := []driver.Rule{shadowOf(sh), s.fixed("enforced", 10, time.Hour)}
			for i, want := range []struct {
				shadowAllowed bool
				shadowUsed    int64
			}{{true, 1}, {true, 2}, {false, 2}, {false, 2}} {
				res := take(t, b, s.request(opTake, 1, rules...))
				if !res.Allowed {
					t.Fatalf("take %d = denied, want allowed (a shadow rule never denies)", i+1)
				}
				checkRule(t, "shadow rule", res.Rules[0], want.shadowAllowed, want.shadowUsed, 2)
				checkRule(t, "enforced rule", res.Rules[1], true, int64(i+1), 10)
			}
			ins := take(t, b, s.request(opInspect, 0, rules...))
			if len(ins.Trail) != 2 {
				t.Fatalf("Inspect(…).Trail = %+v, want 2 shadow entries", ins.Trail)
			}
			for _, d := range ins.Trail {
				if !d.Shadow || d.Rule != sh.Name || d.Used != 2 || d.Limit != 2 || d.Override != 0 {
					t.Errorf("trail entry = %+v, want a shadow denial of %s at used 2", d, sh.Name)
				}
			}
		})
	}
}

// TestShadowDeniedAttempt: when the enforced rules deny, a shadow rule
// that admits is not consumed, and the trail holds the enforced denial and
// the shadow one, each marked as it is.
func TestShadowDeniedAttempt(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "shadow-denied")
	rules := []driver.Rule{shadowOf(s.fixed("trial", 1, time.Hour)), s.fixed("cap", 1, time.Hour), shadowOf(s.sliding("wide", 9, time.Hour, 10))}
	take(t, b, s.request(opTake, 1, rules...))
	res := take(t, b, s.request(opTake, 1, rules...))
	if res.Allowed {
		t.Fatalf("second take = allowed, want denied by cap")
	}
	checkRule(t, "trial", res.Rules[0], false, 1, 1)
	checkRule(t, "cap", res.Rules[1], false, 1, 1)
	checkRule(t, "wide (admits, not consumed)", res.Rules[2], true, 1, 9)
	take(t, b, s.request(opPeek, 1, rules...)) // a peek writes no trail
	ins := take(t, b, s.request(opInspect, 0, rules...))
	if len(ins.Trail) != 2 {
		t.Fatalf("Inspect(…).Trail = %+v, want 2 entries", ins.Trail)
	}
	if d := ins.Trail[0]; d.Rule != "trial" || !d.Shadow {
		t.Errorf("trail[0] = %+v, want trial's shadow denial", d)
	}
	if d := ins.Trail[1]; d.Rule != "cap" || d.Shadow {
		t.Errorf("trail[1] = %+v, want cap's enforced denial", d)
	}
	checkRule(t, "wide after", ins.Rules[2], true, 1, 9)
}

// TestShadowKeepsState: turning a rule shadow, or back, keeps its counts
// (the shadow flag is not part of the rule's identity).
func TestShadowKeepsState(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "shadow-state")
	for _, r := range []driver.Rule{s.fixed("f", 5, time.Hour), s.sliding("s", 5, time.Hour, 4), s.log("l", 5, time.Hour), s.gcra("g", 5, time.Hour, 4)} {
		take(t, b, s.request(opTake, 2, r))
		res := take(t, b, s.request(opTake, 1, shadowOf(r)))
		checkRule(t, r.Name+" as shadow", res.Rules[0], true, 3, 5)
		res = take(t, b, s.request(opPeek, 1, r))
		checkRule(t, r.Name+" enforced again", res.Rules[0], true, 3, 5)
	}
}

// TestShadowReserve: a reserve a shadow rule would deny is allowed, its
// reservation gives back only what was taken.
func TestShadowReserve(t *testing.T) {
	b, _ := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "shadow-reserve")
	rules := []driver.Rule{shadowOf(s.fixed("trial", 1, time.Hour)), s.fixed("cap", 5, time.Hour)}
	take(t, b, s.request(opTake, 1, rules...))
	req := s.request(opReserve, 1, rules...)
	req.ReservationID, req.ReservationTTL = "h1", time.Minute
	res := take(t, b, req)
	if !res.Allowed || res.Rules[0].Allowed {
		t.Fatalf("Reserve(…) = %+v, want allowed with trial denying", res)
	}
	if err := b.Cancel(ctx, s.reservations(), "h1"); err != nil {
		t.Fatalf("Cancel(…) = %v", err)
	}
	res = take(t, b, s.request(opPeek, 1, rules...))
	checkRule(t, "trial after cancel", res.Rules[0], false, 1, 1)
	checkRule(t, "cap after cancel", res.Rules[1], true, 1, 5)
}

// TestShadowBatchAndCoalesced: shadow requests in a batch and coalesced
// decide as single calls do (through take.lua, in order).
func TestShadowBatchAndCoalesced(t *testing.T) {
	b, _ := standalone(t)
	cb, _ := coalescing(t, redistest.Standalone(t), 2)
	for name, be := range map[string]*Backend{"batch": b, "coalesced": cb} {
		t.Run(name, func(t *testing.T) {
			s := newSubject(t, "shadow-"+name)
			rules := []driver.Rule{shadowOf(s.fixed("trial", 1, time.Hour)), s.fixed("cap", 5, time.Hour)}
			reqs := make([]driver.Request, 3)
			for i := range reqs {
				reqs[i] = s.request(opTake, 1, rules...).Request
			}
			var out []driver.BatchResult
			if name == "batch" {
				out = be.TakeBatch(context.Background(), reqs)
			} else {
				for _, r := range reqs {
					res, err := be.Take(context.Background(), r)
					out = append(out, driver.BatchResult{Result: res, Err: err})
				}
			}
			for i, o := range out {
				if o.Err != nil || !o.Result.Allowed || o.Result.Rules[0].Allowed != (i == 0) || o.Result.Rules[1].Used != int64(i+1) {
					t.Errorf("attempt %d = %+v, %v, want allowed, trial admitting only first, cap used %d", i, o.Result, o.Err, i+1)
				}
			}
		})
	}
}

// TestShadowCluster: the same on a cluster (each decision on its
// subject's master).
func TestShadowCluster(t *testing.T) {
	b, _ := cluster(t)
	s := newSubject(t, "shadow-cluster")
	rules := []driver.Rule{shadowOf(s.log("trial", 1, time.Hour)), s.gcra("cap", 5, time.Hour, 4)}
	for i := range 3 {
		res := take(t, b, s.request(opTake, 1, rules...))
		if !res.Allowed || res.Rules[0].Allowed != (i == 0) {
			t.Fatalf("take %d = %+v, want allowed, trial admitting only the first", i+1, res)
		}
	}
	ins := take(t, b, s.request(opInspect, 0, rules...))
	if len(ins.Trail) != 2 || !ins.Trail[0].Shadow {
		t.Fatalf("Inspect(…).Trail = %+v, want 2 shadow entries", ins.Trail)
	}
}
