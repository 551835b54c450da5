package conformance

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The numbers cases: rules at the largest numbers sdk accepts
// (driver.MaxLimit, MaxWindow, MaxTolerance, MinInterval) count exactly,
// unit by unit, on every backend: no overflow in Go's int64, no rounding
// in Lua's doubles.

// exact checks a single-rule result's verdict and counts: Allowed, Used,
// Limit, Remaining exactly, and a positive RetryAfter when denied.
func (e *env) exact(label string, res sdk.Decision, allowed bool, used, limit int64) {
	e.t.Helper()
	g := res.Rules[0]
	if res.Allowed != allowed || g.Allowed != allowed || g.CostTooHigh || g.Used != used || g.Limit != limit ||
		g.Remaining != limit-used || allowed != (g.RetryAfter == 0) {
		e.t.Errorf("%s = %s (allowed %t), want allowed %t, used %d, limit %d, remaining %d, a retry-after iff denied",
			label, fmtRule(g), res.Allowed, allowed, used, limit, limit-used)
	}
}

// numbersMaxLimit: Limit = MaxLimit; take MaxLimit-1, then 1, then 1 more
// is denied (fixed and sliding window). The log is checked with small
// takes and large peeks (it stores one entry per unit taken).
func numbersMaxLimit(e *env) {
	const m = driver.MaxLimit
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	for _, r := range []sdk.Rule{e.fixed("f", m, w), e.sliding("s", m, w, 10)} {
		e.exact(fmt.Sprintf("Take(%s, cost MaxLimit-1)", r.Name), e.take(m-1, r), true, m-1, m)
		e.exact(fmt.Sprintf("Peek(%s, cost 2) at MaxLimit-1", r.Name), e.peek(2, r), false, m-1, m)
		e.exact(fmt.Sprintf("Take(%s, cost 1) to MaxLimit", r.Name), e.take(1, r), true, m, m)
		e.exact(fmt.Sprintf("Take(%s, cost 1) beyond MaxLimit", r.Name), e.take(1, r), false, m, m)
		e.exact(fmt.Sprintf("Take(%s, cost MaxLimit) beyond MaxLimit", r.Name), e.take(m, r), false, m, m)
	}
	l := e.log("l", m, w)
	e.exact("Take(l, cost 1)", e.take(1, l), true, 1, m)
	e.exact("Peek(l, cost MaxLimit-1) after 1", e.peek(m-1, l), true, 1, m)
	e.exact("Peek(l, cost MaxLimit) after 1", e.peek(m, l), false, 1, m)
	e.exact("Take(l, cost 1) again", e.take(1, l), true, 2, m)
	e.exact("Peek(l, cost MaxLimit-2) after 2", e.peek(m-2, l), true, 2, m)
	e.exact("Peek(l, cost MaxLimit-1) after 2", e.peek(m-1, l), false, 2, m)
}

// numbersMaxWindow: every algorithm with Window = MaxWindow (GCRA: 1024
// per MaxWindow, T = 2^41 µs, about 25 days, a whole number of µs: a
// fractional one rounds on plain Lua, which is GCRA's own arithmetic, not
// the size of its numbers) admits 2, denies the third, and a fixed
// window's reset is its epoch-aligned end, in 2041.
func numbersMaxWindow(e *env) {
	w := driver.MaxWindow
	f := e.fixed("f", 2, w)
	for _, r := range []sdk.Rule{f, e.sliding("s", 2, w, 10), e.log("l", 2, w), e.gcra("g", 1024, w, 1)} {
		e.exact(fmt.Sprintf("Take(%s, cost 2) of 2 per MaxWindow", r.Name), e.take(2, r), true, 2, 2)
		e.exact(fmt.Sprintf("Take(%s, cost 1) after 2", r.Name), e.take(1, r), false, 2, 2)
	}
	res := e.peek(1, f)
	end := windowStart(res.At, w).Add(w)
	e.expect("Peek(f) of 2 per MaxWindow", res, false, want(false, 2, 2, end.Sub(res.At), end.Sub(res.At)))
}

// numbersGCRAMaxTolerance: one per second with the largest burst the
// tolerance allows (MaxTolerance/1s units): take all but one, then one,
// then one more is denied, all within a second of the first.
func numbersGCRAMaxTolerance(e *env) {
	limit := int64(driver.MaxTolerance / time.Second) // Burst+1
	r := e.gcra("g", 1, time.Second, limit-1)
	res := e.take(limit-1, r)
	t0 := res.At
	e.exact("Take(g, cost Burst)", res, true, limit-1, limit)
	res = e.take(1, r)
	e.exact("Take(g, cost 1) to Burst+1", res, true, limit, limit)
	res = e.take(1, r)
	e.before(res, t0.Add(time.Second), "the third take")
	e.exact("Take(g, cost 1) beyond Burst+1", res, false, limit, limit)
	if want := t0.Add(time.Second).Sub(res.At); !nearDur(res.Rules[0].RetryAfter, want, e.tol) {
		e.t.Errorf("Take(g, cost 1) beyond Burst+1: RetryAfter = %v, want %v (one interval after the first take)", res.Rules[0].RetryAfter, want)
	}
}

// numbersGCRAMinInterval: a million per second (T = MinInterval) with the
// largest burst the tolerance allows: all but one unit at once leaves
// exactly one. Then, with a fake clock, the reference model's answers to
// the following calls. (With a real clock, a unit comes back every µs,
// and redis-cell decides by a clock of its own some µs after the script's
// TIME: counts after the first call differ by the µs between the clocks.)
func numbersGCRAMinInterval(e *env) {
	t := driver.MinInterval
	limit := int64(driver.MaxTolerance / t) // Burst+1
	r := e.gcra("g", int64(time.Second/t), time.Second, limit-1)
	m := newGCRAModel(r)
	res := e.take(limit-1, r)
	m.step(res.At, limit-1, true)
	e.exact("Take(g, cost Burst)", res, true, limit-1, limit)
	res = e.take(limit, r)
	if g := res.Rules[0]; res.Allowed || g.CostTooHigh || g.RetryAfter <= 0 {
		e.t.Errorf("Take(g, cost Burst+1) after Burst = %s, want denied with a retry-after, not cost too high", fmtRule(g))
	}
	if e.fake == nil {
		return
	}
	check := e.checker(m)
	check("Take(g, cost 1)", e.take(1, r), 1, true)
	check("Peek(g, cost 1)", e.peek(1, r), 1, false)
	e.fake.Advance(999 * time.Microsecond) // 999 units back
	res = e.take(1000, r)
	check("Take(g, cost 1000) 999µs later", res, 1000, true)
	if res.Allowed {
		e.t.Errorf("Take(g, cost 1000) 999µs after the burst = allowed, want denied (999 units back)")
	}
	res = e.take(999, r)
	check("Take(g, cost 999) 999µs later", res, 999, true)
	if !res.Allowed || res.Rules[0].Used != limit {
		e.t.Errorf("Take(g, cost 999) 999µs after the burst = %s, want allowed, used %d", fmtRule(res.Rules[0]), limit)
	}
	check("Take(g, cost Burst+1)", e.take(limit, r), limit, true)
}
