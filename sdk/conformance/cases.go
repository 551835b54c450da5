package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// groups is the suite, in the order Run runs it.
var groups = []group{
	{name: "Concurrency", serial: true, cases: []testCase{
		{name: "FixedWindow", run: concurrency(driver.FixedWindow)},
		{name: "SlidingWindow", run: concurrency(driver.SlidingWindow)},
		{name: "SlidingLog", run: concurrency(driver.SlidingLog)},
		{name: "GCRA", run: concurrency(driver.GCRA)},
		{name: "AllRules", run: concurrency(0)},
	}},
	{name: "FixedWindow", cases: []testCase{
		{name: "Boundary", run: fixedBoundary},
		{name: "EdgeBurst", run: fixedEdgeBurst},
	}},
	{name: "SlidingWindow", cases: []testCase{
		{name: "Accuracy", run: slidingAccuracy},
		{name: "NoIntervalOverLimit", run: slidingStrict},
		{name: "SmallestOverAdmission", run: slidingSmallest},
		{name: "RetryAfterExact", run: slidingRetryExact},
	}},
	{name: "SlidingLog", cases: []testCase{
		{name: "Exact", run: logExact},
		{name: "ManyAtOneInstant", run: logMany},
	}},
	{name: "GCRA", cases: []testCase{
		{name: "RedisCellExample", run: gcraRedisCell},
		{name: "BurstAndEmission", run: gcraEmission},
	}},
	{name: "Numbers", cases: []testCase{
		{name: "MaxLimit", run: numbersMaxLimit},
		{name: "MaxWindow", run: numbersMaxWindow},
		{name: "GCRAMaxTolerance", run: numbersGCRAMaxTolerance},
		{name: "GCRAMinInterval", run: numbersGCRAMinInterval},
	}},
	{name: "Calendar", cases: []testCase{
		{name: "DayAsiaShanghai", needs: Calendar, run: calendarShanghai},
		{name: "DayAmericaNewYork", needs: Calendar, run: calendarNewYork},
		{name: "DSTDayAmericaNewYork", needs: Calendar, fakeOnly: true, run: calendarDST},
		{name: "HourAsiaKathmandu", needs: Calendar, run: calendarKathmandu},
	}},
	{name: "Policy", cases: []testCase{
		{name: "CostTooHigh", run: costTooHigh},
		{name: "CostN", run: costN},
		{name: "AllOrNothing", run: allOrNothing},
		{name: "PeekConsumesNothing", run: peekNothing},
		{name: "InspectConsumesNothing", needs: Inspect, run: inspectNothing},
	}},
	{name: "Reservations", cases: []testCase{
		{name: "Commit", needs: Reservations, run: reserveCommit},
		{name: "Cancel", needs: Reservations, run: reserveCancel},
		{name: "DeniedMakesNoHold", needs: Reservations, run: reserveDenied},
		{name: "LapseRefundsAtNextTake", needs: Reservations, run: reserveLapse(driver.OpTake)},
		{name: "LapseRefundsAtNextPeek", needs: Reservations, run: reserveLapse(driver.OpPeek)},
		{name: "SettleLapsedOrUnknown", needs: Reservations, run: settleLapsed},
		{name: "RefundSkipsMovedOnState", needs: Reservations, run: refundMovedOn},
	}},
	{name: "Reset", cases: []testCase{
		{name: "ForgetsStateAndHolds", needs: Reset, run: resetCase},
	}},
	{name: "Trail", cases: []testCase{
		{name: "ContentsOrderBound", needs: Inspect, run: trailContents},
		{name: "MultiRuleAndCostTooHigh", needs: Inspect, run: trailMulti},
		{name: "TTL", needs: Inspect, run: trailTTL},
		{name: "Disabled", needs: Inspect, run: trailDisabled},
	}},
	{name: "Idempotency", cases: []testCase{
		{name: "ReplaySameDecision", needs: Idempotency, run: idemReplay},
		{name: "DeniedReplayedAsDenied", needs: Idempotency, run: idemDenied},
		{name: "ReserveReplaySameHold", needs: Idempotency | Reservations, run: idemReserve},
		{name: "ExpiresAfterTTL", needs: Idempotency, run: idemExpires},
		{name: "PeekIgnoresKey", needs: Idempotency, run: idemPeek},
		{name: "SurvivesReset", needs: Idempotency | Reset, run: idemReset},
	}},
	{name: "Batch", cases: []testCase{
		{name: "InputOrderMixed", needs: Batch, run: batchOrder},
		{name: "SameSubjectAtomicInOrder", needs: Batch, run: batchSameSubject},
		{name: "ErrorIsPerRequest", needs: Batch, run: batchErrors},
		{name: "Idempotency", needs: Batch | Idempotency, run: batchIdem},
	}},
	{name: "Describe", cases: []testCase{
		{name: "Name", needs: Describe, run: describe},
	}},
}

// fourRules returns one rule of each algorithm with limit (GCRA: burst
// limit-1 at limit per w, so its reported limit is limit too).
func (e *env) fourRules(limit int64, w time.Duration) []driver.Rule {
	return []driver.Rule{
		e.fixed("fixed", limit, w),
		e.sliding("sliding", limit, w, 10),
		e.log("log", limit, w),
		e.gcra("gcra", limit, w, limit-1),
	}
}

// ---- FixedWindow ----

func fixedBoundary(e *env) {
	w := e.pick(time.Minute, time.Second)
	r := e.fixed("f", 5, w)
	start := e.alignTo(w, 0)
	end := start.Add(w)
	for i := int64(1); i <= 5; i++ {
		res := e.take(1, r)
		e.before(res, end, "take")
		e.expect(fmt.Sprintf("Take(f) #%d", i), res, true, want(true, i, 5, end.Sub(res.Now), 0))
	}
	res := e.take(1, r)
	e.before(res, end, "take")
	e.expect("Take(f) #6", res, false, want(false, 5, 5, end.Sub(res.Now), end.Sub(res.Now)))
	res = e.peek(1, r)
	e.expect("Peek(f) after #6", res, false, want(false, 5, 5, end.Sub(res.Now), end.Sub(res.Now)))
	if e.fake != nil {
		e.advanceTo(end.Add(-time.Millisecond))
		res = e.take(1, r)
		e.expect("Take(f) 1ms before the window's end", res, false, want(false, 5, 5, time.Millisecond, time.Millisecond))
	}
	now := e.advanceTo(end)
	res = e.take(1, r)
	e.expect(fmt.Sprintf("Take(f) in the next window (%v after its start)", now.Sub(end)), res, true,
		want(true, 1, 5, end.Add(w).Sub(res.Now), 0))
}

func fixedEdgeBurst(e *env) {
	w := e.pick(time.Minute, time.Second)
	r := e.fixed("f", 5, w)
	start := e.alignTo(w, w-e.pick(time.Second, 250*time.Millisecond))
	end := start.Add(w)
	var first, last time.Time
	for i := int64(1); i <= 5; i++ {
		res := e.take(1, r)
		e.before(res, end, "take at the window's end")
		e.expect(fmt.Sprintf("Take(f) #%d before the boundary", i), res, true, want(true, i, 5, end.Sub(res.Now), 0))
		if i == 1 {
			first = res.Now
		}
	}
	res := e.take(1, r)
	e.expect("Take(f) #6 before the boundary", res, false, want(false, 5, 5, end.Sub(res.Now), end.Sub(res.Now)))
	e.advanceTo(end)
	for i := int64(1); i <= 5; i++ {
		res = e.take(1, r)
		e.before(res, end.Add(w), "take")
		e.expect(fmt.Sprintf("Take(f) #%d after the boundary", i), res, true, want(true, i, 5, end.Add(w).Sub(res.Now), 0))
		last = res.Now
	}
	res = e.take(1, r)
	e.expect("Take(f) #6 after the boundary", res, false,
		want(false, 5, 5, end.Add(w).Sub(res.Now), end.Add(w).Sub(res.Now)))
	if d := last.Sub(first); d >= w {
		e.t.Errorf("2×limit admitted over %v, want within one window (%v): the edge burst", d, w)
	}
}

// ---- SlidingWindow ----

func slidingAccuracy(e *env) {
	w := e.pick(10*time.Second, time.Second)
	s := w / 10
	r := e.sliding("s", 10, w, 10)
	// A cell counts until (j+N+1)·s, the partly expired oldest one too:
	// cell 0 (starting at b) until b+w+s.
	b := e.alignTo(w, s/2)
	var res driver.Result
	for i := int64(1); i <= 4; i++ {
		res = e.take(1, r)
		e.before(res, b.Add(s), "take in the first cell")
		e.expect(fmt.Sprintf("Take(s) #%d in cell 0", i), res, true, want(true, i, 10, b.Add(w+s).Sub(res.Now), 0))
	}
	e.advanceTo(b.Add(5*s + s/2))
	newest := b.Add(5*s + w + s) // cell 5 stops counting then
	for i := int64(5); i <= 10; i++ {
		res = e.take(1, r)
		e.before(res, b.Add(6*s), "take in cell 5")
		e.expect(fmt.Sprintf("Take(s) #%d in cell 5", i), res, true, want(true, i, 10, newest.Sub(res.Now), 0))
	}
	res = e.take(1, r)
	e.expect("Take(s) #11 (need 1: freed when cell 0 leaves)", res, false,
		want(false, 10, 10, newest.Sub(res.Now), b.Add(w+s).Sub(res.Now)))
	res = e.peek(5, r)
	e.expect("Peek(s, cost 5) (need 5: cell 0 has 4, freed when cell 5 leaves)", res, false,
		want(false, 10, 10, newest.Sub(res.Now), newest.Sub(res.Now)))
	res = e.peek(11, r)
	e.expect("Peek(s, cost 11)", res, false, tooHigh(10, 10, newest.Sub(res.Now)))
	e.advanceTo(b.Add(w))
	res = e.take(1, r)
	e.before(res, b.Add(w+s), "take")
	e.expect("Take(s) a window after cell 0 began (its units still count)", res, false,
		want(false, 10, 10, newest.Sub(res.Now), b.Add(w+s).Sub(res.Now)))
	if e.fake != nil {
		e.advanceTo(b.Add(w + s - time.Millisecond))
		res = e.take(1, r)
		e.expect("Take(s) 1ms before cell 0 leaves", res, false, want(false, 10, 10, newest.Sub(res.Now), time.Millisecond))
	}
	e.advanceTo(b.Add(w + s))
	res = e.take(1, r)
	e.before(res, b.Add(w+2*s), "take")
	end := b.Add(2*w + 2*s) // the current cell, 11, stops counting then
	e.expect("Take(s) as cell 0 leaves (its 4 units are gone)", res, true, want(true, 7, 10, end.Sub(res.Now), 0))
	res = e.take(3, r)
	e.expect("Take(s, cost 3)", res, true, want(true, 10, 10, end.Sub(res.Now), 0))
	res = e.take(1, r)
	e.expect("Take(s) over the limit again", res, false, want(false, 10, 10, end.Sub(res.Now), newest.Sub(res.Now)))
}

// ---- SlidingLog ----

func logExact(e *env) {
	w := e.pick(10*time.Second, time.Second)
	r := e.log("l", 5, w)
	m := &logModel{limit: 5, w: w}
	check := e.checker(m)
	res := e.take(1, r)
	t0 := res.Now
	check("Take(l) #1", res, 1, true)
	res = e.take(1, r)
	t1 := res.Now
	check("Take(l) #2", res, 1, true)
	e.advanceTo(t0.Add(w / 2))
	check("Take(l, cost 3) half a window later", e.take(3, r), 3, true)
	check("Take(l) #6 (the oldest entry frees it)", e.take(1, r), 1, true)
	check("Peek(l, cost 3) (the 3rd oldest entry frees it)", e.peek(3, r), 3, false)
	check("Peek(l, cost 6)", e.peek(6, r), 6, false)
	if e.fake != nil {
		e.advanceTo(t0.Add(w - time.Millisecond))
		res = e.take(1, r)
		check("Take(l) 1ms before the oldest entry leaves", res, 1, true)
		if res.Allowed || res.Rules[0].RetryAfter != time.Millisecond {
			e.t.Errorf("Take(l) 1ms before the oldest entry leaves = %s, want denied with retry 1ms", fmtRule(res.Rules[0]))
		}
	}
	e.advanceTo(t1.Add(w)) // with a fake clock, t1 == t0
	res = e.take(2, r)
	check("Take(l, cost 2) as the first entries leave", res, 2, true)
	// On a fake clock t1 == t0, so both first entries have left: cost 2
	// must fit. On a real clock the entries taken after #1 may still be
	// live at t1+w (the model check above holds the backend to the exact
	// answer for the instants it reported).
	if e.fake != nil && !res.Allowed {
		e.t.Errorf("Take(l, cost 2) one window after the first entries = denied, want allowed: entries live in (now-w, now]")
	}
	check("Take(l) then", e.take(1, r), 1, true)
}

func logMany(e *env) {
	w := time.Hour
	r := e.log("l", 100, w)
	res := e.take(100, r)
	t0 := res.Now
	e.expect("Take(l, cost 100)", res, true, want(true, 100, 100, w, 0))
	res = e.take(1, r)
	e.expect("Take(l) after cost 100", res, false, want(false, 100, 100, t0.Add(w).Sub(res.Now), t0.Add(w).Sub(res.Now)))

	// Many separate units at (as nearly as the clock allows) one instant:
	// none may overwrite another.
	r2 := e.log("l2", 50, w)
	for i := int64(1); i <= 50; i++ {
		res = e.take(1, r2)
		if !res.Allowed || res.Rules[0].Used != i {
			e.t.Fatalf("Take(l2) #%d = %s, want allowed with used %d", i, fmtRule(res.Rules[0]), i)
		}
	}
	res = e.take(1, r2)
	e.used("Take(l2) #51", res, 50)
	if res.Allowed {
		e.t.Errorf("Take(l2) #51 = allowed, want denied")
	}
}

// ---- GCRA ----

// gcraRedisCell checks redis-cell's documented arithmetic: burst 4, 10
// per 60s gives [limited, limit, remaining, retry_after_s, reset_after_s]
// [0,5,4,-1,6] … [0,5,0,-1,30] then [1,5,0,6,30].
func gcraRedisCell(e *env) {
	r := e.gcra("g", 10, time.Minute, 4)
	m := newGCRAModel(r)
	cell := []struct {
		limited          bool
		remaining        int64
		retry, resetSecs int
	}{{false, 4, -1, 6}, {false, 3, -1, 12}, {false, 2, -1, 18}, {false, 1, -1, 24}, {false, 0, -1, 30}, {true, 0, 6, 30}}
	for i, c := range cell {
		res := e.take(1, r)
		label := fmt.Sprintf("Take(g) #%d", i+1)
		wr := m.step(res.Now, 1, true)
		e.expect(label, res, wr.Allowed, wr)
		if e.fake == nil {
			continue
		}
		exact := want(!c.limited, 5-c.remaining, 5, time.Duration(c.resetSecs)*time.Second, 0)
		if c.limited {
			exact.RetryAfter = time.Duration(c.retry) * time.Second
		}
		e.expect(label+" (redis-cell's numbers)", res, !c.limited, exact)
	}
	if e.fake == nil {
		return // the emission interval is 6s: BurstAndEmission checks it fast
	}
	e.fake.Advance(6 * time.Second)
	res := e.take(1, r)
	e.expect("Take(g) 6s later", res, true, want(true, 5, 5, 30*time.Second, 0))
	res = e.take(1, r)
	e.expect("Take(g) again", res, false, want(false, 5, 5, 30*time.Second, 6*time.Second))
}

func gcraEmission(e *env) {
	per := e.pick(time.Minute, time.Second) // T = per/10
	r := e.gcra("g", 10, per, 2)            // 3 at once, then one per T
	t := per / 10
	m := newGCRAModel(r)
	check := e.checker(m)
	res := e.take(1, r)
	t0 := res.Now
	check("Take(g) #1", res, 1, true)
	check("Take(g) #2", e.take(1, r), 1, true)
	check("Take(g) #3 (burst 2 + 1)", e.take(1, r), 1, true)
	res = e.take(1, r)
	check("Take(g) #4", res, 1, true)
	e.before(res, t0.Add(t), "the burst")
	if res.Allowed {
		e.t.Fatalf("Take(g) #4 at once = allowed, want denied after a burst of 3")
	}
	check("Peek(g)", e.peek(1, r), 1, false)
	for k := 1; k <= 3; k++ {
		e.advanceTo(t0.Add(time.Duration(k) * t))
		res = e.take(1, r)
		check(fmt.Sprintf("Take(g) %d×T later", k), res, 1, true)
		if !res.Allowed {
			e.t.Errorf("Take(g) %d×T after the burst = denied, want one more admitted per T", k)
		}
		res = e.take(1, r)
		e.before(res, t0.Add(time.Duration(k+1)*t), "the second take")
		check(fmt.Sprintf("Take(g) again %d×T later", k), res, 1, true)
		if res.Allowed {
			e.t.Errorf("Take(g) twice %d×T after the burst = allowed, want only one per T", k)
		}
	}
	check("Take(g, cost 4) (> burst+1)", e.take(4, r), 4, true)
}

// ---- Calendar ----

func nextMidnight(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// calendarDay checks a Daily rule of limit 3 in loc: at the backend's
// now, and (fake clock) across local midnight.
func calendarDay(e *env, zone string) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		e.t.Fatalf("LoadLocation(%q) = %v", zone, err)
	}
	r := e.calendar("d", 3, driver.Day, loc)
	if e.fake != nil {
		// One minute before a local midnight still ahead.
		now := e.now()
		mid := nextMidnight(now, loc)
		if !mid.Add(-time.Minute).After(now) {
			mid = nextMidnight(mid, loc)
		}
		e.advanceTo(mid.Add(-time.Minute))
	}
	var res driver.Result
	for i := int64(1); i <= 3; i++ {
		res = e.take(1, r)
		mid := nextMidnight(res.Now, loc)
		e.expect(fmt.Sprintf("Take(daily %s) #%d at %s", zone, i, res.Now.In(loc).Format(time.DateTime)), res, true,
			want(true, i, 3, mid.Sub(res.Now), 0))
	}
	mid := nextMidnight(res.Now, loc)
	res = e.take(1, r)
	e.before(res, mid, "take")
	e.expect(fmt.Sprintf("Take(daily %s) #4", zone), res, false, want(false, 3, 3, mid.Sub(res.Now), mid.Sub(res.Now)))
	if e.fake == nil {
		return
	}
	if got := res.Rules[0].RetryAfter; got != time.Minute {
		e.t.Errorf("Take(daily %s) at 23:59 local = retry %v, want 1m (local midnight, not UTC's)", zone, got)
	}
	e.advanceTo(mid)
	res = e.take(1, r)
	e.expect(fmt.Sprintf("Take(daily %s) at local midnight", zone), res, true,
		want(true, 1, 3, nextMidnight(mid, loc).Sub(mid), 0))
}

func calendarShanghai(e *env) { calendarDay(e, "Asia/Shanghai") }
func calendarNewYork(e *env)  { calendarDay(e, "America/New_York") }

// calendarDST checks the next two days of America/New_York that are not
// 24 hours long (23h in spring, 25h in autumn).
func calendarDST(e *env) {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		e.t.Fatalf("LoadLocation = %v", err)
	}
	r := e.calendar("d", 2, driver.Day, loc)
	for range 2 {
		start := nextMidnight(e.now(), loc)
		for n := 0; ; n++ {
			if n > 400 {
				e.t.Fatal("no DST day in America/New_York within 400 days")
			}
			if l := nextMidnight(start, loc).Sub(start); l != 24*time.Hour {
				break
			}
			start = nextMidnight(start, loc)
		}
		end := nextMidnight(start, loc)
		length := end.Sub(start)
		day := start.Format(time.DateOnly)
		e.advanceTo(start.Add(30 * time.Minute))
		res := e.take(2, r)
		e.expect(fmt.Sprintf("Take(daily, cost 2) on %s (%v long) at 00:30", day, length), res, true,
			want(true, 2, 2, length-30*time.Minute, 0))
		e.advanceTo(end.Add(-time.Millisecond))
		res = e.take(1, r)
		e.expect(fmt.Sprintf("Take(daily) 1ms before %s ends", day), res, false,
			want(false, 2, 2, time.Millisecond, time.Millisecond))
		e.advanceTo(end)
		res = e.take(1, r)
		e.expect(fmt.Sprintf("Take(daily) as %s ends", day), res, true,
			want(true, 1, 2, nextMidnight(end, loc).Sub(end), 0))
	}
}

// calendarKathmandu checks an hourly calendar rule in a zone 5:45 from
// UTC, whose hours start at :15 UTC.
func calendarKathmandu(e *env) {
	loc, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		e.t.Fatalf("LoadLocation = %v", err)
	}
	r := e.calendar("h", 2, driver.Hour, loc)
	hourEnd := func(t time.Time) time.Time {
		lt := t.In(loc)
		return time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour()+1, 0, 0, 0, loc)
	}
	if e.fake != nil {
		now := e.now()
		end := hourEnd(now)
		if !end.Add(-time.Second).After(now) {
			end = hourEnd(end)
		}
		e.advanceTo(end.Add(-time.Second))
	}
	res := e.take(2, r)
	end := hourEnd(res.Now)
	if end.UTC().Minute() != 15 {
		e.t.Fatalf("test bug: Kathmandu hour ends at %v", end.UTC())
	}
	e.expect("Take(hourly Kathmandu, cost 2)", res, true, want(true, 2, 2, end.Sub(res.Now), 0))
	res = e.take(1, r)
	e.before(res, end, "take")
	e.expect("Take(hourly Kathmandu)", res, false, want(false, 2, 2, end.Sub(res.Now), end.Sub(res.Now)))
	if e.fake == nil {
		return
	}
	e.advanceTo(end)
	res = e.take(1, r)
	e.expect("Take(hourly Kathmandu) at the local hour (:15 UTC)", res, true, want(true, 1, 2, time.Hour, 0))
}

// ---- Policy ----

func costTooHigh(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	res := e.take(6, rules...)
	e.expect("Take(all, cost 6) with limit 5", res, false,
		tooHigh(0, 5, 0), tooHigh(0, 5, 0), tooHigh(0, 5, 0), tooHigh(0, 5, 0))
	res = e.take(5, rules...)
	t0 := res.Now
	gm := newGCRAModel(rules[3])
	g := gm.step(t0, 5, true)
	e.expect("Take(all, cost 5) with limit 5", res, true,
		want(true, 5, 5, windowStart(t0, w).Add(w).Sub(t0), 0),
		want(true, 5, 5, windowStart(t0, w/10).Add(w+w/10).Sub(t0), 0),
		want(true, 5, 5, w, 0), g)
	res = e.take(6, rules...)
	now := res.Now
	e.expect("Take(all, cost 6) after using 5", res, false,
		tooHigh(5, 5, windowStart(t0, w).Add(w).Sub(now)),
		tooHigh(5, 5, windowStart(t0, w/10).Add(w+w/10).Sub(now)),
		tooHigh(5, 5, t0.Add(w).Sub(now)), gm.step(now, 6, false))
	// A rule that can never fit denies the request alone; the others
	// report their honest state.
	other := e.fixed("other", 100, w)
	res = e.take(6, other, rules[0])
	e.expect("Take(other+fixed, cost 6)", res, false, want(true, 0, 100, 0, 0),
		tooHigh(5, 5, windowStart(t0, w).Add(w).Sub(res.Now)))
}

func costN(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(10, w)
	res := e.take(4, rules...)
	e.used("Take(all, cost 4)", res, 4, 4, 4, 4)
	res = e.take(6, rules...)
	e.used("Take(all, cost 6)", res, 10, 10, 10, 10)
	if !res.Allowed {
		e.t.Errorf("Take(all, cost 6) after 4 of 10 = denied, want allowed")
	}
	res = e.take(1, rules...)
	e.used("Take(all, cost 1) at the limit", res, 10, 10, 10, 10)
	for i, rr := range res.Rules {
		if rr.Allowed || rr.CostTooHigh || rr.RetryAfter <= 0 || rr.Remaining != 0 {
			e.t.Errorf("Take(all, cost 1) at the limit rule %d = %s, want denied with a retry", i, fmtRule(rr))
		}
	}
}

func allOrNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	a := e.sliding("a", 5, w, 10)
	b := e.log("b", 2, w)
	c := e.gcra("c", 3, w, 2) // reported limit 3
	d := e.fixed("d", 4, w)
	res := e.take(2, a, b, c, d)
	e.used("Take(a+b+c+d, cost 2)", res, 2, 2, 2, 2)
	res = e.take(1, a, b, c, d)
	if res.Allowed {
		e.t.Fatalf("Take(a+b+c+d) with b at its limit = allowed, want denied")
	}
	e.used("Take(a+b+c+d) denied by b", res, 2, 2, 2, 2)
	for i, allowed := range []bool{true, false, true, true} {
		if res.Rules[i].Allowed != allowed {
			e.t.Errorf("Take(a+b+c+d) rule %d = %s, want allowed %t", i, fmtRule(res.Rules[i]), allowed)
		}
	}
	res = e.peek(1, a, b, c, d)
	e.used("Peek(a+b+c+d) after the denial (nothing consumed)", res, 2, 2, 2, 2)
	res = e.take(1, a, c, d)
	e.used("Take(a+c+d)", res, 3, 3, 3)
	res = e.take(1, a, b, c, d)
	e.used("Take(a+b+c+d) denied by b and c", res, 3, 2, 3, 3)
	for i, allowed := range []bool{true, false, false, true} {
		if res.Rules[i].Allowed != allowed {
			e.t.Errorf("Take(a+b+c+d) rule %d = %s, want allowed %t (every denying rule reported)", i,
				fmtRule(res.Rules[i]), allowed)
		}
	}
	res = e.peek(1, a, d)
	e.used("Peek(a+d) after the second denial", res, 3, 3)
}

func peekNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(3, w)
	for i := range 5 {
		res := e.peek(3, rules...)
		e.expect(fmt.Sprintf("Peek(all, cost 3) #%d", i+1), res, true,
			want(true, 0, 3, 0, 0), want(true, 0, 3, 0, 0), want(true, 0, 3, 0, 0), want(true, 0, 3, 0, 0))
	}
	res := e.take(3, rules...)
	e.used("Take(all, cost 3) after the peeks", res, 3, 3, 3, 3)
	if !res.Allowed {
		e.t.Fatalf("Take(all, cost 3) after peeks = denied, want allowed: a peek consumed")
	}
	gm := newGCRAModel(rules[3])
	gm.step(res.Now, 3, true)
	for i := range 3 {
		res = e.peek(1, rules...)
		e.used(fmt.Sprintf("Peek(all) at the limit #%d", i+1), res, 3, 3, 3, 3)
		if res.Allowed {
			e.t.Errorf("Peek(all) at the limit = allowed, want denied")
		}
		e.expect("Peek(gcra) reports the state as of tat", driver.Result{Allowed: false, Rules: res.Rules[3:]}, false,
			gm.step(res.Now, 1, false))
	}
}

func inspectNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(2, w)
	for range 3 {
		res := e.inspect(rules...)
		e.used("Inspect(all)", res, 0, 0, 0, 0)
		if !res.Allowed || len(res.Trail) != 0 {
			e.t.Errorf("Inspect(all) on fresh state = allowed %t, trail %v, want allowed and no trail", res.Allowed, res.Trail)
		}
	}
	res := e.take(2, rules...)
	e.used("Take(all, cost 2)", res, 2, 2, 2, 2)
	res = e.inspect(rules...)
	e.used("Inspect(all) at the limit", res, 2, 2, 2, 2)
	if res.Allowed || len(res.Trail) != 0 {
		e.t.Errorf("Inspect(all) at the limit = allowed %t, trail %d entries, want denied (a cost-1 peek) and no trail",
			res.Allowed, len(res.Trail))
	}
	res = e.take(1, rules...)
	if res.Allowed {
		e.t.Fatalf("Take(all) at the limit = allowed, want denied")
	}
}

// ---- Reservations ----

func reserveCommit(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	res := e.reserve("h1", time.Hour, 3, rules...)
	e.used("Reserve(all, cost 3)", res, 3, 3, 3, 3)
	if !res.Allowed {
		e.t.Fatalf("Reserve(all, cost 3) = denied, want allowed")
	}
	if err := e.settle("h1", true); err != nil {
		e.t.Fatalf("Settle(h1, commit) = %v, want nil", err)
	}
	res = e.peek(1, rules...)
	e.used("Peek(all) after commit", res, 3, 3, 3, 3)
	for _, commit := range []bool{true, false} {
		if err := e.settle("h1", commit); !errors.Is(err, driver.ErrHoldNotFound) {
			e.t.Errorf("Settle(h1, commit %t) after commit = %v, want ErrHoldNotFound", commit, err)
		}
	}
	res = e.take(2, rules...)
	e.used("Take(all, cost 2) after commit", res, 5, 5, 5, 5)
}

func reserveCancel(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	res := e.reserve("h2", time.Hour, 3, rules...)
	e.used("Reserve(all, cost 3)", res, 3, 3, 3, 3)
	res = e.take(1, rules...)
	e.used("Take(all) after the reservation", res, 4, 4, 4, 4)
	if err := e.settle("h2", false); err != nil {
		e.t.Fatalf("Settle(h2, cancel) = %v, want nil", err)
	}
	res = e.peek(1, rules...)
	e.used("Peek(all) after cancel", res, 1, 1, 1, 1)
	if err := e.settle("h2", false); !errors.Is(err, driver.ErrHoldNotFound) {
		e.t.Errorf("Settle(h2, cancel) twice = %v, want ErrHoldNotFound", err)
	}
	res = e.take(4, rules...)
	e.used("Take(all, cost 4) after cancel", res, 5, 5, 5, 5)
	if !res.Allowed {
		e.t.Errorf("Take(all, cost 4) after cancel = denied, want allowed: the cancel refunded nothing")
	}
	// Two holds: cancelling one leaves the other.
	rules = []driver.Rule{e.fixed("f2", 10, w), e.log("l2", 10, w)}
	e.reserve("a", time.Hour, 2, rules...)
	e.reserve("b", time.Hour, 3, rules...)
	if err := e.settle("a", false); err != nil {
		e.t.Fatalf("Settle(a, cancel) = %v", err)
	}
	e.used("Peek(f2+l2) after cancelling a", e.peek(1, rules...), 3, 3)
	if err := e.settle("b", false); err != nil {
		e.t.Fatalf("Settle(b, cancel) = %v", err)
	}
	e.used("Peek(f2+l2) after cancelling b", e.peek(1, rules...), 0, 0)
}

func reserveDenied(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	res := e.reserve("big", time.Hour, 6, rules...)
	if res.Allowed {
		e.t.Fatalf("Reserve(all, cost 6) with limit 5 = allowed, want denied")
	}
	e.take(5, rules...)
	res = e.reserve("full", time.Hour, 1, rules...)
	if res.Allowed {
		e.t.Fatalf("Reserve(all) at the limit = allowed, want denied")
	}
	for _, id := range []string{"big", "full"} {
		if err := e.settle(id, false); !errors.Is(err, driver.ErrHoldNotFound) {
			e.t.Errorf("Settle(%s, cancel) of a denied reservation = %v, want ErrHoldNotFound", id, err)
		}
	}
	e.used("Peek(all)", e.peek(1, rules...), 5, 5, 5, 5)
}

func reserveLapse(next driver.Op) func(e *env) {
	return func(e *env) {
		w := time.Hour
		ttl := e.pick(30*time.Second, 300*time.Millisecond)
		e.ensureRoom(w, ttl+10*time.Second)
		rules := e.fourRules(5, w)
		res := e.reserve("h3", ttl, 3, rules...)
		e.used("Reserve(all, cost 3)", res, 3, 3, 3, 3)
		exp := res.Now.Add(ttl)
		if e.fake != nil {
			e.advanceTo(exp.Add(-time.Millisecond))
			e.used("Peek(all) 1ms before the hold lapses", e.peek(1, rules...), 3, 3, 3, 3)
		}
		e.advanceTo(exp)
		switch next {
		case driver.OpTake:
			res = e.take(1, rules...)
			e.used("Take(all) once the hold lapsed (expiry <= now)", res, 1, 1, 1, 1)
		default:
			res = e.peek(1, rules...)
			e.used("Peek(all) once the hold lapsed (driver: every call processes lapsed holds)", res, 0, 0, 0, 0)
		}
		if err := e.settle("h3", true); !errors.Is(err, driver.ErrHoldNotFound) {
			e.t.Errorf("Settle(h3, commit) after it lapsed = %v, want ErrHoldNotFound", err)
		}
	}
}

func settleLapsed(e *env) {
	w := time.Hour
	ttl := e.pick(30*time.Second, 300*time.Millisecond)
	e.ensureRoom(w, ttl+10*time.Second)
	rules := []driver.Rule{e.fixed("f", 10, w), e.sliding("s", 10, w, 10)}
	res := e.reserve("short", ttl, 2, rules...)
	e.reserve("long", time.Hour, 3, rules...)
	e.advanceTo(res.Now.Add(ttl))
	// Settle processes the lapsed hold before looking up its own.
	if err := e.settle("short", true); !errors.Is(err, driver.ErrHoldNotFound) {
		e.t.Errorf("Settle(short, commit) after it lapsed = %v, want ErrHoldNotFound", err)
	}
	if err := e.settle("long", true); err != nil {
		e.t.Errorf("Settle(long, commit) = %v, want nil", err)
	}
	e.used("Peek(f+s) after the lapse and the commit", e.peek(1, rules...), 3, 3)
	if err := e.settle("never", false); !errors.Is(err, driver.ErrHoldNotFound) {
		e.t.Errorf("Settle(never) = %v, want ErrHoldNotFound", err)
	}
	s := e.b.(driver.Settler)
	if err := s.Settle(bg(), e.key("!h-unused"), "x", true); !errors.Is(err, driver.ErrHoldNotFound) {
		e.t.Errorf("Settle on an unused hold key = %v, want ErrHoldNotFound", err)
	}
}

// refundMovedOn: a cancel never takes from a window that began after the
// reservation, nor from cells it no longer counts.
func refundMovedOn(e *env) {
	w := e.pick(time.Minute, time.Second)
	f := e.fixed("f", 5, w)
	s := e.sliding("s", 5, w, 10)
	start := e.alignTo(w, 0)
	res := e.reserve("old", time.Hour, 3, f, s)
	e.before(res, start.Add(w/10), "reserve")
	e.used("Reserve(f+s, cost 3)", res, 3, 3)
	e.advanceTo(start.Add(w + w/10)) // s's cell 0 stops counting
	res = e.take(2, f, s)
	e.before(res, start.Add(w+2*w/10), "take")
	e.used("Take(f+s, cost 2) in the next window", res, 2, 2)
	if err := e.settle("old", false); err != nil {
		e.t.Fatalf("Settle(old, cancel) = %v, want nil", err)
	}
	e.used("Peek(f+s) after cancelling a hold of the previous window", e.peek(1, f, s), 2, 2)
}

// ---- Reset ----

func resetCase(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	e.take(3, rules...)
	if e.h.Features&Reservations != 0 {
		e.reserve("r1", time.Hour, 1, rules...)
	}
	e.take(5, rules...) // a denial for the trail
	rs, ok := e.b.(driver.Resetter)
	if !ok {
		e.t.Fatalf("Harness.Features has Reset but %T is not a driver.Resetter", e.b)
	}
	if err := rs.Reset(bg(), e.request(driver.OpTake, 1, rules...)); err != nil {
		e.t.Fatalf("Reset = %v, want nil", err)
	}
	res := e.peek(1, rules...)
	e.expect("Peek(all) after Reset", res, true,
		want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0))
	if e.h.Features&Reservations != 0 {
		if err := e.settle("r1", true); !errors.Is(err, driver.ErrHoldNotFound) {
			e.t.Errorf("Settle(r1) after Reset = %v, want ErrHoldNotFound", err)
		}
	}
	if e.h.Features&Inspect != 0 {
		if res := e.inspect(rules...); len(res.Trail) == 0 {
			e.t.Errorf("Inspect after Reset = no trail, want the denial kept (Reset keeps the trail)")
		}
	}
	res = e.take(5, rules...)
	e.used("Take(all, cost 5) after Reset", res, 5, 5, 5, 5)
}

// ---- Trail ----

func (e *env) checkDenial(label string, got driver.Denial, at time.Time, rule string, cost int64, rr driver.RuleResult) {
	e.t.Helper()
	wantD := driver.Denial{At: at, Policy: "p", Rule: rule, Used: rr.Used, Limit: rr.Limit, Cost: cost,
		RetryAfter: rr.RetryAfter, CostTooHigh: rr.CostTooHigh}
	if !near(got.At, at, e.tol) || got.Policy != wantD.Policy || got.Rule != rule || got.Used != wantD.Used ||
		got.Limit != wantD.Limit || got.Cost != cost || got.CostTooHigh != wantD.CostTooHigh ||
		!nearDur(got.RetryAfter, wantD.RetryAfter, e.tol) {
		e.t.Errorf("%s = %+v, want %+v", label, got, wantD)
	}
}

func trailContents(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	e.trailMax = 3
	f := e.fixed("f", 1, w)
	e.take(1, f)
	if res := e.inspect(f); len(res.Trail) != 0 {
		e.t.Fatalf("Inspect after an allowed take = trail %+v, want none (allowed requests add nothing)", res.Trail)
	}
	var denied []driver.Result
	for i := range 5 {
		if e.fake != nil {
			e.fake.Advance(time.Millisecond)
		} else if i > 0 {
			e.advanceTo(denied[i-1].Now.Add(time.Millisecond))
		}
		res := e.take(1, f)
		if res.Allowed {
			e.t.Fatalf("Take(f) over the limit = allowed")
		}
		denied = append(denied, res)
	}
	e.peek(1, f) // a denied peek adds nothing
	res := e.inspect(f)
	if len(res.Trail) != 3 {
		e.t.Fatalf("Inspect = %d trail entries, want 3 (TrailMax): %+v", len(res.Trail), res.Trail)
	}
	for i, d := range res.Trail {
		src := denied[4-i]
		e.checkDenial(fmt.Sprintf("Inspect trail[%d] (newest first)", i), d, src.Now, "f", 1, src.Rules[0])
	}
	if e.h.Features&Reservations != 0 {
		rr := e.reserve("x", time.Hour, 1, f)
		res = e.inspect(f)
		if len(res.Trail) != 3 {
			e.t.Fatalf("Inspect after a denied reserve = %d entries, want 3", len(res.Trail))
		}
		e.checkDenial("Inspect trail[0] after a denied reserve", res.Trail[0], rr.Now, "f", 1, rr.Rules[0])
	}
}

func trailMulti(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 1, w)
	l := e.log("l", 1, w)
	ok := e.fixed("ok", 100, w)
	e.take(1, f, l)
	res := e.take(1, ok, f, l)
	if res.Allowed {
		e.t.Fatalf("Take(ok+f+l) = allowed, want denied")
	}
	tr := e.inspect().Trail
	if len(tr) != 2 {
		e.t.Fatalf("Inspect = %d trail entries %+v, want 2 (one per denying rule)", len(tr), tr)
	}
	// Both denials happened at one instant: their order is not fixed.
	if tr[0].Rule == "l" {
		tr[0], tr[1] = tr[1], tr[0]
	}
	e.checkDenial("trail entry of f", tr[0], res.Now, "f", 1, res.Rules[1])
	e.checkDenial("trail entry of l", tr[1], res.Now, "l", 1, res.Rules[2])

	res = e.take(5, f)
	tr = e.inspect().Trail
	if len(tr) != 3 {
		e.t.Fatalf("Inspect = %d trail entries, want 3", len(tr))
	}
	e.checkDenial("trail entry of a cost too high", tr[0], res.Now, "f", 5, res.Rules[0])
	if !tr[0].CostTooHigh || tr[0].RetryAfter != 0 {
		e.t.Errorf("trail entry of a cost too high = %+v, want CostTooHigh and no retry", tr[0])
	}
}

func trailTTL(e *env) {
	w := time.Hour
	// On a real clock the TTL is long enough that a loaded machine's
	// scheduling delays (a step landing hundreds of ms late) cannot make
	// the first denial outlive or miss its planned instant, and each
	// check waits past the expiry by a margin covering the time between
	// the script's TIME and its PEXPIRE.
	e.trailTTL = e.pick(time.Minute, 2*time.Second)
	margin := e.pick(time.Millisecond, 50*time.Millisecond)
	e.ensureRoom(w, e.trailTTL+10*time.Second)
	f := e.fixed("f", 1, w)
	e.take(1, f)
	first := e.take(1, f)
	if e.fake != nil {
		e.fake.Advance(e.trailTTL / 2)
	} else {
		e.advanceTo(first.Now.Add(e.trailTTL / 2))
	}
	last := e.take(1, f)
	if late := last.Now.Sub(first.Now) - e.trailTTL/2; late > e.trailTTL/4 {
		e.t.Fatalf("the second denial came %v late (planned %v after the first): the machine is too loaded for this case's timing", late, e.trailTTL/2)
	}
	e.advanceTo(first.Now.Add(e.trailTTL + margin))
	if tr := e.inspect().Trail; len(tr) != 2 {
		e.t.Errorf("Inspect %v after the first denial = %d entries, want 2 (the TTL runs from the last denial)",
			e.trailTTL, len(tr))
	}
	e.advanceTo(last.Now.Add(e.trailTTL + margin))
	if tr := e.inspect().Trail; len(tr) != 0 {
		e.t.Errorf("Inspect TrailTTL after the last denial = %+v, want no trail", tr)
	}
}

func trailDisabled(e *env) {
	e.trailMax = 0
	f := e.fixed("f", 1, time.Hour)
	e.take(1, f)
	e.take(1, f)
	e.take(2, f)
	if tr := e.inspect(f).Trail; len(tr) != 0 {
		e.t.Errorf("Inspect with TrailMax 0 = %+v, want no trail", tr)
	}
}

// ---- Describe ----

func describe(e *env) {
	d, ok := e.b.(driver.Describer)
	if !ok {
		e.t.Fatalf("Harness.Features has Describe but %T is not a driver.Describer", e.b)
	}
	desc, err := d.Describe(bg())
	if err != nil || desc.Name == "" {
		e.t.Errorf("Describe() = %+v, %v, want a name and no error", desc, err)
	}
}
