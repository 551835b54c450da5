package memory

import (
	"sort"
	"time"

	"github.com/freqcap/freqcap/internal/arith"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The algorithms are pure functions of (state, rule, cost, now), written
// after docs/DESIGN.md, "Algorithms: exact semantics". Each has a step
// (the verdict for cost and the state after consuming it) and a report
// (Used and ResetAfter of a state, as of now). The caller decides whether
// the step's state is kept: only when every rule of a request admits.

// verdict is one rule's answer to a cost.
type verdict struct {
	Allowed     bool
	CostTooHigh bool
	RetryAfter  time.Duration // when denied and not CostTooHigh
}

// ruleResult assembles a driver.RuleResult from a report and a verdict.
func ruleResult(limit, used int64, resetAfter time.Duration, v verdict) driver.RuleResult {
	res := driver.RuleResult{
		Allowed:     v.Allowed,
		Used:        used,
		Limit:       limit,
		Remaining:   max(0, limit-used),
		ResetAfter:  max(0, resetAfter),
		CostTooHigh: v.CostTooHigh,
	}
	if !v.Allowed && !v.CostTooHigh {
		res.RetryAfter = max(0, v.RetryAfter)
	}
	return res
}

// ---- FixedWindow ----

// fixedState is a fixed window's counter: count units in the window that
// ends at end. The zero value is an empty window.
type fixedState struct {
	end   time.Time
	count int64
}

// fixedBounds returns the window around now: epoch-aligned, or the local
// day or hour in r.Location for a calendar rule.
func fixedBounds(r driver.Rule, now time.Time) (start, end time.Time) {
	switch r.Calendar {
	case driver.Day:
		loc := r.Location
		if loc == nil {
			loc = time.UTC
		}
		y, m, d := now.In(loc).Date()
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		if start.After(now) { // a zone whose midnight does not exist that day
			start = now
		}
		return start, end
	case driver.Hour:
		loc := r.Location
		if loc == nil {
			loc = time.UTC
		}
		start = hourStart(now, loc)
		end = hourStart(start.Add(time.Hour+time.Minute), loc)
		if !end.After(start) {
			end = start.Add(time.Hour)
		}
		return start, end
	}
	w := int64(r.Window)
	s := arith.FloorDiv(now.UnixNano(), w) * w
	return time.Unix(0, s), time.Unix(0, s+w)
}

// hourStart is the start of the local hour in loc at or before t.
func hourStart(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	into := time.Duration(lt.Minute())*time.Minute + time.Duration(lt.Second())*time.Second +
		time.Duration(lt.Nanosecond())
	return t.Add(-into)
}

func fixedUsed(st fixedState, end time.Time) int64 {
	if st.end.Equal(end) {
		return st.count
	}
	return 0
}

// fixedStep admits cost iff used+cost <= Limit in the window around now.
func fixedStep(st fixedState, r driver.Rule, cost int64, now time.Time) (fixedState, verdict) {
	_, end := fixedBounds(r, now)
	used := fixedUsed(st, end)
	switch {
	case cost > r.Limit:
		return st, verdict{CostTooHigh: true}
	case used+cost > r.Limit:
		return st, verdict{RetryAfter: end.Sub(now)}
	}
	return fixedState{end: end, count: used + cost}, verdict{Allowed: true}
}

// fixedReport: ResetAfter is the window's end when anything is used.
func fixedReport(st fixedState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	_, end := fixedBounds(r, now)
	used = fixedUsed(st, end)
	if used > 0 {
		resetAfter = end.Sub(now)
	}
	return used, resetAfter
}

// ---- SlidingWindow ----

// cell is one sub-window of a sliding window: index floor(t/size).
type cell struct {
	idx int64
	n   int64
}

// slidingState holds the non-empty cells, oldest first.
type slidingState struct {
	cells []cell
}

// cellLeaves is when cell idx stops counting (driver.CellSpan.Leaves).
func cellLeaves(sp driver.CellSpan, idx int64) time.Time {
	return time.Unix(0, sp.Leaves(idx))
}

// slidingLive returns the cells counted at now (index >= i-Back, the
// partly expired oldest one included: driver.CellSpan), i and their sum.
func slidingLive(st slidingState, sp driver.CellSpan, now time.Time) (live []cell, i int64, used int64) {
	i = sp.Index(now.UnixNano())
	k := sort.Search(len(st.cells), func(k int) bool { return st.cells[k].idx >= sp.Oldest(i) })
	live = st.cells[k:]
	for _, c := range live {
		used += c.n
	}
	return live, i, used
}

func slidingStep(st slidingState, r driver.Rule, cost int64, now time.Time) (slidingState, verdict) {
	sp := r.Span(time.Nanosecond)
	live, i, used := slidingLive(st, sp, now)
	if cost > r.Limit {
		return st, verdict{CostTooHigh: true}
	}
	if used+cost > r.Limit {
		need, sum := used+cost-r.Limit, int64(0)
		for _, c := range live {
			sum += c.n
			if sum >= need {
				return st, verdict{RetryAfter: cellLeaves(sp, c.idx).Sub(now)}
			}
		}
		return st, verdict{} // unreachable: need <= used
	}
	next := make([]cell, 0, len(live)+1)
	next = append(next, live...)
	if m := len(next); m > 0 && next[m-1].idx == i {
		next[m-1].n += cost
	} else {
		next = append(next, cell{idx: i, n: cost})
	}
	return slidingState{cells: next}, verdict{Allowed: true}
}

func slidingReport(st slidingState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	sp := r.Span(time.Nanosecond)
	live, _, used := slidingLive(st, sp, now)
	for k := len(live) - 1; k >= 0; k-- {
		if live[k].n > 0 {
			return used, cellLeaves(sp, live[k].idx).Sub(now)
		}
	}
	return used, 0
}

// slidingExpiry is when every cell has stopped counting.
func slidingExpiry(st slidingState, r driver.Rule) time.Time {
	if len(st.cells) == 0 {
		return time.Time{}
	}
	return cellLeaves(r.Span(time.Nanosecond), st.cells[len(st.cells)-1].idx)
}

// ---- SlidingLog ----

// run is n log entries at one instant, added by one call (seq).
type run struct {
	t   time.Time
	n   int64
	seq uint64
}

// logState is the log, oldest first. Entries of one call share a run, so
// many units at one instant are counted one by one yet stored once.
type logState struct {
	runs []run
	seq  uint64 // the last run's seq
}

func logLive(st logState, r driver.Rule, now time.Time) (live []run, used int64) {
	from := now.Add(-r.Window)
	k := sort.Search(len(st.runs), func(k int) bool { return st.runs[k].t.After(from) })
	live = st.runs[k:]
	for _, e := range live {
		used += e.n
	}
	return live, used
}

func logStep(st logState, r driver.Rule, cost int64, now time.Time) (logState, verdict) {
	live, used := logLive(st, r, now)
	if cost > r.Limit {
		return st, verdict{CostTooHigh: true}
	}
	if used+cost > r.Limit {
		need, sum := used+cost-r.Limit, int64(0)
		for _, e := range live {
			sum += e.n
			if sum >= need {
				return st, verdict{RetryAfter: e.t.Add(r.Window).Sub(now)}
			}
		}
		return st, verdict{}
	}
	next := make([]run, 0, len(live)+1)
	next = append(next, live...)
	seq := st.seq + 1
	e := run{t: now, n: cost, seq: seq}
	k := sort.Search(len(next), func(k int) bool { return next[k].t.After(now) })
	next = append(next, run{})
	copy(next[k+1:], next[k:])
	next[k] = e
	return logState{runs: next, seq: seq}, verdict{Allowed: true}
}

func logReport(st logState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	live, used := logLive(st, r, now)
	if len(live) == 0 {
		return 0, 0
	}
	return used, live[len(live)-1].t.Add(r.Window).Sub(now)
}

func logExpiry(st logState, r driver.Rule) time.Time {
	if len(st.runs) == 0 {
		return time.Time{}
	}
	return st.runs[len(st.runs)-1].t.Add(r.Window)
}

// ---- GCRA ----

// gcraStep is redis-cell's arithmetic on the theoretical arrival time tat
// (zero: none stored), with driver.Rule.GCRAParams' whole-µs T and tol:
// new = max(tat, now) + cost*T; admitted iff new-tol <= now.
func gcraStep(tat time.Time, r driver.Rule, cost int64, now time.Time) (time.Time, verdict) {
	t, tol, limit := r.GCRAParams()
	if cost > limit { // c*T > tol, without overflow
		return tat, verdict{CostTooHigh: true}
	}
	base := tat
	if base.Before(now) {
		base = now
	}
	next := base.Add(t * time.Duration(cost))
	if d := next.Add(-tol).Sub(now); d > 0 {
		return tat, verdict{RetryAfter: d}
	}
	return next, verdict{Allowed: true}
}

// gcraReport: ttl = max(tat, now)-now, Remaining = floor((tol-ttl)/T)
// clamped to [0, Burst+1] in exact integers, Used = Burst+1-Remaining,
// ResetAfter = ttl.
func gcraReport(tat time.Time, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	t, tol, limit := r.GCRAParams()
	ttl := time.Duration(0)
	if tat.After(now) {
		ttl = tat.Sub(now)
	}
	rem := arith.FloorDiv(int64(tol-ttl), int64(t))
	rem = min(max(rem, 0), limit)
	return limit - rem, ttl
}
