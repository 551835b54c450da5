package conformance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The calendar cases of weeks, months, the attempt's zone and DST changes
// on any clock. Expected boundaries come from time.Date (unitEnd), in
// zones whose boundaries exist once. A real clock cannot be taken to a
// DST change, so the cases that must run on every backend build zones
// whose changes and boundaries fall a few seconds from the backend's now:
// fixed zones (time.FixedZone), and zones with one DST change
// (changeZone: tz data built here, loaded with time.LoadLocationFromTZData),
// given to the attempts (sdk.Attempt.Zone).

// unitEnd returns the first instant of the unit u of loc after t's
// (time.Date's local boundary: Monday 00:00 for a week, the 1st for a
// month).
func unitEnd(t time.Time, u driver.CalendarUnit, loc *time.Location) time.Time {
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch u {
	case driver.Hour:
		return time.Date(y, m, d, lt.Hour()+1, 0, 0, 0, loc)
	case driver.Week:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case driver.Month:
		return time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// wallLength is the length on the wall clock of the unit u of loc that
// starts at start: what it lasts without a DST change.
func wallLength(start time.Time, u driver.CalendarUnit, loc *time.Location) time.Duration {
	lt := start.In(loc)
	switch u {
	case driver.Hour:
		return time.Hour
	case driver.Week:
		return 7 * 24 * time.Hour
	case driver.Month:
		y, m, _ := lt.Date()
		return time.Duration(time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()) * 24 * time.Hour
	}
	return 24 * time.Hour
}

func calendarWeekBerlin(e *env)       { calendarIn(e, driver.Week, "Europe/Berlin") }
func calendarMonthSaoPaulo(e *env)    { calendarIn(e, driver.Month, "America/Sao_Paulo") }
func calendarDSTWeekLondon(e *env)    { calendarDSTIn(e, driver.Week, "Europe/London") }
func calendarDSTMonthLordHowe(e *env) { calendarDSTIn(e, driver.Month, "Australia/Lord_Howe") }

// boundaryWall returns the first local boundary of unit u at or after t
// on UTC's wall clock: midnight, Monday 00:00 or the 1st 00:00.
func boundaryWall(t time.Time, u driver.CalendarUnit) time.Time {
	t = t.UTC()
	y, m, d := t.Date()
	s := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	if u == driver.Week {
		s = s.AddDate(0, 0, -((int(t.Weekday()) + 6) % 7))
	} else if u == driver.Month {
		s = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	}
	if s.Equal(t) {
		return s
	}
	return unitEnd(s, u, time.UTC)
}

// offsetFor returns the UTC offset (whole seconds) at which instant at,
// a whole second, reads as a local boundary of unit u.
func offsetFor(at time.Time, u driver.CalendarUnit) int {
	return int(boundaryWall(at, u).Unix() - at.Unix())
}

// changeZone returns a zone named name whose offset is before (seconds
// east of UTC) until change, a whole second, and after from then on:
// one DST change (after > before: spring forward, the clock skips
// after-before; else it repeats before-after). It is TZif data, version
// 1, read by time.LoadLocationFromTZData.
func changeZone(e *env, name string, change time.Time, before, after int) *time.Location {
	e.t.Helper()
	be := binary.BigEndian
	var b []byte
	b = append(b, "TZif"...)
	b = append(b, make([]byte, 16)...) // version 1 ('\x00') and 15 reserved bytes
	const abbrs = "STD\x00DST\x00"
	for _, n := range []uint32{0, 0, 0, 1, 2, uint32(len(abbrs))} { // isut, isstd, leap, time, type, char counts
		b = be.AppendUint32(b, n)
	}
	b = be.AppendUint32(b, uint32(int32(change.Unix())))
	b = append(b, 1) // the change's type: after
	b = be.AppendUint32(b, uint32(int32(before)))
	b = append(b, 0, 0) // not DST, abbreviation STD
	b = be.AppendUint32(b, uint32(int32(after)))
	b = append(b, 1, 4) // DST, abbreviation DST
	b = append(b, abbrs...)
	loc, err := time.LoadLocationFromTZData(name, b)
	if err != nil {
		e.t.Fatalf("LoadLocationFromTZData(%s) = %v", name, err)
	}
	if _, off := change.Add(-time.Second).In(loc).Zone(); off != before {
		e.t.Fatalf("zone %s: offset %d before its change, want %d", name, off, before)
	}
	if _, off := change.In(loc).Zone(); off != after {
		e.t.Fatalf("zone %s: offset %d at its change, want %d", name, off, after)
	}
	return loc
}

// calendarDSTNow checks days, weeks and months across a DST change on any
// clock: each gets a zone in which its unit ends 4w after the table's
// base (w: 1s on a real clock), with a DST change either ahead of the
// first attempts (at base+2w: the clock skips an hour, so the end must be
// found past the change) or behind them (two hours before base: the
// clock repeated an hour, so the unit started before the change, an hour
// longer). The attempts carry the zone; the rules' own is UTC. Each unit
// admits 2 until its end, then a new unit of the unit's wall length.
func calendarDSTNow(e *env) {
	w := e.w()
	base := e.now().Truncate(time.Second).Add(time.Second)
	end := base.Add(4 * w)
	var rules []sdk.Rule
	var steps, later, last []step
	for _, u := range []driver.CalendarUnit{driver.Day, driver.Week, driver.Month} {
		for _, sc := range []struct {
			name   string
			change time.Time
			shift  int // after - before, seconds
		}{
			{"ahead", base.Add(2 * w), 3600},
			{"behind", base.Add(-2 * time.Hour), -3600},
		} {
			after := offsetFor(end, u)
			name := fmt.Sprintf("%v-%s", u, sc.name)
			z := changeZone(e, "ct-"+name, sc.change, after-sc.shift, after)
			if got := unitEnd(base, u, z); !got.Equal(end) {
				e.t.Fatalf("test bug: zone %s: unit ends at %v, want %v", name, got, end)
			}
			r := e.calendar(name, 2, u, time.UTC)
			rules = append(rules, r)
			only := []string{name}
			next := unitEnd(end, u, z).Sub(base)
			steps = append(steps,
				step{op: take, only: only, zone: z, cost: 2, by: 2 * w, want: allowed(admits(2, 2, 4*w))},
				step{op: take, only: only, zone: z, by: 2 * w, want: denied(denies(2, 2, 4*w, 4*w))},
			)
			later = append(later, step{at: 3 * w, op: take, only: only, zone: z, by: 4 * w, want: denied(denies(2, 2, 4*w, 4*w))})
			last = append(last, step{at: 4 * w, op: take, only: only, zone: z, want: allowed(admits(1, 2, next))})
		}
	}
	e.run(base, rules, append(append(steps, later...), last...))
}

// calendarZonePerAttempt checks that the attempt's zone wins over the
// rule's: a Daily rule in UTC counts in Tokyo's days for attempts from
// Tokyo, in UTC's for attempts without a zone (another person), and a
// Weekly one in Kolkata's weeks.
func calendarZonePerAttempt(e *env) {
	tokyo, kolkata := mustZone(e, "Asia/Tokyo"), mustZone(e, "Asia/Kolkata")
	day := e.calendar("d", 3, driver.Day, time.UTC)
	week := e.calendar("w", 10, driver.Week, time.UTC)
	for _, tc := range []struct {
		who  string
		zone *time.Location
		r    sdk.Rule
		in   *time.Location // where its windows are
	}{
		{"tokyo", tokyo, day, tokyo},
		{"utc", nil, day, time.UTC},
		{"kolkata", kolkata, week, kolkata},
	} {
		a := sdk.Attempt{Subject: e.subject(tc.who), Cost: 2, Zone: tc.zone}
		d := e.takeAttempt(a, tc.r)
		end := unitEnd(d.At, tc.r.Calendar, tc.in)
		e.expect(fmt.Sprintf("Take(%s, zone %v)", tc.r.Name, tc.zone), d, true, want(true, 2, tc.r.Limit, end.Sub(d.At), 0))
		d = e.peekAttempt(sdk.Attempt{Subject: e.subject(tc.who), Zone: tc.zone}, tc.r)
		e.before(d, end, "peek")
		e.expect(fmt.Sprintf("Peek(%s, zone %v)", tc.r.Name, tc.zone), d, true, want(true, 2, tc.r.Limit, end.Sub(d.At), 0))
	}
	_, err := e.lim.Take(bg(), e.policy(day), sdk.Attempt{Subject: e.subject(), Zone: time.Local})
	if !errors.Is(err, sdk.ErrInvalidZone) {
		e.t.Errorf("Take(zone time.Local) = %v, want %v", err, sdk.ErrInvalidZone)
	}
}

// midnightZone returns a fixed zone named name in which at, a whole
// second, is local midnight.
func midnightZone(name string, at time.Time) *time.Location {
	return time.FixedZone(name, offsetFor(at, driver.Day))
}

// calendarZoneChange checks that a person whose zone changes is never
// uncapped: a Daily rule (limit 2) keeps counting in the window it stored
// until that window ends, whatever the day of the attempt's zone around
// now, then starts the day of the attempt's zone. Zones A, B and C have
// their midnights at base+2w, +4w and +w (w: 1s on a real clock).
func calendarZoneChange(e *env) {
	w := e.w()
	base := e.now().Truncate(time.Second).Add(time.Second)
	a, b, c := midnightZone("ct-A", base.Add(2*w)), midnightZone("ct-B", base.Add(4*w)), midnightZone("ct-C", base.Add(w))
	r := e.calendar("d", 2, driver.Day, time.UTC)
	day := 24 * time.Hour
	e.run(base, []sdk.Rule{r}, []step{
		{op: take, zone: a, by: w, want: allowed(admits(1, 2, 2*w))},
		{op: take, zone: a, by: w, want: allowed(admits(2, 2, 2*w))},
		// B's day ends later, C's earlier: A's stored day holds for both.
		{op: take, zone: b, by: w, want: denied(denies(2, 2, 2*w, 2*w))},
		{op: take, zone: c, by: w, want: denied(denies(2, 2, 2*w, 2*w))},
		// C's new day has begun; A's stored one still holds.
		{at: w, op: take, zone: c, by: 2 * w, want: denied(denies(2, 2, 2*w, 2*w))},
		{at: w, op: peek, zone: c, by: 2 * w, want: denied(denies(2, 2, 2*w, 2*w))},
		// A's day is over: B's day, from now to its end.
		{at: 2 * w, op: take, zone: b, by: 4 * w, want: allowed(admits(1, 2, 4*w))},
		// A's next day ends a day on: B's stored day holds.
		{at: 2 * w, op: take, zone: a, by: 4 * w, want: allowed(admits(2, 2, 4*w))},
		{at: 2 * w, op: take, zone: a, by: 4 * w, want: denied(denies(2, 2, 4*w, 4*w))},
		// B's day is over: A's day, to A's next midnight.
		{at: 4 * w, op: take, zone: a, want: allowed(admits(1, 2, 2*w+day))},
	})
}
