package memory

import (
	"time"

	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The algorithms' arithmetic is internal/alg's (one owner, shared with the
// Redis backend's bare mode); this file keeps the memory backend's state
// in its shapes. Each algorithm has a step (the verdict for cost and the
// state after consuming it) and a report (Used and ResetAfter of a state,
// as of now). The caller decides whether the step's state is kept: only
// when every rule of a request admits.

// verdict is one rule's answer to a cost.
type verdict = alg.Verdict

// ruleResult assembles a driver.RuleResult from a report and a verdict.
func ruleResult(limit, used int64, resetAfter time.Duration, v verdict) driver.RuleResult {
	return alg.Result(limit, used, resetAfter, v)
}

// ---- FixedWindow ----

// fixedState is a fixed window's counter: count units in the window that
// ends at end. The zero value is an empty window.
type fixedState struct {
	end   time.Time
	count int64
}

func fixedUsed(st fixedState, end time.Time) int64 {
	if st.end.Equal(end) {
		return st.count
	}
	return 0
}

// fixedStep admits cost iff used+cost <= Limit in the window it counts in
// at now (alg.FixedEnd: a calendar rule's stored window while it lasts,
// else the window around now).
func fixedStep(st fixedState, r driver.Rule, cost int64, now time.Time) (fixedState, verdict) {
	end := alg.FixedEnd(r, st.end, now)
	used := fixedUsed(st, end)
	v := alg.Fixed(used, r, cost, end, now)
	if !v.Allowed {
		return st, v
	}
	return fixedState{end: end, count: used + cost}, v
}

// fixedReport: ResetAfter is the window's end when anything is used.
func fixedReport(st fixedState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	end := alg.FixedEnd(r, st.end, now)
	used = fixedUsed(st, end)
	return used, alg.FixedResetAfter(used, end, now)
}

// ---- SlidingWindow ----

// cell is one sub-window of a sliding window: index floor(t/size), in ns.
type cell = alg.Cell

// slidingState holds the non-empty cells, oldest first.
type slidingState struct {
	cells []cell
}

// cellLeaves is when cell idx stops counting (driver.CellSpan.Leaves).
func cellLeaves(sp driver.CellSpan, idx int64) time.Time {
	return time.Unix(0, sp.Leaves(idx))
}

func sliding(st slidingState, r driver.Rule, now time.Time) alg.Sliding {
	return alg.NewSliding(r.Span(time.Nanosecond), time.Nanosecond, st.cells, now.UnixNano())
}

func slidingStep(st slidingState, r driver.Rule, cost int64, now time.Time) (slidingState, verdict) {
	s := sliding(st, r, now)
	v := s.Decide(r.Limit, cost)
	if !v.Allowed {
		return st, v
	}
	return slidingState{cells: s.Add(cost)}, v
}

func slidingReport(st slidingState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	s := sliding(st, r, now)
	return s.Used, s.ResetAfter()
}

// slidingExpiry is when every cell has stopped counting.
func slidingExpiry(st slidingState, r driver.Rule) time.Time {
	if len(st.cells) == 0 {
		return time.Time{}
	}
	return cellLeaves(r.Span(time.Nanosecond), st.cells[len(st.cells)-1].Idx)
}

// ---- SlidingLog ----

// run is n log entries at one instant, added by one call (seq).
type run = alg.Run

// logState is the log, oldest first. Entries of one call share a run, so
// many units at one instant are counted one by one yet stored once.
type logState struct {
	runs []run
	seq  uint64 // the last run's seq
}

func logStep(st logState, r driver.Rule, cost int64, now time.Time) (logState, verdict) {
	live, used := alg.LogLive(st.runs, r, now)
	v := alg.Log(live, used, r, cost, now)
	if !v.Allowed {
		return st, v
	}
	seq := st.seq + 1
	return logState{runs: alg.LogAdd(live, run{T: now, N: cost, Seq: seq}), seq: seq}, v
}

func logReport(st logState, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	live, used := alg.LogLive(st.runs, r, now)
	return used, alg.LogResetAfter(live, r, now)
}

func logExpiry(st logState, r driver.Rule) time.Time {
	if len(st.runs) == 0 {
		return time.Time{}
	}
	return st.runs[len(st.runs)-1].T.Add(r.Window)
}

// ---- GCRA ----

// gcraStep is alg.GCRAStep on the stored theoretical arrival time (zero:
// none stored).
func gcraStep(tat time.Time, r driver.Rule, cost int64, now time.Time) (time.Time, verdict) {
	return alg.GCRAStep(tat, r, cost, now)
}

func gcraReport(tat time.Time, r driver.Rule, now time.Time) (used int64, resetAfter time.Duration) {
	return alg.GCRAReport(tat, r, now)
}
