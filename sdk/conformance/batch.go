package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The batch cases hold a backend to driver.Batcher through the sdk's
// TakeBatch and PeekBatch: one result per attempt in input order, each
// attempt atomic by itself, attempts on one subject carried out in order,
// failures reported per attempt.

// attempt is an attempt on the test's subject (sub: on another one).
func (e *env) attempt(cost int64, sub ...string) sdk.Attempt {
	return sdk.Attempt{Subject: e.subject(sub...), Cost: cost}
}

// batch sends as in one TakeBatch (peek: PeekBatch) under the policy of
// rules and checks the number of results.
func (e *env) batch(peek bool, as []sdk.Attempt, rules ...sdk.Rule) []sdk.BatchResult {
	e.t.Helper()
	p := e.policy(rules...)
	var out []sdk.BatchResult
	if peek {
		out = e.lim.PeekBatch(bg(), p, as)
	} else {
		out = e.lim.TakeBatch(bg(), p, as)
	}
	if len(out) != len(as) {
		e.t.Fatalf("TakeBatch(%d attempts) = %d results, want %d", len(as), len(out), len(as))
	}
	return out
}

// ok returns br's decision, failing the test on an error or a malformed
// decision.
func (e *env) ok(label string, br sdk.BatchResult, rules ...sdk.Rule) sdk.Decision {
	e.t.Helper()
	return e.shaped(label, rules, br.Decision, br.Err)
}

// batchOrder: eight subjects (eight hash tags) with 0..3 units used of 3
// each; one batch takes a unit from each, then a peek batch sees them.
func batchOrder(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 3, w)
	if out := e.batch(false, nil, f); len(out) != 0 {
		e.t.Errorf("TakeBatch(no attempts) = %d results, want 0", len(out))
	}
	var as []sdk.Attempt
	for i := range 8 {
		sub := fmt.Sprint(i)
		if pre := int64(i % 4); pre > 0 {
			e.takeAttempt(e.attempt(pre, sub), f)
		}
		as = append(as, e.attempt(1, sub))
	}
	out := e.batch(false, as, f)
	for i := range 8 {
		label := fmt.Sprintf("TakeBatch entry %d (subject %d, %d of 3 used before)", i, i, i%4)
		d := e.ok(label, out[i], f)
		if allowed := i%4 < 3; d.Allowed != allowed {
			e.t.Errorf("%s: Allowed = %t, want %t", label, d.Allowed, allowed)
		}
		e.used(label, d, min(int64(i%4)+1, 3))
	}
	peeks := e.batch(true, as, f)
	for i := range 8 {
		label := fmt.Sprintf("PeekBatch entry %d (subject %d, after the take batch)", i, i)
		d := e.ok(label, peeks[i], f)
		if allowed := i%4 < 2; d.Allowed != allowed {
			e.t.Errorf("%s: Allowed = %t, want %t", label, d.Allowed, allowed)
		}
		e.used(label, d, min(int64(i%4)+1, 3))
	}
}

// batchSameSubject: attempts on one subject in one batch are decided in
// order, each all-or-nothing.
func batchSameSubject(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 4, w)
	g := e.log("g", 100, w)
	out := e.batch(false, []sdk.Attempt{e.attempt(3), e.attempt(3), e.attempt(1), e.attempt(1)}, f, g)
	wants := []struct {
		allowed bool
		f, g    int64
	}{{true, 3, 3}, {false, 3, 3}, {true, 4, 4}, {false, 4, 4}}
	for i, w := range wants {
		label := fmt.Sprintf("TakeBatch entry %d", i)
		d := e.ok(label, out[i], f, g)
		if d.Allowed != w.allowed {
			e.t.Errorf("%s: Allowed = %t, want %t", label, d.Allowed, w.allowed)
		}
		e.used(label, d, w.f, w.g)
	}
	peeks := e.batch(true, []sdk.Attempt{e.attempt(1), e.attempt(1)}, f, g)
	for i := range peeks {
		d := e.ok(fmt.Sprintf("PeekBatch entry %d", i), peeks[i], f, g)
		e.used(fmt.Sprintf("PeekBatch entry %d (a denied attempt took nothing from g)", i), d, 4, 4)
	}
}

// batchErrors: an invalid attempt fails alone; so does an invalid request
// the backend is sent directly (the sdk never sends one: driver.Batcher's
// contract still holds).
func batchErrors(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 5, w)
	bad := sdk.Attempt{Subject: sdk.Subject{}}
	out := e.batch(false, []sdk.Attempt{e.attempt(1), bad, e.attempt(2, "other"), {Subject: e.subject(), Cost: -1}, e.attempt(1)}, f)
	if !errors.Is(out[1].Err, sdk.ErrInvalidSubject) {
		e.t.Errorf("TakeBatch entry 1 (no subject) = %v, want %v", out[1].Err, sdk.ErrInvalidSubject)
	}
	if !errors.Is(out[3].Err, sdk.ErrInvalidCost) {
		e.t.Errorf("TakeBatch entry 3 (cost -1) = %v, want %v", out[3].Err, sdk.ErrInvalidCost)
	}
	e.used("TakeBatch entry 0", e.ok("TakeBatch entry 0", out[0], f), 1)
	e.used("TakeBatch entry 2", e.ok("TakeBatch entry 2", out[2], f), 2)
	e.used("TakeBatch entry 4", e.ok("TakeBatch entry 4", out[4], f), 2)

	// Directly: a request of cost 0 fails alone.
	bt := e.b.(driver.Batcher)
	k := e.lim.Admin().KeyLayout(e.policy(f), e.subject("direct"))
	rule := driver.Rule{Name: "f", Key: k.Sets[0].Rules[0].Key, Group: k.Sets[0].Key, Algorithm: driver.FixedWindow, Limit: 5, Window: w}
	req := driver.Request{Policy: "p", Rules: []driver.Rule{rule}, Cost: 1, TrailKey: k.Trail, ReservationKey: k.Reservations}
	zero := req
	zero.Cost = 0
	for _, peek := range []bool{false, true} {
		var brs []driver.BatchResult
		if peek {
			brs = bt.PeekBatch(bg(), []driver.Request{req, zero, req})
		} else {
			brs = bt.TakeBatch(bg(), []driver.Request{req, zero, req})
		}
		if len(brs) != 3 || brs[1].Err == nil || brs[0].Err != nil || brs[2].Err != nil {
			e.t.Fatalf("driver Batcher (peek %t) of [ok, cost 0, ok] = %+v, want the cost-0 request alone to fail", peek, brs)
		}
		// The take batch took 2 (the cost-0 request nothing); the peek
		// batch sees them.
		if g := brs[2].Result.Rules[0].Used; g != 2 {
			e.t.Errorf("driver Batcher (peek %t) entry 2 = used %d, want 2", peek, g)
		}
	}
}

// batchIdem: idempotency keys work within and across batches.
func batchIdem(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 10, w)
	a := sdk.Attempt{Subject: e.subject(), Cost: 1, IdempotencyKey: "a"}
	as := []sdk.Attempt{
		a,
		a, // the same attempt again, in the same batch
		{Subject: e.subject("b"), Cost: 1, IdempotencyKey: "a"}, // the same key for another subject: another attempt
		e.attempt(1), // no key
	}
	check := func(round string, out []sdk.BatchResult) []sdk.Decision {
		e.t.Helper()
		ds := make([]sdk.Decision, len(out))
		for i := range out {
			ds[i] = e.ok(fmt.Sprintf("%s entry %d", round, i), out[i], f)
		}
		return ds
	}
	r1 := check("first batch", e.batch(false, as, f))
	e.fresh("first batch entry 0", r1[0])
	e.used("first batch entry 0", r1[0], 1)
	e.sameDecision("first batch entry 1 (key a again)", r1[1], r1[0])
	e.fresh("first batch entry 2 (key a, subject b)", r1[2])
	e.used("first batch entry 2", r1[2], 1)
	e.fresh("first batch entry 3 (no key)", r1[3])
	e.used("first batch entry 3", r1[3], 2)

	r2 := check("retried batch", e.batch(false, as, f))
	e.sameDecision("retried batch entry 0", r2[0], r1[0])
	e.sameDecision("retried batch entry 1", r2[1], r1[0])
	e.sameDecision("retried batch entry 2", r2[2], r1[2])
	e.fresh("retried batch entry 3 (no key)", r2[3])
	e.used("retried batch entry 3", r2[3], 3)
	e.used("Peek(f)", e.peek(1, f), 3)
}
