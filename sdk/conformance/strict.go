package conformance

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// A SlidingWindow rule is strict: no interval of length Window, closed or
// half-open, ever holds more than Limit admitted units (docs/DESIGN.md,
// "SlidingWindow"). These cases hold a backend to that against a
// reference event log of what it admitted, stamped with its own clock
// (Decision.At).

// eventLog is the units a backend admitted for one rule, oldest first.
type eventLog struct {
	rule sdk.Rule
	at   []time.Time
	n    []int64
}

func (l *eventLog) add(t time.Time, n int64) {
	l.at = append(l.at, t)
	l.n = append(l.n, n)
}

// in returns the units logged at times in [from, to] (closed), or in
// (from, to] when open.
func (l *eventLog) in(from, to time.Time, open bool) int64 {
	k := sort.Search(len(l.at), func(k int) bool {
		if open {
			return l.at[k].After(from)
		}
		return !l.at[k].Before(from)
	})
	var sum int64
	for ; k < len(l.at) && !l.at[k].After(to); k++ {
		sum += l.n[k]
	}
	return sum
}

// slidingStrict drives three sliding rules (one whose cells do not divide
// its window) with irregular arrivals, costs and rule subsets, and checks
// after every admission that no interval of length Window ending there
// holds more than Limit units (an interval holding the most units can
// always be slid to end at an admitted unit, so this covers all of
// them). It also checks that a rule never counts fewer units than an
// exact log of (now-Window, now] holds. A fake clock runs 4000 steps over
// about half a simulated day; a real one about 2.5 seconds of 1-second
// windows.
func slidingStrict(e *env) {
	rng := rand.New(rand.NewPCG(0x5eed, 11))
	w := e.pick(time.Minute, time.Second)
	a := e.cells("a", 7, w, 10)
	b := e.cells("b", 4, e.pick(50*time.Second, 700*time.Millisecond), 3) // cells of 16.666s / 233ms
	c := e.cells("c", 3, e.pick(59*time.Second, 590*time.Millisecond), 10)
	logs := map[string]*eventLog{}
	for _, r := range []sdk.Rule{a, b, c} {
		logs[r.Name] = &eventLog{rule: r}
	}
	subsets := [][]sdk.Rule{{a, b, c}, {a, b, c}, {a}, {b, c}, {a, c}}
	s := w / 10
	steps, admitted := 0, 0
	start := e.now()
	for {
		if e.fake != nil && steps == 4000 || e.fake == nil && e.now().Sub(start) > 2500*time.Millisecond {
			break
		}
		steps++
		// The next arrival. Real clock: back to back, within a cell, or
		// exactly at a cell boundary of a. Fake clock: within a cell, a
		// few cells on, at a cell boundary of a, or up to one or three
		// windows on.
		next := func(d time.Duration) { e.advanceTo(e.now().Add(time.Duration(rng.Int64N(int64(d))))) }
		switch p := rng.Float64(); {
		case e.fake == nil && p < 0.5:
		case e.fake == nil && p < 0.85:
			next(s / 2)
		case e.fake == nil:
			e.advanceTo(windowStart(e.now(), s).Add(s))
		case p < 0.35:
			next(s / 4)
		case p < 0.7:
			next(2 * s)
		case p < 0.85:
			e.advanceTo(windowStart(e.now(), s).Add(s))
		case p < 0.97:
			next(w)
		default:
			next(3 * w)
		}
		cost := []int64{1, 1, 1, 2, 2, 3}[rng.IntN(6)] * cellScale
		rules := subsets[rng.IntN(len(subsets))]
		res := e.take(cost, rules...)
		for i, r := range rules {
			l, rr := logs[r.Name], res.Rules[i]
			exact := l.in(res.At.Add(-r.Window), res.At, true)
			if res.Allowed {
				exact += cost
			}
			if rr.Used < exact {
				e.t.Errorf("step %d: Take(%s, cost %d) at %v = %s, under-counts: %d units in (now-%v, now]",
					steps, r.Name, cost, res.At, fmtRule(rr), exact, r.Window)
			}
			if !res.Allowed {
				continue
			}
			l.add(res.At, cost)
			if got := l.in(res.At.Add(-r.Window), res.At, false); got > r.Limit {
				e.t.Fatalf("step %d: Take(%s, cost %d) admitted at %v: %d units in [now-%v, now], limit %d",
					steps, r.Name, cost, res.At, got, r.Window, r.Limit)
			}
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted < steps/20 {
		e.t.Errorf("%d of %d takes admitted: too few to test anything (a bug in the case)", admitted, steps)
	}
	e.t.Logf("%d takes, %d admitted, over %v of the backend's clock", steps, admitted, e.now().Sub(start))
}

// slidingSmallest is the smallest over-admission a window that drops its
// partly expired oldest cell allows: limit 1 per 10 cells, one unit just
// after a cell starts, another attempted at the start of the cell N
// cells later, less than a window after the first. It must be denied
// until the first unit's cell leaves the count, at (j+N+1)·s.
func slidingSmallest(e *env) {
	w := e.pick(10*time.Second, time.Second)
	s := w / 10
	r := e.cells("r", 1, w, 10)
	b := e.alignTo(s, e.pick(900*time.Millisecond, 10*time.Millisecond)) // cell j starts at b
	leave := w + s
	e.run(b, []sdk.Rule{r}, scaled([]step{
		{by: s, op: take, want: allowed(admits(1, 1, leave))},                  // in cell j
		{at: w, by: leave, op: take, want: denied(denies(1, 1, leave, leave))}, // cell j+N starts
	}))
	e.crossing(r, cellScale, b.Add(leave), true)
}

// slidingRetryExact: a denial's RetryAfter is exactly when enough frees
// (the cell holding the need-th oldest unit leaves at (j+N+1)·s), and
// waiting it out admits; before, every attempt is denied.
func slidingRetryExact(e *env) {
	w := e.pick(10*time.Second, time.Second)
	s := w / 10
	r := e.cells("r", 3, w, 10)
	b := e.alignTo(s, s/4) // cell j starts at b
	leave := w + s         // cell j's unit frees 1
	end := 3*s + w + s     // cell j+3 leaves
	steps := []step{
		{by: s, op: take, want: allowed(admits(1, 3, leave))},
		{at: 3*s + s/2, by: 4 * s, op: take, cost: 2, want: allowed(admits(3, 3, end))},
		// need 1: frees when cell j leaves
		{by: 4 * s, op: take, want: denied(denies(3, 3, end, leave))},
		// need 2: frees when cell j+3 leaves
		{by: leave, op: peek, cost: 2, want: denied(denies(3, 3, end, end))},
	}
	if e.has(inspector) { // a peek of 1
		steps = append(steps, step{by: leave, op: inspect, want: denied(denies(3, 3, end, leave))})
	}
	e.run(b, []sdk.Rule{r}, scaled(steps))
	e.crossing(r, cellScale, b.Add(leave), false)
	e.crossing(r, 2*cellScale, b.Add(end), true)
}

// crossing checks that cost is denied before leave (with RetryAfter =
// leave-now) and admitted from leave on, by takes when take, else peeks:
// with a fake clock at leave-1ms and at leave exactly; with a real one by
// peeks polled across leave (exact to the harness's tolerance), then a
// take once past it when take.
func (e *env) crossing(r sdk.Rule, cost int64, leave time.Time, take bool) {
	e.t.Helper()
	do := e.peek
	name := "Peek"
	if take {
		do, name = e.take, "Take"
	}
	if e.fake != nil {
		e.advanceTo(leave.Add(-time.Millisecond))
		res := do(cost, r)
		if res.Allowed || res.Rules[0].RetryAfter != time.Millisecond {
			e.t.Errorf("%s(%s, cost %d) 1ms before %v = %s, want denied with retry 1ms", name, r.Name, cost, leave, fmtRule(res.Rules[0]))
		}
		e.advanceTo(leave)
		if res = do(cost, r); !res.Allowed {
			e.t.Errorf("%s(%s, cost %d) at %v (retry-after elapsed) = %s, want allowed", name, r.Name, cost, leave, fmtRule(res.Rules[0]))
		}
		return
	}
	deadline := time.Now().Add(leave.Sub(e.now()) + 10*time.Second)
	before := 0
	for {
		res := e.peek(cost, r)
		d := leave.Sub(res.At)
		switch {
		case d > e.tol:
			before++
			if res.Allowed || !nearDur(res.Rules[0].RetryAfter, d, e.tol) {
				e.t.Fatalf("Peek(%s, cost %d) %v before %v = %s, want denied with retry %v", r.Name, cost, d, leave, fmtRule(res.Rules[0]), d)
			}
		case d <= -e.tol:
			if !res.Allowed {
				e.t.Fatalf("Peek(%s, cost %d) %v after %v = %s, want allowed", r.Name, cost, -d, leave, fmtRule(res.Rules[0]))
			}
			if before == 0 {
				// The first peek came after the boundary: late, as a step
				// decided past its deadline (Run retries with fresh keys).
				panic(late{fmt.Sprintf("Peek(%s, cost %d): the first peek was decided %v after %v, none before the boundary", r.Name, cost, -d, leave)})
			}
			if take {
				res = e.take(cost, r)
				if !res.Allowed {
					e.t.Errorf("Take(%s, cost %d) after %v = %s, want allowed", r.Name, cost, leave, fmtRule(res.Rules[0]))
				}
			}
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the backend's clock reads %v, has not passed %v by the deadline", res.At, leave)
		}
		if d > 30*time.Millisecond {
			time.Sleep(min(d/2, 20*time.Millisecond)) // poll; spin near the boundary
		}
	}
}
