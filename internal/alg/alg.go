// Package alg holds each algorithm's arithmetic, written after
// docs/DESIGN.md, "Algorithms: exact semantics": pure functions of state,
// rule, cost and now, with no I/O. The memory backend keeps its state in
// these shapes; the Redis backend's bare mode evaluates its sliding
// windows here. The Lua scripts mirror them function for function
// (lua/alg), and the differential test
// (backends/redis/differential_test.go) holds the scripts to them.
package alg

import (
	"math/bits"
	"sort"
	"time"

	"github.com/freqcap/freqcap/internal/arith"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Verdict is one rule's answer to a cost.
type Verdict struct {
	Allowed     bool
	CostTooHigh bool
	RetryAfter  time.Duration // when denied and not CostTooHigh
}

// count is the counting algorithms' admission (fixed window, sliding
// window, sliding log): cost is admitted iff used+cost <= limit; a cost
// above the limit never is. retry is called for a denial that waiting can
// lift.
func count(used, limit, cost int64, retry func() time.Duration) Verdict {
	switch {
	case cost > limit:
		return Verdict{CostTooHigh: true}
	case used+cost > limit:
		return Verdict{RetryAfter: retry()}
	}
	return Verdict{Allowed: true}
}

// Result assembles a driver.RuleResult from a report (used, resetAfter)
// and a verdict: Remaining is never negative, RetryAfter is set only for
// a denial that waiting can lift.
func Result(limit, used int64, resetAfter time.Duration, v Verdict) driver.RuleResult {
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

// FixedBounds returns the window around now: epoch-aligned, or for a
// calendar rule its unit in r.Location (CalendarBounds; a backend puts
// the attempt's zone there, driver.Request.Zone, when it has one).
func FixedBounds(r driver.Rule, now time.Time) (start, end time.Time) {
	if r.Calendar != driver.NoCalendar {
		return CalendarBounds(r.Calendar, r.Location, now)
	}
	w := int64(r.Window)
	s := arith.FloorDiv(now.UnixNano(), w) * w
	return time.Unix(0, s), time.Unix(0, s+w)
}

// FixedEnd returns the end of the window a fixed-window rule counts in at
// now, its stored window ending at stored (zero: none): a calendar rule
// keeps its stored window until it ends, whatever the zone of the window
// around now (driver.Request.Zone: a zone that changes mid-window never
// uncaps), else the window around now (FixedBounds).
func FixedEnd(r driver.Rule, stored, now time.Time) time.Time {
	if r.Calendar != driver.NoCalendar && stored.After(now) {
		return stored
	}
	_, end := FixedBounds(r, now)
	return end
}

// Fixed decides cost on a fixed window that ends at end and holds used
// units at now: admitted iff used+cost <= Limit, else retry at the end.
func Fixed(used int64, r driver.Rule, cost int64, end, now time.Time) Verdict {
	return count(used, r.Limit, cost, func() time.Duration { return end.Sub(now) })
}

// FixedResetAfter is the window's end when anything is used, else 0.
func FixedResetAfter(used int64, end, now time.Time) time.Duration {
	if used > 0 {
		return end.Sub(now)
	}
	return 0
}

// ---- SlidingWindow ----

// Cell is one sub-window of a sliding window: N units in cell Idx
// (driver.CellSpan.Index).
type Cell struct {
	Idx int64
	N   int64
}

// Sliding is a sliding window rule's count at one instant, in ticks of
// one unit (the memory backend: ns; bare mode: µs) on the rule's
// driver.CellSpan in that unit. At cell I the cells Idx >= Span.Oldest(I)
// count, the partly expired oldest one included; cell j stops counting at
// Span.Leaves(j).
type Sliding struct {
	Span driver.CellSpan
	Unit time.Duration // one tick
	Now  int64
	I    int64  // the current cell
	Live []Cell // the counted cells, oldest first
	Used int64  // their sum
}

// NewSliding counts cells (oldest first) at now, in ticks of unit.
func NewSliding(sp driver.CellSpan, unit time.Duration, cells []Cell, now int64) Sliding {
	s := Sliding{Span: sp, Unit: unit, Now: now, I: sp.Index(now)}
	lo := sp.Oldest(s.I)
	k := sort.Search(len(cells), func(k int) bool { return cells[k].Idx >= lo })
	s.Live = cells[k:]
	for _, c := range s.Live {
		s.Used += c.N
	}
	return s
}

// Current is the units in the current cell.
func (s Sliding) Current() int64 {
	for k := len(s.Live) - 1; k >= 0; k-- {
		if s.Live[k].Idx == s.I {
			return s.Live[k].N
		}
	}
	return 0
}

// ResetAfter is when the newest counted cell holding units stops
// counting (0: none).
func (s Sliding) ResetAfter() time.Duration {
	for k := len(s.Live) - 1; k >= 0; k-- {
		if s.Live[k].N > 0 {
			return time.Duration(s.Span.Leaves(s.Live[k].Idx)-s.Now) * s.Unit
		}
	}
	return 0
}

// Decide admits cost iff Used+cost <= limit. A denial waits until the
// oldest cells holding the units over stop counting (cells beyond I, the
// clock having gone back: one cell).
func (s Sliding) Decide(limit, cost int64) Verdict {
	return count(s.Used, limit, cost, func() time.Duration {
		need, acc := s.Used+cost-limit, int64(0)
		for _, c := range s.Live {
			if c.Idx > s.I {
				break
			}
			acc += c.N
			if acc >= need {
				return time.Duration(s.Span.Leaves(c.Idx)-s.Now) * s.Unit
			}
		}
		return time.Duration(s.Span.Size) * s.Unit
	})
}

// Add returns the counted cells with cost added to the current one, oldest
// first (a new slice).
func (s Sliding) Add(cost int64) []Cell {
	next := make([]Cell, 0, len(s.Live)+1)
	k := sort.Search(len(s.Live), func(k int) bool { return s.Live[k].Idx >= s.I })
	next = append(next, s.Live[:k]...)
	if k < len(s.Live) && s.Live[k].Idx == s.I {
		next = append(next, Cell{Idx: s.I, N: s.Live[k].N + cost})
		k++
	} else {
		next = append(next, Cell{Idx: s.I, N: cost})
	}
	return append(next, s.Live[k:]...)
}

// ---- SlidingLog ----

// Run is N log entries at one instant T, added by one call (Seq).
type Run struct {
	T   time.Time
	N   int64
	Seq uint64
}

// LogLive returns the runs (oldest first) in (now-Window, now] and their
// sum: the count is exact.
func LogLive(runs []Run, r driver.Rule, now time.Time) (live []Run, used int64) {
	from := now.Add(-r.Window)
	k := sort.Search(len(runs), func(k int) bool { return runs[k].T.After(from) })
	live = runs[k:]
	for _, e := range live {
		used += e.N
	}
	return live, used
}

// Log decides cost on the live runs: admitted iff used+cost <= Limit,
// else retry when the oldest entries holding the units over leave the
// window.
func Log(live []Run, used int64, r driver.Rule, cost int64, now time.Time) Verdict {
	return count(used, r.Limit, cost, func() time.Duration {
		need, sum := used+cost-r.Limit, int64(0)
		for _, e := range live {
			sum += e.N
			if sum >= need {
				return e.T.Add(r.Window).Sub(now)
			}
		}
		return 0 // unreachable: need <= used
	})
}

// LogAdd returns live with the run e inserted in time order (a new slice).
func LogAdd(live []Run, e Run) []Run {
	next := make([]Run, 0, len(live)+1)
	next = append(next, live...)
	k := sort.Search(len(next), func(k int) bool { return next[k].T.After(e.T) })
	next = append(next, Run{})
	copy(next[k+1:], next[k:])
	next[k] = e
	return next
}

// LogResetAfter is when the newest live entry leaves the window (0: none).
func LogResetAfter(live []Run, r driver.Rule, now time.Time) time.Duration {
	if len(live) == 0 {
		return 0
	}
	return live[len(live)-1].T.Add(r.Window).Sub(now)
}

// ---- GCRA ----

// GCRAStep is redis-cell's arithmetic on the theoretical arrival time tat
// (zero: none stored), with driver.Rule.GCRAParams' whole-µs T and tol:
// new = max(tat, now) + cost*T; admitted iff new-tol <= now.
func GCRAStep(tat time.Time, r driver.Rule, cost int64, now time.Time) (time.Time, Verdict) {
	t, tol, limit := r.GCRAParams()
	if cost > limit { // c*T > tol, without overflow
		return tat, Verdict{CostTooHigh: true}
	}
	base := tat
	if base.Before(now) {
		base = now
	}
	next := base.Add(t * time.Duration(cost))
	if d := next.Add(-tol).Sub(now); d > 0 {
		return tat, Verdict{RetryAfter: d}
	}
	return next, Verdict{Allowed: true}
}

// GCRAExempt is the TAT after a counted exempt of cost (driver.Request's
// OverrideKey), which counts whatever the limit: cost*T after max(tat,
// now), at most driver.MaxDebt ahead of now (never less far than tat
// already is). The Redis backend's alg/gcra.lua computes the same.
func GCRAExempt(tat time.Time, r driver.Rule, cost int64, now time.Time) time.Time {
	t, _, _ := r.GCRAParams()
	ttl := max(tat.Sub(now), 0)
	most := max(ttl, driver.MaxDebt)
	if cost > int64((most-ttl)/t) { // cost*T > most-ttl, without overflow
		return now.Add(most)
	}
	return now.Add(ttl + t*time.Duration(cost))
}

// Exempt is the units a counted exempt adds to a rule counting used (any
// algorithm but GCRA, see GCRAExempt): cost, saturating at
// driver.MaxUsed (none once there). The Redis backend's commits clamp
// their cost the same way (alg/*.lua).
func Exempt(used, cost int64) int64 {
	return max(0, min(cost, driver.MaxUsed-used))
}

// GCRAReport: ttl = max(tat, now)-now, Remaining = floor((tol-ttl)/T)
// clamped to [0, Burst+1] in exact integers, Used = Burst+1-Remaining,
// ResetAfter = ttl.
func GCRAReport(tat time.Time, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	t, tol, limit := r.GCRAParams()
	ttl := time.Duration(0)
	if tat.After(now) {
		ttl = tat.Sub(now)
	}
	rem := arith.FloorDiv(int64(tol-ttl), int64(t))
	rem = min(max(rem, 0), limit)
	return limit - rem, ttl
}

// GCRARefund gives back a reservation of cost that stored the TAT at:
// only the part of cost*T still ahead of now (units that have already
// drained are not owed twice), never moving tat before now. ok is false
// when nothing is given back.
func GCRARefund(tat, at time.Time, r driver.Rule, cost int64, now time.Time) (next time.Time, ok bool) {
	t, _, _ := r.GCRAParams()
	back := min(t*time.Duration(cost), at.Sub(now))
	if back <= 0 {
		return tat, false
	}
	next = tat.Add(-back)
	if next.Before(now) {
		next = now
	}
	return next, true
}

// GCRARescale reads tat, a theoretical arrival time stored at emission
// interval from, at interval to, never admitting sooner than either
// reading would. At a slower rate (to > from) the units it holds ahead
// of now, (tat-now)/from, are kept, now spaced by to, so the count is the
// same and drains at to's rate from now on: read as it is, tat would
// hold fewer units and admit more than the old rule allows. At a faster
// rate (to < from) tat is kept as it is: the old rate's debt is waited
// out, as every GCRA that keeps a TAT does (docs/MIGRATING.md), and the
// new rule admits no sooner than the old one would have. The result is
// rounded up to the ns (never fewer units), and saturates at
// 2*driver.MaxTolerance ahead of now (more only delays a full bucket
// further, as a seed's cap). A tat not ahead of now holds nothing and is
// returned as is.
func GCRARescale(tat time.Time, from, to time.Duration, now time.Time) time.Time {
	if from <= 0 || to <= 0 || to <= from || !tat.After(now) {
		return tat
	}
	const ceiling = 2 * driver.MaxTolerance
	hi, lo := bits.Mul64(uint64(tat.Sub(now)), uint64(to))
	if hi >= uint64(from) {
		return now.Add(ceiling)
	}
	q, rem := bits.Div64(hi, lo, uint64(from))
	if rem != 0 {
		q++
	}
	if q > uint64(ceiling) {
		return now.Add(ceiling)
	}
	return now.Add(time.Duration(q))
}
