package alg

import (
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// ---- Calendar windows ----
//
// A calendar unit's window is the longest run of instants around t whose
// local time in loc falls in t's unit (its local hour, day, ISO week or
// month): from the first such instant to the first instant of the next
// unit. Within one zone period (ZoneBounds: a constant offset) local time
// runs with real time, so a boundary is found by wall-clock arithmetic at
// t's offset; where that lands outside the period, the offset changes
// first and the search goes on from the period's edge. So windows follow
// local midnights across DST changes (a day of 23 or 25 hours; a week or
// month an hour shorter or longer), a boundary a change skips (23:00 to
// 01:00, Havana; 02:45 to 03:45 in an hour unit, Chatham) is the change's
// instant, and a day a zone skips entirely (Pacific/Apia, 2011-12-30) has
// no window. An hour is one offset's too: the local hour a fall-back
// change repeats is two windows of an hour, as the epoch's hours are, and
// an hour a change cuts short (Lord Howe's half-hour change) is shorter. The Redis backend sends the same boundaries to its script
// (backends/redis: calendarBounds).

// CalendarStart returns the first instant of the unit u of loc holding t.
func CalendarStart(u driver.CalendarUnit, loc *time.Location, t time.Time) time.Time {
	for {
		lt := t.In(loc)
		c := t.Add(-into(u, lt)) // the unit's start at t's offset
		ps, _ := lt.ZoneBounds()
		if ps.IsZero() || c.After(ps) {
			return c
		}
		// The unit started at or before the period's start: in the period
		// before, unless that one's last instant is another unit.
		prev := ps.Add(-time.Nanosecond)
		if !sameUnit(u, prev.In(loc), lt) {
			return ps
		}
		t = prev
	}
}

// CalendarEnd returns the first instant after t of a unit of loc other
// than t's: the end of t's window.
func CalendarEnd(u driver.CalendarUnit, loc *time.Location, t time.Time) time.Time {
	for {
		lt := t.In(loc)
		c := t.Add(unitLength(u, lt) - into(u, lt)) // the unit's end at t's offset
		_, pe := lt.ZoneBounds()
		if pe.IsZero() || c.Before(pe) {
			return c
		}
		if !sameUnit(u, pe.In(loc), lt) {
			return pe
		}
		t = pe
	}
}

// CalendarBounds returns the window of unit u of loc holding t (loc nil:
// UTC).
func CalendarBounds(u driver.CalendarUnit, loc *time.Location, t time.Time) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	return CalendarStart(u, loc, t), CalendarEnd(u, loc, t)
}

// into is how long, on the wall clock, local time lt is past the start of
// its unit.
func into(u driver.CalendarUnit, lt time.Time) time.Duration {
	h, m, s := lt.Clock()
	d := time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(lt.Nanosecond())
	if u == driver.Hour {
		return d
	}
	d += time.Duration(h) * time.Hour
	switch u {
	case driver.Week:
		d += time.Duration((int(lt.Weekday())+6)%7) * 24 * time.Hour // days since Monday
	case driver.Month:
		d += time.Duration(lt.Day()-1) * 24 * time.Hour
	}
	return d
}

// unitLength is the wall-clock length of lt's unit.
func unitLength(u driver.CalendarUnit, lt time.Time) time.Duration {
	if u == driver.Month {
		y, m, _ := lt.Date()
		return time.Duration(time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()) * 24 * time.Hour
	}
	return u.Nominal()
}

// sameUnit reports whether local times a and b fall in the same unit.
func sameUnit(u driver.CalendarUnit, a, b time.Time) bool {
	switch u {
	case driver.Week:
		ay, aw := a.ISOWeek()
		by, bw := b.ISOWeek()
		return ay == by && aw == bw
	case driver.Month:
		return a.Year() == b.Year() && a.Month() == b.Month()
	}
	ay, ad := a.Year(), a.YearDay()
	if ay != b.Year() || ad != b.YearDay() {
		return false
	}
	if u != driver.Hour {
		return true
	}
	// An hour is also one offset's: the local hour a change repeats is
	// two windows, as it is two hours.
	_, ao := a.Zone()
	_, bo := b.Zone()
	return a.Hour() == b.Hour() && ao == bo
}
