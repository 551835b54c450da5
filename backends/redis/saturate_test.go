package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// satRun is a Redis backend under a counted exempt and the memory backend
// (the reference) asked at each reply's instant, as in the differential
// test.
type satRun struct {
	t     *testing.T
	b     *Backend
	s     subject
	clock *fakeclock.Clock
	mem   *memory.Backend
}

func newSatRun(t *testing.T, b *Backend, name string) *satRun {
	t.Helper()
	clock := fakeclock.New(time.Time{})
	q := &satRun{t: t, b: b, s: newSubject(t, "sat-"+name), clock: clock, mem: memory.New(&memory.Options{Clock: clock})}
	ex := driver.Override{Kind: driver.Exempt, Counted: true}
	setOverride(t, b, q.s, ex)
	if _, err := q.mem.SetOverride(context.Background(), q.s.overrides(), ex); err != nil {
		t.Fatal(err)
	}
	return q
}

// do carries out req on Redis, then on memory at the reply's instant, and
// wants the same numbers, Used within [0, MaxUsed].
func (q *satRun) do(what string, req request) driver.Result {
	q.t.Helper()
	req = q.s.withOverrides(req)
	got := take(q.t, q.b, req)
	q.clock.Set(got.Now)
	want, err := memDo(context.Background(), q.mem, req.op, req.Request)
	if err != nil {
		q.t.Fatalf("%s: memory: %v", what, err)
	}
	for _, rr := range got.Rules {
		if rr.Used < 0 || rr.Used > driver.MaxUsed {
			q.t.Fatalf("%s: Used %d, want within [0, MaxUsed = %d]: %s", what, rr.Used, int64(driver.MaxUsed), resLine(got))
		}
	}
	if d := diffResults(got, want); d != "" {
		q.t.Fatalf("%s: %s\n  Redis  %s\n  memory %s", what, d, resLine(got), resLine(want))
	}
	return got
}

// TestExemptSaturatesLikeMemory: takes of 2^50-1 under a counted exempt
// drive every algorithm past MaxUsed (2^52) on take.lua and on the fast
// scripts, standalone and on a cluster: Used saturates there, as on the
// memory backend, never wrapping past the reply's 2^55 into negative
// numbers; GCRA (Used at most Burst+1) counts the units past its burst
// too, its TAT at most MaxDebt ahead, as on memory.
func TestExemptSaturatesLikeMemory(t *testing.T) {
	sb, _ := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	cb, _ := cluster(t)
	for name, b := range map[string]*Backend{"fast": sb, "take.lua": slow, "cluster": cb} {
		t.Run(name, func(t *testing.T) {
			q := newSatRun(t, b, name)
			rules := map[string]driver.Rule{
				"fixed":   q.s.fixed("f", 10, time.Hour),
				"sliding": q.s.sliding("s", 1000, time.Hour, 4),
				"logged":  q.s.sliding("sl", 10, time.Hour, 4), // ExactLog
				"log":     q.s.log("l", 10, time.Hour),
				"gcra":    q.s.gcra("g", 10, time.Hour, 5),
			}
			for rn, r := range rules {
				for k := range 7 { // 7 × (2^50-1) > 2^52: saturated from the 5th
					q.do(fmt.Sprintf("%s take %d", rn, k+1), q.s.request(opTake, driver.MaxLimit-1, r))
				}
				q.do(rn+" peek", q.s.request(opPeek, 1, r))
			}
			// All at once: one script, every rule saturated.
			all := []driver.Rule{rules["fixed"], rules["sliding"], rules["logged"], rules["log"], rules["gcra"]}
			q.do("all rules", q.s.request(opTake, driver.MaxLimit, all...))
		})
	}
}

// TestExemptSaturatedReservation: a reservation that took only what
// MaxUsed left gives back only that, on Redis as on memory.
func TestExemptSaturatedReservationRedis(t *testing.T) {
	b, _ := plainStandalone(t)
	q := newSatRun(t, b, "res")
	for _, r := range []driver.Rule{q.s.fixed("f", 10, time.Hour), q.s.sliding("s", 1000, time.Hour, 4), q.s.log("l", 10, time.Hour)} {
		for k := range 3 {
			q.do(fmt.Sprintf("%s take %d", r.Name, k+1), q.s.request(opTake, driver.MaxLimit, r))
		}
		q.do(r.Name+" take 4", q.s.request(opTake, driver.MaxLimit-5, r))
		res := q.s.request(opReserve, 1000, r)
		res.ReservationID, res.ReservationTTL = "res-"+r.Name, time.Minute
		q.do(r.Name+" reserve", res)
		ctx := context.Background()
		if err := b.Cancel(ctx, q.s.reservations(), res.ReservationID); err != nil {
			t.Fatal(err)
		}
		if err := q.mem.Cancel(ctx, q.s.reservations(), res.ReservationID); err != nil {
			t.Fatal(err)
		}
		if got := q.do(r.Name+" peek", q.s.request(opPeek, 1, r)); got.Rules[0].Used != driver.MaxUsed-5 {
			t.Errorf("%s: Used after Cancel = %d, want MaxUsed-5 (the 5 units the reservation took, given back)", r.Name, got.Rules[0].Used)
		}
	}
}

// TestExemptLogRebases: a packed sliding log's cumulative counts under a
// counted exempt that saturates it window after window pass 2^53 (where
// doubles stop being exact) and 2^56 (the field's width) unless they
// start again from 0: short windows, takes of 2^50-1 over 30 of them,
// each compared with memory.
func TestExemptLogRebases(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "take.lua"}[noFast], func(t *testing.T) {
			b, c := plainStandalone(t)
			b.noFast = noFast
			q := newSatRun(t, b, "rebase")
			const w = 20 * time.Millisecond
			r := q.s.log("l", 10, w)
			end := serverNow(t, c).Add(30 * w)
			deadline := time.Now().Add(60 * time.Second) // a bound on a loaded machine
			var n int
			for ; ; n++ {
				got := q.do(fmt.Sprintf("take %d", n+1), q.s.request(opTake, driver.MaxLimit-1, r))
				if !got.Now.Before(end) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("30 windows of %v not over within a minute (%d takes)", w, n+1)
				}
			}
			t.Logf("%d takes over 30 windows of %v", n+1, w)
		})
	}
}
