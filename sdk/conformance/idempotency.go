package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// The idempotency cases hold a backend to driver.Request.IdempotencyKey through
// the sdk's Attempt.IdempotencyKey: the first attempt with a key decides
// and stores its decision; a later one with the same key, for the
// policy's IdempotencyTTL (its longest window), gets that decision back
// with Replayed set, consuming nothing, writing no trail entry and making
// no reservation.

// keyed is an attempt of cost on the test's subject with idempotency key k.
func (e *env) keyed(k string, cost int64) sdk.Attempt {
	return sdk.Attempt{Subject: e.subject(), Cost: cost, IdempotencyKey: k}
}

// sameDecision checks that got replays first: Replayed set, and otherwise
// first's answer (At, Allowed, NonAtomic, every rule).
func (e *env) sameDecision(label string, got, first sdk.Decision) {
	e.t.Helper()
	if !got.Replayed {
		e.t.Errorf("%s: Replayed = false, want true (a second attempt with the same key)", label)
	}
	if !near(got.At, first.At, e.tol) {
		e.t.Errorf("%s: At = %v, want the first decision's %v", label, got.At, first.At)
	}
	if got.Allowed != first.Allowed || got.NonAtomic != first.NonAtomic {
		e.t.Errorf("%s: Allowed %t NonAtomic %t, want the first decision's %t %t", label,
			got.Allowed, got.NonAtomic, first.Allowed, first.NonAtomic)
	}
	if len(got.Rules) != len(first.Rules) {
		e.t.Fatalf("%s: %d rule decisions, want %d", label, len(got.Rules), len(first.Rules))
	}
	e.expect(label, got, first.Allowed, first.Rules...)
}

func (e *env) fresh(label string, d sdk.Decision) {
	e.t.Helper()
	if d.Replayed {
		e.t.Errorf("%s: Replayed = true, want false (no earlier attempt with this key is live)", label)
	}
}

func idemReplay(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	first := e.takeAttempt(e.keyed("a", 2), rules...)
	e.fresh("Take(all, cost 2, key a)", first)
	if !first.Allowed {
		e.t.Fatalf("Take(all, cost 2, key a) = denied, want allowed")
	}
	e.used("Take(all, cost 2, key a)", first, 2, 2, 2, 2)
	if e.fake != nil {
		e.fake.Advance(time.Second)
	}
	e.sameDecision("Take(all, cost 2, key a) again", e.takeAttempt(e.keyed("a", 2), rules...), first)
	e.used("Peek(all) after the replay (it consumed nothing)", e.peek(1, rules...), 2, 2, 2, 2)

	// The key names the attempt: a retry asking another cost still gets
	// the first decision.
	e.sameDecision("Take(all, cost 1, key a)", e.takeAttempt(e.keyed("a", 1), rules...), first)

	// A key first used by a take cannot be replayed by a reservation.
	if e.has(reserver) {
		_, _, err := e.lim.Reserve(bg(), e.policy(rules...), e.keyed("a", 2), time.Hour)
		if !errors.Is(err, sdk.ErrInvalidIdempotencyKey) {
			e.t.Errorf("Reserve(key a) after Take(key a) = %v, want %v", err, sdk.ErrInvalidIdempotencyKey)
		}
	}

	// Another key decides afresh.
	b := e.takeAttempt(e.keyed("b", 2), rules...)
	e.fresh("Take(all, cost 2, key b)", b)
	e.used("Take(all, cost 2, key b)", b, 4, 4, 4, 4)
	e.used("Peek(all)", e.peek(1, rules...), 4, 4, 4, 4)
}

func idemDenied(e *env) {
	w := e.pick(time.Minute, time.Second)
	f := e.fixed("f", 1, w)
	keep := e.fixed("keep", 1000, time.Hour) // makes the policy's IdempotencyTTL an hour
	start := e.alignTo(w, 0)
	e.before(e.take(1, f, keep), start.Add(w), "take")
	first := e.takeAttempt(e.keyed("d", 1), f, keep)
	e.before(first, start.Add(w), "take with key d")
	e.fresh("Take(f, key d) over the limit", first)
	e.expect("Take(f, key d) over the limit", first, false,
		want(false, 1, 1, start.Add(w).Sub(first.At), start.Add(w).Sub(first.At)))
	trail := 0
	if e.has(inspector) {
		_, tr := e.inspect(f, keep)
		if trail = len(tr); trail != 1 {
			e.t.Errorf("Inspect after one denial = %d trail entries, want 1", trail)
		}
	}
	// In the next window a fresh take is admitted; the retry still gets
	// the first (denied) decision, and adds nothing to the trail.
	e.advanceTo(start.Add(w))
	e.sameDecision("Take(f, key d) again in the next window", e.takeAttempt(e.keyed("d", 1), f, keep), first)
	if e.has(inspector) {
		if _, tr := e.inspect(f, keep); len(tr) != trail {
			e.t.Errorf("Inspect after a replayed denial = %d trail entries, want %d (a replay writes no trail)", len(tr), trail)
		}
	}
	d := e.take(1, f, keep)
	e.before(d, start.Add(2*w), "take")
	e.expect("Take(f) without a key in the next window", d, true, want(true, 1, 1, start.Add(2*w).Sub(d.At), 0))
}

func idemReserve(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := []sdk.Rule{e.fixed("f", 5, w), e.log("l", 5, w)}
	first, r1 := e.reserveAttempt(e.keyed("r", 2), time.Hour, rules...)
	e.fresh("Reserve(f+l, cost 2, key r)", first)
	if !first.Allowed || len(r1.ID()) != 16 {
		e.t.Fatalf("Reserve(f+l, cost 2, key r) = allowed %t, id %q, want allowed with an id", first.Allowed, r1.ID())
	}
	// The retry (the sdk makes another reservation id per call) gets the
	// first reservation back and makes none.
	again, r2 := e.reserveAttempt(e.keyed("r", 2), time.Hour, rules...)
	e.sameDecision("Reserve(f+l, cost 2, key r) again", again, first)
	if r2.ID() != r1.ID() {
		e.t.Errorf("Reserve(…, key r) again = reservation %q, want the first one, %q", r2.ID(), r1.ID())
	}
	e.used("Peek(f+l) after the replay", e.peek(1, rules...), 2, 2)
	if err := r2.Cancel(bg()); err != nil {
		e.t.Fatalf("Cancel (through the replayed reservation) = %v, want nil", err)
	}
	if err := r1.Cancel(bg()); !errors.Is(err, errNotFound) {
		e.t.Errorf("Cancel of the first reservation after it was cancelled = %v, want %v (one reservation)", err, errNotFound)
	}
	e.used("Peek(f+l) after the cancel", e.peek(1, rules...), 0, 0)
	// The record outlives the reservation: a retry still replays,
	// consuming nothing.
	again, _ = e.reserveAttempt(e.keyed("r", 2), time.Hour, rules...)
	e.sameDecision("Reserve(…, key r) after the cancel", again, first)
	e.used("Peek(f+l) after the second replay", e.peek(1, rules...), 0, 0)
	// A key first used by a reservation cannot be replayed by a take.
	if _, err := e.lim.Take(bg(), e.policy(rules...), e.keyed("r", 2)); !errors.Is(err, sdk.ErrInvalidIdempotencyKey) {
		e.t.Errorf("Take(key r) after Reserve(key r) = %v, want %v", err, sdk.ErrInvalidIdempotencyKey)
	}

	// A denied reservation is replayed as denied, with no reservation.
	denied, _ := e.reserveAttempt(e.keyed("big", 6), time.Hour, rules...)
	if denied.Allowed {
		e.t.Fatalf("Reserve(f+l, cost 6, key big) = allowed, want denied")
	}
	again, _ = e.reserveAttempt(e.keyed("big", 6), time.Hour, rules...)
	e.sameDecision("Reserve(f+l, cost 6, key big) again", again, denied)
}

func idemExpires(e *env) {
	ttl := e.pick(time.Minute, 300*time.Millisecond)
	// The policy's IdempotencyTTL is its longest window: a log of ttl,
	// whose entries leave when the record does.
	l := e.log("l", 10, ttl)
	first := e.takeAttempt(e.keyed("x", 1), l)
	e.fresh("Take(l, key x)", first)
	e.used("Take(l, key x)", first, 1)
	if e.fake != nil {
		e.advanceTo(first.At.Add(ttl - time.Millisecond))
		e.sameDecision("Take(l, key x) 1ms before the ttl", e.takeAttempt(e.keyed("x", 1), l), first)
	}
	e.advanceTo(first.At.Add(ttl + e.tol + time.Millisecond))
	again := e.takeAttempt(e.keyed("x", 1), l)
	e.fresh(fmt.Sprintf("Take(l, key x) %v after the first", ttl), again)
	e.used("Take(l, key x) after the ttl (decided afresh: the first unit has left)", again, 1)
	// Both within ttl of again, or late (the record and its unit left).
	once := e.takeAttempt(e.keyed("x", 1), l)
	e.before(once, again.At.Add(ttl), "Take(l, key x) once more")
	e.sameDecision("Take(l, key x) once more (the new record)", once, again)
	peek := e.peek(1, l)
	e.before(peek, again.At.Add(ttl), "Peek(l)")
	e.used("Peek(l)", peek, 1)
}

func idemPeek(e *env) {
	f := e.fixed("f", 10, time.Hour)
	e.ensureRoom(time.Hour, 10*time.Second)
	p := e.policy(f)
	d, err := e.lim.Peek(bg(), p, e.keyed("p", 1))
	d = e.shaped("Peek(f, key p)", []sdk.Rule{f}, d, err)
	e.fresh("Peek(f, key p)", d)
	e.used("Peek(f, key p)", d, 0)
	d = e.takeAttempt(e.keyed("p", 1), f)
	e.fresh("Take(f, key p) after a peek with key p (a peek stores nothing)", d)
	e.used("Take(f, key p)", d, 1)
	d, err = e.lim.Peek(bg(), p, e.keyed("p", 1))
	d = e.shaped("Peek(f, key p) after the take", []sdk.Rule{f}, d, err)
	e.fresh("Peek(f, key p) after the take (a peek never replays)", d)
	e.used("Peek(f, key p) after the take", d, 1)
}

func idemReset(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 10, w)
	first := e.takeAttempt(e.keyed("k", 3), f)
	if err := e.lim.Admin().Reset(bg(), e.policy(f), e.subject()); err != nil {
		e.t.Fatalf("Reset = %v", err)
	}
	e.sameDecision("Take(f, key k) after Reset (Reset keeps idempotency records)", e.takeAttempt(e.keyed("k", 3), f), first)
	e.used("Peek(f) after Reset and the replay", e.peek(1, f), 0)
}
