package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
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
		{name: "Boundary", needs: peeker, run: fixedBoundary},
		{name: "EdgeBurst", run: fixedEdgeBurst},
	}},
	{name: "SlidingWindow", cases: []testCase{
		{name: "Accuracy", needs: peeker, run: slidingAccuracy},
		{name: "NoIntervalOverLimit", run: slidingStrict},
		{name: "SmallestOverAdmission", needs: peeker, run: slidingSmallest},
		{name: "RetryAfterExact", needs: peeker, run: slidingRetryExact},
	}},
	{name: "SlidingLog", cases: []testCase{
		{name: "Exact", needs: peeker, run: logExact},
		{name: "ManyAtOneInstant", run: logMany},
	}},
	{name: "GCRA", cases: []testCase{
		{name: "RedisCellExample", run: gcraRedisCell},
		{name: "BurstAndEmission", needs: peeker, run: gcraEmission},
	}},
	{name: "Numbers", cases: []testCase{
		{name: "MaxLimit", needs: peeker, run: numbersMaxLimit},
		{name: "MaxWindow", needs: peeker, run: numbersMaxWindow},
		{name: "GCRAMaxTolerance", run: numbersGCRAMaxTolerance},
		{name: "GCRAMinInterval", needs: peeker, run: numbersGCRAMinInterval},
	}},
	{name: "Calendar", cases: []testCase{
		{name: "DayAsiaShanghai", run: calendarShanghai},
		{name: "DayAmericaNewYork", run: calendarNewYork},
		{name: "DSTDayAmericaNewYork", fakeOnly: true, run: calendarDST},
		{name: "HourAsiaKathmandu", run: calendarKathmandu},
		{name: "WeekEuropeBerlin", run: calendarWeekBerlin},
		{name: "MonthAmericaSaoPaulo", run: calendarMonthSaoPaulo},
		{name: "DSTWeekEuropeLondon", fakeOnly: true, run: calendarDSTWeekLondon},
		{name: "DSTMonthAustraliaLordHowe", fakeOnly: true, run: calendarDSTMonthLordHowe},
		{name: "DSTDayWeekMonthNow", run: calendarDSTNow},
		{name: "ZonePerAttempt", needs: peeker, run: calendarZonePerAttempt},
		{name: "ZoneChangeNeverUncaps", needs: peeker, run: calendarZoneChange},
	}},
	{name: "Policy", cases: []testCase{
		{name: "CostTooHigh", run: costTooHigh},
		{name: "CostN", run: costN},
		{name: "AllOrNothing", needs: peeker, run: allOrNothing},
		{name: "PeekConsumesNothing", needs: peeker, run: peekNothing},
		{name: "InspectConsumesNothing", needs: inspector, run: inspectNothing},
	}},
	{name: "Reservations", cases: []testCase{
		{name: "Commit", needs: reserver | peeker, run: reserveCommit},
		{name: "Cancel", needs: reserver | peeker, run: reserveCancel},
		{name: "DeniedMakesNoReservation", needs: reserver | peeker, run: reserveDenied},
		{name: "LapseRefundsAtNextTake", needs: reserver | peeker, run: reserveLapse(take)},
		{name: "LapseRefundsAtNextPeek", needs: reserver | peeker, run: reserveLapse(peek)},
		{name: "SettleLapsedOrUnknown", needs: reserver | peeker, run: settleLapsed},
		{name: "RefundSkipsMovedOnState", needs: reserver | peeker, run: refundMovedOn},
	}},
	{name: "Reset", cases: []testCase{
		{name: "ForgetsStateAndReservations", needs: resetter | peeker, run: resetCase},
		{name: "RulesResetOnlyThose", needs: resetter | peeker, run: resetRulesCase},
	}},
	{name: "Trail", cases: []testCase{
		{name: "ContentsOrderBound", needs: inspector | peeker, run: trailContents},
		{name: "MultiRuleAndCostTooHigh", needs: inspector, run: trailMulti},
		{name: "TTL", needs: inspector, run: trailTTL},
		{name: "Disabled", needs: inspector, run: trailDisabled},
	}},
	{name: "Idempotency", cases: []testCase{
		{name: "ReplaySameDecision", needs: idempotent | peeker, run: idemReplay},
		{name: "DeniedReplayedAsDenied", needs: idempotent, run: idemDenied},
		{name: "ReserveReplaySameReservation", needs: idempotent | reserver | peeker, run: idemReserve},
		{name: "ExpiresAfterTTL", needs: idempotent | peeker, run: idemExpires},
		{name: "PeekIgnoresKey", needs: idempotent | peeker, run: idemPeek},
		{name: "SurvivesReset", needs: idempotent | resetter | peeker, run: idemReset},
	}},
	{name: "Batch", cases: []testCase{
		{name: "InputOrderMixed", needs: batcher | peeker, run: batchOrder},
		{name: "SameSubjectAtomicInOrder", needs: batcher | peeker, run: batchSameSubject},
		{name: "ErrorIsPerRequest", needs: batcher | peeker, run: batchErrors},
		{name: "Idempotency", needs: batcher | idempotent | peeker, run: batchIdem},
	}},
	{name: "Describe", cases: []testCase{
		{name: "Name", needs: describer, run: describe},
	}},
	{name: "Transitions", cases: transitionCases()},
	{name: "Shadow", cases: shadowCases()},
	{name: "Overrides", cases: overrideCases()},
	{name: "People", cases: peopleCases()},
	{name: "Messaging", cases: messagingCases()},
	{name: "Values", cases: []testCase{
		{name: "LiveNewestFirstPaged", needs: valueLister | inspector, run: valuesCase},
	}},
}

// fourRules returns one rule of each algorithm with limit (GCRA: burst
// limit-1 at limit per w, so its reported limit is limit too).
func (e *env) fourRules(limit int64, w time.Duration) []sdk.Rule {
	return []sdk.Rule{
		e.fixed("fixed", limit, w),
		e.sliding("sliding", limit, w, 10),
		e.log("log", limit, w),
		e.gcra("gcra", limit, w, limit-1),
	}
}

// ---- FixedWindow ----

func fixedBoundary(e *env) {
	w := e.pick(time.Minute, time.Second)
	start := e.alignTo(w, 0)
	e.run(start, []sdk.Rule{e.fixed("f", 5, w)}, []step{
		{by: w, op: take, want: allowed(admits(1, 5, w))},
		{by: w, op: take, want: allowed(admits(2, 5, w))},
		{by: w, op: take, want: allowed(admits(3, 5, w))},
		{by: w, op: take, want: allowed(admits(4, 5, w))},
		{by: w, op: take, want: allowed(admits(5, 5, w))},
		{by: w, op: take, want: denied(denies(5, 5, w, w))},
		{by: w, op: peek, want: denied(denies(5, 5, w, w))},
		{at: w - time.Millisecond, fake: true, op: take, want: denied(denies(5, 5, w, w))},
		{at: w, op: take, want: allowed(admits(1, 5, 2*w))},
	})
}

func fixedEdgeBurst(e *env) {
	w := e.pick(time.Minute, time.Second)
	start := e.alignTo(w, w-e.pick(time.Second, 250*time.Millisecond))
	steps := []step{}
	for i := int64(1); i <= 5; i++ {
		steps = append(steps, step{by: w, op: take, want: allowed(admits(i, 5, w))})
	}
	steps = append(steps, step{by: w, op: take, want: denied(denies(5, 5, w, w))})
	for i := int64(1); i <= 5; i++ {
		steps = append(steps, step{at: w, by: 2 * w, op: take, want: allowed(admits(i, 5, 2*w))})
	}
	steps = append(steps, step{by: 2 * w, op: take, want: denied(denies(5, 5, 2*w, 2*w))})
	out := e.run(start, []sdk.Rule{e.fixed("f", 5, w)}, steps)
	if d := out[10].At.Sub(out[0].At); d >= w {
		e.t.Errorf("2×limit admitted over %v, want within one window (%v): the edge burst", d, w)
	}
}

// ---- SlidingWindow ----

// slidingAccuracy: a cell counts until (j+N+1)·s, the partly expired
// oldest one too: cell 0 (starting at the base) until w+s.
func slidingAccuracy(e *env) {
	w := e.pick(10*time.Second, time.Second)
	s := w / 10
	b := e.alignTo(w, s/2)
	newest := 5*s + w + s // cell 5 stops counting then
	steps := []step{}
	for i := int64(1); i <= 4; i++ { // cell 0
		steps = append(steps, step{by: s, op: take, want: allowed(admits(i, 10, w+s))})
	}
	for i := int64(5); i <= 10; i++ { // cell 5
		steps = append(steps, step{at: 5*s + s/2, by: 6 * s, op: take, want: allowed(admits(i, 10, newest))})
	}
	steps = append(steps,
		// need 1: freed when cell 0 leaves
		step{by: w + s, op: take, want: denied(denies(10, 10, newest, w+s))},
		// need 5: cell 0 has 4, freed when cell 5 leaves
		step{by: w + s, op: peek, cost: 5, want: denied(denies(10, 10, newest, newest))},
		step{by: w + s, op: peek, cost: 11, want: denied(never(10, 10, newest))},
		// a window after cell 0 began, its units still count
		step{at: w, by: w + s, op: take, want: denied(denies(10, 10, newest, w+s))},
		step{at: w + s - time.Millisecond, fake: true, op: take, want: denied(denies(10, 10, newest, w+s))},
		// as cell 0 leaves, its 4 units are gone; cell 11 stops counting at 2w+2s
		step{at: w + s, by: w + 2*s, op: take, want: allowed(admits(7, 10, 2*w+2*s))},
		step{by: w + 2*s, op: take, cost: 3, want: allowed(admits(10, 10, 2*w+2*s))},
		step{by: w + 2*s, op: take, want: denied(denies(10, 10, 2*w+2*s, newest))},
	)
	e.run(b, []sdk.Rule{e.cells("s", 10, w, 10)}, scaled(steps))
}

// ---- SlidingLog ----

func logExact(e *env) {
	w := e.pick(10*time.Second, time.Second)
	r := e.log("l", 5, w)
	m := &logModel{limit: 5, w: w}
	check := e.checker(m)
	d := e.take(1, r)
	t0 := d.At
	check("Take(l) #1", d, 1, true)
	d = e.take(1, r)
	t1 := d.At
	check("Take(l) #2", d, 1, true)
	e.advanceTo(t0.Add(w / 2))
	check("Take(l, cost 3) half a window later", e.take(3, r), 3, true)
	check("Take(l) #6 (the oldest entry frees it)", e.take(1, r), 1, true)
	check("Peek(l, cost 3) (the 3rd oldest entry frees it)", e.peek(3, r), 3, false)
	check("Peek(l, cost 6)", e.peek(6, r), 6, false)
	if e.fake != nil {
		e.advanceTo(t0.Add(w - time.Millisecond))
		d = e.take(1, r)
		check("Take(l) 1ms before the oldest entry leaves", d, 1, true)
		if d.Allowed || d.Rules[0].RetryAfter != time.Millisecond {
			e.t.Errorf("Take(l) 1ms before the oldest entry leaves = %s, want denied with retry 1ms", fmtRule(d.Rules[0]))
		}
	}
	e.advanceTo(t1.Add(w)) // with a fake clock, t1 == t0
	d = e.take(2, r)
	check("Take(l, cost 2) as the first entries leave", d, 2, true)
	// On a fake clock t1 == t0, so both first entries have left: cost 2
	// must fit. On a real clock the entries taken after #1 may still be
	// live at t1+w (the model check above holds the backend to the exact
	// answer for the instants it reported).
	if e.fake != nil && !d.Allowed {
		e.t.Errorf("Take(l, cost 2) one window after the first entries = denied, want allowed: entries live in (now-w, now]")
	}
	check("Take(l) then", e.take(1, r), 1, true)
}

func logMany(e *env) {
	w := time.Hour
	r := e.log("l", 100, w)
	d := e.take(100, r)
	t0 := d.At
	e.expect("Take(l, cost 100)", d, true, want(true, 100, 100, w, 0))
	d = e.take(1, r)
	e.expect("Take(l) after cost 100", d, false, want(false, 100, 100, t0.Add(w).Sub(d.At), t0.Add(w).Sub(d.At)))

	// Many separate units at (as nearly as the clock allows) one instant:
	// none may overwrite another. On another subject: a backend may keep
	// the log rules of one policy and dimension set in one log (Redis), so
	// l's 100 units would count in l2 for this one.
	r2 := e.log("l2", 50, w)
	other := sdk.Attempt{Subject: e.subject("many"), Cost: 1}
	for i := int64(1); i <= 50; i++ {
		d = e.takeAttempt(other, r2)
		if !d.Allowed || d.Rules[0].Used != i {
			e.t.Fatalf("Take(l2) #%d = %s, want allowed with used %d", i, fmtRule(d.Rules[0]), i)
		}
	}
	d = e.takeAttempt(other, r2)
	e.used("Take(l2) #51", d, 50)
	if d.Allowed {
		e.t.Errorf("Take(l2) #51 = allowed, want denied")
	}
}

// ---- GCRA ----

// gcraRedisCell checks redis-cell's documented arithmetic: burst 4, 10
// per 60s gives [limited, limit, remaining, retry_after_s, reset_after_s]
// [0,5,4,-1,6] … [0,5,0,-1,30] then [1,5,0,6,30]. With a fake clock it is
// a table of exactly those numbers (the reported limit is Burst+1, the
// sdk's translation of the rule); with a real one each call is held to the
// reference model at the instant the backend reported.
func gcraRedisCell(e *env) {
	r := e.gcra("g", 10, time.Minute, 4)
	if e.fake == nil {
		m := newGCRAModel(r)
		for i := range 6 {
			d := e.take(1, r)
			wr := m.step(d.At, 1, true)
			e.expect(fmt.Sprintf("Take(g) #%d", i+1), d, wr.Allowed, wr)
		}
		return // the emission interval is 6s: BurstAndEmission checks it fast
	}
	sec := time.Second
	e.run(e.now(), []sdk.Rule{r}, []step{
		{op: take, want: allowed(admits(1, 5, 6*sec))},
		{op: take, want: allowed(admits(2, 5, 12*sec))},
		{op: take, want: allowed(admits(3, 5, 18*sec))},
		{op: take, want: allowed(admits(4, 5, 24*sec))},
		{op: take, want: allowed(admits(5, 5, 30*sec))},
		{op: take, want: denied(denies(5, 5, 30*sec, 6*sec))},
		{at: 6 * sec, op: take, want: allowed(admits(5, 5, 36*sec))},
		{op: take, want: denied(denies(5, 5, 36*sec, 12*sec))},
	})
}

func gcraEmission(e *env) {
	per := e.pick(time.Minute, time.Second) // T = per/10
	r := e.gcra("g", 10, per, 2)            // 3 at once, then one per T
	t := per / 10
	m := newGCRAModel(r)
	check := e.checker(m)
	d := e.take(1, r)
	t0 := d.At
	check("Take(g) #1", d, 1, true)
	check("Take(g) #2", e.take(1, r), 1, true)
	check("Take(g) #3 (burst 2 + 1)", e.take(1, r), 1, true)
	d = e.take(1, r)
	check("Take(g) #4", d, 1, true)
	e.before(d, t0.Add(t), "the burst")
	if d.Allowed {
		e.t.Fatalf("Take(g) #4 at once = allowed, want denied after a burst of 3")
	}
	check("Peek(g)", e.peek(1, r), 1, false)
	for k := 1; k <= 3; k++ {
		e.advanceTo(t0.Add(time.Duration(k) * t))
		d = e.take(1, r)
		check(fmt.Sprintf("Take(g) %d×T later", k), d, 1, true)
		if !d.Allowed {
			e.t.Errorf("Take(g) %d×T after the burst = denied, want one more admitted per T", k)
		}
		d = e.take(1, r)
		e.before(d, t0.Add(time.Duration(k+1)*t), "the second take")
		check(fmt.Sprintf("Take(g) again %d×T later", k), d, 1, true)
		if d.Allowed {
			e.t.Errorf("Take(g) twice %d×T after the burst = allowed, want only one per T", k)
		}
	}
	check("Take(g, cost 4) (> burst+1)", e.take(4, r), 4, true)
}

// ---- Calendar ----
// (The cases of Week, Month, zones per attempt and DST on any clock are
// calendar.go's.)

func nextMidnight(t time.Time, loc *time.Location) time.Time {
	return unitEnd(t, driver.Day, loc)
}

// calendarIn checks a calendar rule of unit u and limit 3 in loc: at the
// backend's now, and (fake clock) across the unit's end.
func calendarIn(e *env, u driver.CalendarUnit, zone string) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		e.t.Fatalf("LoadLocation(%q) = %v", zone, err)
	}
	r := e.calendar("d", 3, u, loc)
	if e.fake != nil {
		// One minute before the end of a unit still ahead.
		now := e.now()
		end := unitEnd(now, u, loc)
		if !end.Add(-time.Minute).After(now) {
			end = unitEnd(end, u, loc)
		}
		e.advanceTo(end.Add(-time.Minute))
	}
	var d sdk.Decision
	for i := int64(1); i <= 3; i++ {
		d = e.take(1, r)
		end := unitEnd(d.At, u, loc)
		e.expect(fmt.Sprintf("Take(%v %s) #%d at %s", u, zone, i, d.At.In(loc).Format(time.DateTime)), d, true,
			want(true, i, 3, end.Sub(d.At), 0))
	}
	end := unitEnd(d.At, u, loc)
	d = e.take(1, r)
	e.before(d, end, "take")
	e.expect(fmt.Sprintf("Take(%v %s) #4", u, zone), d, false, want(false, 3, 3, end.Sub(d.At), end.Sub(d.At)))
	if e.fake == nil {
		return
	}
	if got := d.Rules[0].RetryAfter; got != time.Minute {
		e.t.Errorf("Take(%v %s) a minute before its end = retry %v, want 1m (the local boundary, not UTC's)", u, zone, got)
	}
	e.advanceTo(end)
	d = e.take(1, r)
	e.expect(fmt.Sprintf("Take(%v %s) at its end (%s)", u, zone, end.In(loc).Format(time.DateTime)), d, true,
		want(true, 1, 3, unitEnd(end, u, loc).Sub(end), 0))
}

func calendarShanghai(e *env) { calendarIn(e, driver.Day, "Asia/Shanghai") }
func calendarNewYork(e *env)  { calendarIn(e, driver.Day, "America/New_York") }

// calendarDST checks the next two days of America/New_York that are not
// 24 hours long (23h in spring, 25h in autumn): a table per day, from its
// local midnight.
func calendarDST(e *env) { calendarDSTIn(e, driver.Day, "America/New_York") }

// calendarDSTIn checks the next two units u of zone whose length is not
// the unit's length on the wall clock (a DST change in them): a table per
// unit, from its start.
func calendarDSTIn(e *env, u driver.CalendarUnit, zone string) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		e.t.Fatalf("LoadLocation(%q) = %v", zone, err)
	}
	r := e.calendar("d", 2, u, loc)
	for range 2 {
		start := unitEnd(e.now(), u, loc)
		for n := 0; ; n++ {
			if n > 800 {
				e.t.Fatalf("no %v with a DST change in %s within 800", u, zone)
			}
			if l := unitEnd(start, u, loc).Sub(start); l != wallLength(start, u, loc) {
				break
			}
			start = unitEnd(start, u, loc)
		}
		end := unitEnd(start, u, loc)
		length := end.Sub(start)
		next := unitEnd(end, u, loc).Sub(start)
		e.t.Logf("DST %v from %s is %v long", u, start.In(loc).Format(time.DateTime), length)
		e.run(start, []sdk.Rule{r}, []step{
			{at: 30 * time.Minute, op: take, cost: 2, want: allowed(admits(2, 2, length))},
			{at: length - time.Millisecond, op: take, want: denied(denies(2, 2, length, length))},
			{at: length, op: take, want: allowed(admits(1, 2, next))},
		})
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
	d := e.take(2, r)
	end := hourEnd(d.At)
	if end.UTC().Minute() != 15 {
		e.t.Fatalf("test bug: Kathmandu hour ends at %v", end.UTC())
	}
	e.expect("Take(hourly Kathmandu, cost 2)", d, true, want(true, 2, 2, end.Sub(d.At), 0))
	d = e.take(1, r)
	e.before(d, end, "take")
	e.expect("Take(hourly Kathmandu)", d, false, want(false, 2, 2, end.Sub(d.At), end.Sub(d.At)))
	if e.fake == nil {
		return
	}
	e.advanceTo(end)
	d = e.take(1, r)
	e.expect("Take(hourly Kathmandu) at the local hour (:15 UTC)", d, true, want(true, 1, 2, time.Hour, 0))
}

// ---- Policy ----

func costTooHigh(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	d := e.take(6, rules...)
	e.expect("Take(all, cost 6) with limit 5", d, false,
		tooHigh(0, 5, 0), tooHigh(0, 5, 0), tooHigh(0, 5, 0), tooHigh(0, 5, 0))
	d = e.take(5, rules...)
	t0 := d.At
	gm := newGCRAModel(e.gcra("gcra", 5, w, 4))
	g := gm.step(t0, 5, true)
	e.expect("Take(all, cost 5) with limit 5", d, true,
		want(true, 5, 5, windowStart(t0, w).Add(w).Sub(t0), 0),
		want(true, 5, 5, w, 0), // a sliding window this small is an exact log
		want(true, 5, 5, w, 0), g)
	d = e.take(6, rules...)
	now := d.At
	e.expect("Take(all, cost 6) after using 5", d, false,
		tooHigh(5, 5, windowStart(t0, w).Add(w).Sub(now)),
		tooHigh(5, 5, t0.Add(w).Sub(now)),
		tooHigh(5, 5, t0.Add(w).Sub(now)), gm.step(now, 6, false))
	// A rule that can never fit denies the request alone; the others
	// report their honest state.
	other := e.fixed("other", 100, w)
	d = e.take(6, other, rules[0])
	e.expect("Take(other+fixed, cost 6)", d, false, want(true, 0, 100, 0, 0),
		tooHigh(5, 5, windowStart(t0, w).Add(w).Sub(d.At)))
}

func costN(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	out := e.run(e.now(), e.fourRules(10, w), []step{
		{op: take, cost: 4, want: counts(true, 4, 4, 4, 4)},
		{op: take, cost: 6, want: counts(true, 10, 10, 10, 10)},
		{op: take, cost: 1, want: counts(false, 10, 10, 10, 10)},
	})
	for _, rr := range out[2].Rules {
		if rr.Allowed || rr.CostTooHigh || rr.RetryAfter <= 0 || rr.Remaining != 0 {
			e.t.Errorf("Take(all, cost 1) at the limit rule %s = %s, want denied with a retry", rr.Rule, fmtRule(rr))
		}
	}
}

func allOrNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := []sdk.Rule{
		e.sliding("a", 5, w, 10),
		e.log("b", 2, w),
		e.gcra("c", 3, w, 2), // reported limit 3
		e.fixed("d", 4, w),
	}
	out := e.run(e.now(), rules, []step{
		{op: take, cost: 2, want: counts(true, 2, 2, 2, 2)},
		{op: take, want: counts(false, 2, 2, 2, 2)}, // denied by b
		{op: peek, want: counts(false, 2, 2, 2, 2)}, // nothing consumed
		{op: take, only: []string{"a", "c", "d"}, want: counts(true, 3, 3, 3)},
		{op: take, want: counts(false, 3, 2, 3, 3)}, // denied by b and c
		{op: peek, only: []string{"a", "d"}, want: counts(true, 3, 3)},
	})
	for _, k := range []struct {
		step    int
		allowed []bool
	}{{1, []bool{true, false, true, true}}, {4, []bool{true, false, false, true}}} {
		for i, ok := range k.allowed {
			if g := out[k.step].Rules[i]; g.Allowed != ok {
				e.t.Errorf("step %d: Take(a+b+c+d) rule %s = %s, want allowed %t (every denying rule reported)",
					k.step+1, g.Rule, fmtRule(g), ok)
			}
		}
	}
}

func peekNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(3, w)
	fresh := allowed(admits(0, 3, 0), admits(0, 3, 0), admits(0, 3, 0), admits(0, 3, 0))
	out := e.run(e.now(), rules, []step{
		{op: peek, cost: 3, want: fresh},
		{op: peek, cost: 3, want: fresh},
		{op: peek, cost: 3, want: fresh},
		{op: peek, cost: 3, want: fresh},
		{op: peek, cost: 3, want: fresh},
		{op: take, cost: 3, want: counts(true, 3, 3, 3, 3)}, // no peek consumed
	})
	gm := newGCRAModel(rules[3])
	gm.step(out[5].At, 3, true)
	for i := range 3 {
		d := e.peek(1, rules...)
		e.used(fmt.Sprintf("Peek(all) at the limit #%d", i+1), d, 3, 3, 3, 3)
		if d.Allowed {
			e.t.Errorf("Peek(all) at the limit = allowed, want denied")
		}
		if w := gm.step(d.At, 1, false); !sameRule(d.Rules[3], w, e.tol) {
			e.t.Errorf("Peek(gcra) at the limit = %s, want %s (the state as of its tat)", fmtRule(d.Rules[3]), fmtRule(w))
		}
	}
}

func inspectNothing(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(2, w)
	for range 3 {
		d, trail := e.inspect(rules...)
		e.used("Inspect(all)", d, 0, 0, 0, 0)
		if !d.Allowed || len(trail) != 0 {
			e.t.Errorf("Inspect(all) on fresh state = allowed %t, trail %v, want allowed and no trail", d.Allowed, trail)
		}
	}
	d := e.take(2, rules...)
	e.used("Take(all, cost 2)", d, 2, 2, 2, 2)
	d, trail := e.inspect(rules...)
	e.used("Inspect(all) at the limit", d, 2, 2, 2, 2)
	if d.Allowed || len(trail) != 0 {
		e.t.Errorf("Inspect(all) at the limit = allowed %t, trail %d entries, want denied (a cost-1 peek) and no trail",
			d.Allowed, len(trail))
	}
	if d = e.take(1, rules...); d.Allowed {
		e.t.Fatalf("Take(all) at the limit = allowed, want denied")
	}
}

// ---- Reservations ----

var errNotFound = sdk.ErrReservationNotFound

func reserveCommit(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	e.run(e.now(), e.fourRules(5, w), []step{
		{op: reserve, id: "h1", ttl: time.Hour, cost: 3, want: counts(true, 3, 3, 3, 3)},
		{op: commit, id: "h1"},
		{op: peek, want: counts(true, 3, 3, 3, 3)},
		{op: commit, id: "h1", want: verdict{err: errNotFound}},
		{op: cancel, id: "h1", want: verdict{err: errNotFound}},
		{op: take, cost: 2, want: counts(true, 5, 5, 5, 5)},
	})
}

func reserveCancel(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	e.run(e.now(), e.fourRules(5, w), []step{
		{op: reserve, id: "h2", ttl: time.Hour, cost: 3, want: counts(true, 3, 3, 3, 3)},
		{op: take, want: counts(true, 4, 4, 4, 4)},
		{op: cancel, id: "h2"},
		{op: peek, want: counts(true, 1, 1, 1, 1)},
		{op: cancel, id: "h2", want: verdict{err: errNotFound}},
		{op: take, cost: 4, want: counts(true, 5, 5, 5, 5)}, // the cancel refunded
	})
	// Two reservations: cancelling one leaves the other. On another
	// subject: a backend may keep the log rules of one policy and dimension
	// set in one log (Redis), so the log rule above would count in l2.
	o := *e
	o.tag += "-two"
	o.run(o.now(), []sdk.Rule{e.fixed("f2", 10, w), e.log("l2", 10, w)}, []step{
		{op: reserve, id: "a", ttl: time.Hour, cost: 2, want: counts(true, 2, 2)},
		{op: reserve, id: "b", ttl: time.Hour, cost: 3, want: counts(true, 5, 5)},
		{op: cancel, id: "a"},
		{op: peek, want: counts(true, 3, 3)},
		{op: cancel, id: "b"},
		{op: peek, want: counts(true, 0, 0)},
	})
}

func reserveDenied(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	e.run(e.now(), e.fourRules(5, w), []step{
		{op: reserve, id: "big", ttl: time.Hour, cost: 6, want: counts(false, 0, 0, 0, 0)},
		{op: take, cost: 5, want: counts(true, 5, 5, 5, 5)},
		{op: reserve, id: "full", ttl: time.Hour, want: counts(false, 5, 5, 5, 5)},
		// A denied Reserve returns no reservation (checked by reserve).
		{op: cancel, id: "big", want: verdict{err: errNotFound}},
		{op: cancel, id: "full", want: verdict{err: errNotFound}},
		{op: peek, want: counts(false, 5, 5, 5, 5)},
	})
}

func reserveLapse(next op) func(e *env) {
	return func(e *env) {
		w := time.Hour
		ttl := e.pick(30*time.Second, 300*time.Millisecond)
		e.ensureRoom(w, ttl+10*time.Second)
		rules := e.fourRules(5, w)
		d, r := e.reserve(ttl, 3, rules...)
		e.used("Reserve(all, cost 3)", d, 3, 3, 3, 3)
		steps := []step{{at: ttl - time.Millisecond, fake: true, op: peek, want: counts(true, 3, 3, 3, 3)}}
		if next == take {
			// the reservation lapsed (expiry <= now): its units are back
			steps = append(steps, step{at: ttl, op: take, want: counts(true, 1, 1, 1, 1)})
		} else {
			// every operation processes lapsed reservations, a peek too
			steps = append(steps, step{at: ttl, op: peek, want: counts(true, 0, 0, 0, 0)})
		}
		e.run(d.At, rules, steps)
		if err := r.Commit(bg()); !errors.Is(err, errNotFound) {
			e.t.Errorf("Commit after the reservation lapsed = %v, want %v", err, errNotFound)
		}
	}
}

func settleLapsed(e *env) {
	w := time.Hour
	ttl := e.pick(30*time.Second, 300*time.Millisecond)
	e.ensureRoom(w, ttl+10*time.Second)
	rules := []sdk.Rule{e.fixed("f", 10, w), e.sliding("s", 10, w, 10)}
	d, short := e.reserve(ttl, 2, rules...)
	_, long := e.reserve(time.Hour, 3, rules...)
	e.advanceTo(d.At.Add(ttl))
	// Settling processes the lapsed reservation before looking up its own.
	if err := short.Commit(bg()); !errors.Is(err, errNotFound) {
		e.t.Errorf("Commit(short) after it lapsed = %v, want %v", err, errNotFound)
	}
	if err := long.Commit(bg()); err != nil {
		e.t.Errorf("Commit(long) = %v, want nil", err)
	}
	e.used("Peek(f+s) after the lapse and the commit", e.peek(1, rules...), 3, 3)
	// What the sdk never sends (an id it did not make, a key without
	// reservations), the driver contract still answers.
	rv := e.reserver()
	if err := rv.Cancel(bg(), e.reservationKey(rules...), "never"); !errors.Is(err, errNotFound) {
		e.t.Errorf("Cancel(never) = %v, want %v", err, errNotFound)
	}
	if err := rv.Commit(bg(), e.reservationKey(rules...)+"-unused", "x"); !errors.Is(err, errNotFound) {
		e.t.Errorf("Commit on an unused reservation key = %v, want %v", err, errNotFound)
	}
}

// refundMovedOn: a cancel never takes from a window that began after the
// reservation, nor from cells it no longer counts.
func refundMovedOn(e *env) {
	w := e.pick(time.Minute, time.Second)
	start := e.alignTo(w, 0)
	e.run(start, []sdk.Rule{e.fixed("f", 5, w), e.sliding("s", 5, w, 10)}, []step{
		{by: w / 10, op: reserve, id: "old", ttl: time.Hour, cost: 3, want: counts(true, 3, 3)},
		{at: w + w/10, by: w + 2*w/10, op: take, cost: 2, want: counts(true, 2, 2)}, // s's cell 0 stopped counting
		{op: cancel, id: "old"},
		{op: peek, want: counts(true, 2, 2)},
	})
}

// ---- Reset ----

func resetCase(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	p := e.policy(rules...)
	e.take(3, rules...)
	_, rv := e.reservation(rules...)
	e.take(5, rules...) // a denial for the trail
	if err := e.lim.Admin().Reset(bg(), p, e.subject()); err != nil {
		e.t.Fatalf("Reset = %v, want nil", err)
	}
	d := e.peek(1, rules...)
	e.expect("Peek(all) after Reset", d, true,
		want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0), want(true, 0, 5, 0, 0))
	if rv != nil {
		if err := rv.Commit(bg()); !errors.Is(err, errNotFound) {
			e.t.Errorf("Commit after Reset = %v, want %v (Reset forgets reservations)", err, errNotFound)
		}
	}
	if e.has(inspector) {
		if _, trail := e.inspect(rules...); len(trail) == 0 {
			e.t.Errorf("Inspect after Reset = no trail, want the denial kept (Reset keeps the trail)")
		}
	}
	e.used("Take(all, cost 5) after Reset", e.take(5, rules...), 5, 5, 5, 5)
}

// resetRulesCase: ResetRules forgets the named rules (a whole set of
// dimensions: one of each algorithm keyed by s and c) and nothing else:
// not the rules keyed by s alone, nor by s and d, nor the open
// reservations. A name unknown, missing, or naming part of a set of
// dimensions, or a subject lacking a named rule's dimension, resets
// nothing.
func resetRulesCase(e *env) {
	w := time.Hour
	e.ensureRoom(w, 30*time.Second)
	by := func(r sdk.Rule, dims ...string) sdk.Rule { return r.By(append([]string{dim}, dims...)...) }
	rules := []sdk.Rule{
		e.fixed("u-fixed", 9, w),
		e.sliding("u-sliding", 9, w, 10),
		e.log("u-log", 9, w),
		by(sdk.FixedWindow("c-fixed", 9, w), "c"),
		by(sdk.SlidingWindow("c-sliding", 9, w).WithSubWindows(10), "c"),
		by(sdk.SlidingLog("c-log", 9, w), "c"),
		by(sdk.GCRA("c-gcra", 9, w, 8), "c"),
		by(sdk.FixedWindow("d-fixed", 9, w), "d"),
		by(sdk.SlidingLog("d-log", 9, w), "d"),
	}
	pair := []string{"c-fixed", "c-sliding", "c-log", "c-gcra"}
	p := e.policy(rules...)
	subj := sdk.Subject{dim: e.tag, "c": "x", "d": "y"}
	peek := func(label string, used ...int64) {
		e.t.Helper()
		d, err := e.lim.Peek(bg(), p, sdk.Attempt{Subject: subj})
		e.used(label, e.shaped(label, rules, d, err), used...)
	}
	d, err := e.lim.Take(bg(), p, sdk.Attempt{Subject: subj, Cost: 3})
	e.shaped("Take(all, cost 3)", rules, d, err)
	held := int64(0)
	var rv *sdk.Reservation
	if e.has(reserver) {
		d, rv, err = e.lim.Reserve(bg(), p, sdk.Attempt{Subject: subj}, time.Hour)
		if e.shaped("Reserve(all, cost 1)", rules, d, err); rv == nil {
			e.t.Fatalf("Reserve(all, cost 1) = no reservation, want one")
		}
		held = 1
	}
	refused := []struct {
		label string
		subj  sdk.Subject
		names []string
		want  error
	}{
		{"no rule", subj, nil, sdk.ErrInvalidRule},
		{"an unknown rule", subj, []string{"c-fixed", "c-sliding", "c-log", "c-gcra", "nope"}, sdk.ErrInvalidRule},
		{"part of a set of dimensions", subj, []string{"c-fixed", "c-log"}, sdk.ErrInvalidRule},
		{"a subject without c", sdk.Subject{dim: e.tag, "d": "y"}, pair, sdk.ErrInvalidSubject},
	}
	for _, tc := range refused {
		if err := e.lim.Admin().ResetRules(bg(), p, tc.subj, tc.names...); !errors.Is(err, tc.want) {
			e.t.Errorf("ResetRules(%s) = %v, want an error wrapping %v", tc.label, err, tc.want)
		}
	}
	n := 3 + held
	peek("Peek(all) after the refused ResetRules", n, n, n, n, n, n, n, n, n)
	if err := e.lim.Admin().ResetRules(bg(), p, subj, pair...); err != nil {
		e.t.Fatalf("ResetRules(%v) = %v, want nil", pair, err)
	}
	peek("Peek(all) after ResetRules(c-*)", n, n, n, 0, 0, 0, 0, n, n)
	if rv != nil {
		if err := rv.Commit(bg()); err != nil {
			e.t.Errorf("Commit after ResetRules = %v, want nil (ResetRules keeps reservations)", err)
		}
	}
	d, err = e.lim.Take(bg(), p, sdk.Attempt{Subject: subj, Cost: 5})
	e.used("Take(all, cost 5) after ResetRules", e.shaped("Take(all, cost 5)", rules, d, err),
		n+5, n+5, n+5, 5, 5, 5, 5, n+5, n+5)
}

// reservation reserves one unit where the backend supports reservations
// (nil otherwise).
func (e *env) reservation(rules ...sdk.Rule) (sdk.Decision, *sdk.Reservation) {
	e.t.Helper()
	if !e.has(reserver) {
		return sdk.Decision{}, nil
	}
	return e.reserve(time.Hour, 1, rules...)
}

// has reports whether the backend implements f.
func (e *env) has(f feature) bool {
	for _, x := range features {
		if x.f == f {
			if x.has == nil { // no interface: a backend without it refuses the operation
				return !errors.Is(x.refused(e), errors.ErrUnsupported)
			}
			return x.has(e.b)
		}
	}
	return false
}

// ---- Trail ----

func (e *env) checkDenial(label string, got sdk.Denial, at time.Time, rule string, cost int64, rr sdk.RuleDecision) {
	e.t.Helper()
	w := sdk.Denial{At: at, Policy: "p", Rule: rule, Used: rr.Used, Limit: rr.Limit, Cost: cost,
		RetryAfter: rr.RetryAfter, CostTooHigh: rr.CostTooHigh}
	if !near(got.At, at, e.tol) || got.Policy != w.Policy || got.Rule != rule || got.Used != w.Used ||
		got.Limit != w.Limit || got.Cost != cost || got.CostTooHigh != w.CostTooHigh ||
		!nearDur(got.RetryAfter, w.RetryAfter, e.tol) {
		e.t.Errorf("%s = %+v, want %+v", label, got, w)
	}
}

func trailContents(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	e.trailMax = 3
	f := e.fixed("f", 1, w)
	e.take(1, f)
	if _, trail := e.inspect(f); len(trail) != 0 {
		e.t.Fatalf("Inspect after an allowed take = trail %+v, want none (allowed requests add nothing)", trail)
	}
	var denials []sdk.Decision
	for i := range 5 {
		if i > 0 || e.fake != nil {
			e.advance(time.Millisecond)
		}
		d := e.take(1, f)
		if d.Allowed {
			e.t.Fatalf("Take(f) over the limit = allowed")
		}
		denials = append(denials, d)
	}
	e.peek(1, f) // a denied peek adds nothing
	_, trail := e.inspect(f)
	if len(trail) != 3 {
		e.t.Fatalf("Inspect = %d trail entries, want 3 (TrailMax): %+v", len(trail), trail)
	}
	for i, d := range trail {
		src := denials[4-i]
		e.checkDenial(fmt.Sprintf("Inspect trail[%d] (newest first)", i), d, src.At, "f", 1, src.Rules[0])
	}
	if e.has(reserver) {
		rd, _ := e.reserve(time.Hour, 1, f)
		_, trail = e.inspect(f)
		if len(trail) != 3 {
			e.t.Fatalf("Inspect after a denied reserve = %d entries, want 3", len(trail))
		}
		e.checkDenial("Inspect trail[0] after a denied reserve", trail[0], rd.At, "f", 1, rd.Rules[0])
	}
}

func trailMulti(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 1, w)
	l := e.log("l", 1, w)
	ok := e.fixed("ok", 100, w)
	e.take(1, f, l)
	d := e.take(1, ok, f, l)
	if d.Allowed {
		e.t.Fatalf("Take(ok+f+l) = allowed, want denied")
	}
	// An inspection whose subject lacks a rule's other dimension leaves
	// that rule out (the backend is sent the rules it can be named).
	x := sdk.FixedWindow("x", 1, w).By(dim, "other")
	in, err := e.lim.Admin().Inspect(bg(), e.policy(ok, x), e.subject())
	if err != nil || len(in.Rules) != 1 || len(in.Skipped) != 1 || in.Skipped[0] != "x" {
		e.t.Fatalf("Inspect(ok+x) without x's dimension = %+v, %v, want ok inspected and x skipped", in, err)
	}
	tr := in.Denials
	if len(tr) != 2 {
		e.t.Fatalf("Inspect = %d trail entries %+v, want 2 (one per denying rule)", len(tr), tr)
	}
	// Both denials happened at one instant: their order is not fixed.
	if tr[0].Rule == "l" {
		tr[0], tr[1] = tr[1], tr[0]
	}
	e.checkDenial("trail entry of f", tr[0], d.At, "f", 1, d.Rules[1])
	e.checkDenial("trail entry of l", tr[1], d.At, "l", 1, d.Rules[2])

	d = e.take(5, f)
	_, tr = e.inspect(f)
	if len(tr) != 3 {
		e.t.Fatalf("Inspect = %d trail entries, want 3", len(tr))
	}
	e.checkDenial("trail entry of a cost too high", tr[0], d.At, "f", 5, d.Rules[0])
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
	e.advanceTo(first.At.Add(e.trailTTL / 2))
	last := e.take(1, f)
	if late := last.At.Sub(first.At) - e.trailTTL/2; late > e.trailTTL/4 {
		e.t.Fatalf("the second denial came %v late (planned %v after the first): the machine is too loaded for this case's timing", late, e.trailTTL/2)
	}
	e.advanceTo(first.At.Add(e.trailTTL + margin))
	if _, tr := e.inspect(f); len(tr) != 2 {
		e.t.Errorf("Inspect %v after the first denial = %d entries, want 2 (the TTL runs from the last denial)",
			e.trailTTL, len(tr))
	}
	e.advanceTo(last.At.Add(e.trailTTL + margin))
	if _, tr := e.inspect(f); len(tr) != 0 {
		e.t.Errorf("Inspect TrailTTL after the last denial = %+v, want no trail", tr)
	}
}

func trailDisabled(e *env) {
	e.trailMax = 0
	f := e.fixed("f", 1, time.Hour)
	e.run(e.now(), []sdk.Rule{f}, []step{
		{op: take, want: counts(true, 1)},
		{op: take, want: counts(false, 1)},
		{op: take, cost: 2, want: counts(false, 1)},
	})
	if _, tr := e.inspect(f); len(tr) != 0 {
		e.t.Errorf("Inspect with trail max 0 = %+v, want no trail", tr)
	}
}

// ---- Describe ----

func describe(e *env) {
	desc, err := e.lim.Admin().Describe(bg())
	if err != nil || desc.Name == "" {
		e.t.Errorf("Describe() = %+v, %v, want a name and no error", desc, err)
	}
}
