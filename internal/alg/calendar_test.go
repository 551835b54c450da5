package alg

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the zones load on any machine

	"github.com/freqcap/freqcap/sdk/driver"
)

// calendarZones are zones whose changes test the calendar arithmetic:
// whole-hour DST (New York, London), a 30-minute DST (Lord Howe), no DST
// and a half-hour offset (Kolkata), a :45 offset with DST at 02:45
// (Chatham), changes at midnight that skip it (Havana, Santiago, Sao
// Paulo until 2019, Beirut, Asuncion), a skipped day (Apia, 2011-12-30),
// a :45 offset without DST (Kathmandu) and UTC.
var calendarZones = []string{
	"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata",
	"Pacific/Chatham", "America/Havana", "America/Santiago", "America/Sao_Paulo",
	"Asia/Beirut", "America/Asuncion", "Pacific/Apia", "Asia/Kathmandu", "UTC",
}

var calendarUnits = []driver.CalendarUnit{driver.Hour, driver.Day, driver.Week, driver.Month}

// unitKey names the unit of local time lt: two instants are in the same
// unit iff their keys are equal (written from the units' definitions,
// not from sameUnit).
func unitKey(u driver.CalendarUnit, lt time.Time) string {
	switch u {
	case driver.Hour: // an hour is one offset's
		return lt.Format("2006-01-02 15 -0700")
	case driver.Day:
		return lt.Format("2006-01-02")
	case driver.Week:
		y, w := lt.ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	}
	return lt.Format("2006-01")
}

// bruteEnd is the first instant after t whose unit is not t's: stepping
// by 10 minutes (no unit here comes back within that), then bisecting to
// the nanosecond.
func bruteEnd(u driver.CalendarUnit, loc *time.Location, t time.Time) time.Time {
	k := unitKey(u, t.In(loc))
	lo := t
	hi := t.Add(10 * time.Minute)
	for unitKey(u, hi.In(loc)) == k {
		lo, hi = hi, hi.Add(10*time.Minute)
	}
	for hi.Sub(lo) > time.Nanosecond { // unitKey(lo) == k, unitKey(hi) != k
		mid := lo.Add(hi.Sub(lo) / 2)
		if unitKey(u, mid.In(loc)) == k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// bruteStart is the first instant of the run of instants up to t whose
// unit is t's.
func bruteStart(u driver.CalendarUnit, loc *time.Location, t time.Time) time.Time {
	k := unitKey(u, t.In(loc))
	hi := t
	lo := t.Add(-10 * time.Minute)
	for unitKey(u, lo.In(loc)) == k {
		hi, lo = lo, lo.Add(-10*time.Minute)
	}
	for hi.Sub(lo) > time.Nanosecond { // unitKey(hi) == k, unitKey(lo) != k
		mid := lo.Add(hi.Sub(lo) / 2)
		if unitKey(u, mid.In(loc)) == k {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// changes returns loc's zone changes from from to to (ZoneBounds).
func changes(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	for t := from; t.Before(to); {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		out = append(out, end)
		t = end
	}
	return out
}

// TestCalendarBoundsReference holds CalendarStart and CalendarEnd to a
// brute-force search of the local clock, for every unit, at instants
// around every zone change of calendarZones from 2010 to 2027 (just
// before, at and after each, and a day and a week away) and at random
// instants.
func TestCalendarBoundsReference(t *testing.T) {
	from, to := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, zone := range calendarZones {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(37, uint64(i)))
			loc := mustZone(t, zone)
			var at []time.Time
			for _, c := range changes(loc, from, to) {
				for _, d := range []time.Duration{-7 * 24 * time.Hour, -25 * time.Hour, -time.Hour, -time.Nanosecond, 0, time.Nanosecond, 15 * time.Minute, time.Hour, 90 * time.Minute, 25 * time.Hour, 7 * 24 * time.Hour} {
					at = append(at, c.Add(d))
				}
			}
			for range 40 {
				at = append(at, from.Add(time.Duration(rng.Int64N(int64(to.Sub(from))))))
			}
			for _, u := range calendarUnits {
				for _, tm := range at {
					if u == driver.Month && rng.IntN(4) != 0 {
						continue // a month's brute force is slow: a quarter of them
					}
					s, e := CalendarBounds(u, loc, tm)
					ws, we := bruteStart(u, loc, tm), bruteEnd(u, loc, tm)
					if !s.Equal(ws) || !e.Equal(we) {
						t.Errorf("CalendarBounds(%v, %s, %v) = [%v, %v), want [%v, %v)",
							u, zone, tm.In(loc), s.In(loc), e.In(loc), ws.In(loc), we.In(loc))
					}
				}
			}
		})
	}
}

// TestCalendarBoundsDate: where a unit's local start exists once, the
// window starts where time.Date puts it (Monday 00:00, the 1st 00:00, the
// hour's :00), and ends where it puts the next one.
func TestCalendarBoundsDate(t *testing.T) {
	for _, zone := range calendarZones {
		loc := mustZone(t, zone)
		for tm := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC); tm.Year() < 2026; tm = tm.Add(97*time.Minute + 13*time.Second) {
			lt := tm.In(loc)
			y, m, d := lt.Date()
			for _, u := range calendarUnits {
				var ws, we time.Time
				hs, he := 0, 0 // the local hours asked of time.Date
				switch u {
				case driver.Hour:
					hs, he = lt.Hour(), (lt.Hour()+1)%24
					ws, we = time.Date(y, m, d, lt.Hour(), 0, 0, 0, loc), time.Date(y, m, d, lt.Hour()+1, 0, 0, 0, loc)
				case driver.Day:
					ws, we = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
				case driver.Week:
					back := (int(lt.Weekday()) + 6) % 7
					ws, we = time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
				case driver.Month:
					ws, we = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
				}
				if !exact(ws, loc, hs) || !exact(we, loc, he) {
					continue // a start a change skips or repeats: the reference test's
				}
				if _, so := ws.Zone(); u == driver.Hour {
					if _, eo := we.Add(-time.Nanosecond).In(loc).Zone(); so != eo {
						continue // an hour a change cuts: the reference test's
					}
				}
				s, e := CalendarBounds(u, loc, tm)
				if !s.Equal(ws) || !e.Equal(we) {
					t.Errorf("CalendarBounds(%v, %s, %v) = [%v, %v), want [%v, %v)", u, zone, lt, s.In(loc), e.In(loc), ws, we)
				}
			}
		}
	}
}

// exact reports whether time.Date gave b, in loc, the wall clock asked
// for (hour h, on the hour) and that wall clock happens once: not an hour
// nor half an hour before or after.
func exact(b time.Time, loc *time.Location, h int) bool {
	lt := b.In(loc)
	if lt.Hour() != h || lt.Minute() != 0 || lt.Second() != 0 {
		return false
	}
	for _, d := range []time.Duration{-time.Hour, -30 * time.Minute, 30 * time.Minute, time.Hour} {
		o := b.Add(d).In(loc)
		if o.Hour() == lt.Hour() && o.Day() == lt.Day() && o.Minute() == 0 {
			return false
		}
	}
	return true
}

func TestCalendarBoundsLengths(t *testing.T) {
	ny, lhi := mustZone(t, "America/New_York"), mustZone(t, "Australia/Lord_Howe")
	at := func(loc *time.Location, s string) time.Time {
		tm, err := time.ParseInLocation(time.DateTime, s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name string
		u    driver.CalendarUnit
		loc  *time.Location
		at   string
		want time.Duration
	}{
		{"New York spring-forward day", driver.Day, ny, "2026-03-08 12:00:00", 23 * time.Hour},
		{"New York fall-back day", driver.Day, ny, "2026-11-01 12:00:00", 25 * time.Hour},
		{"New York week of spring forward", driver.Week, ny, "2026-03-05 12:00:00", 167 * time.Hour},
		{"New York week of fall back", driver.Week, ny, "2026-10-29 12:00:00", 169 * time.Hour},
		{"New York March", driver.Month, ny, "2026-03-31 23:00:00", 31*24*time.Hour - time.Hour},
		{"New York November", driver.Month, ny, "2026-11-01 00:30:00", 30*24*time.Hour + time.Hour},
		{"New York February (no change)", driver.Month, ny, "2026-02-14 00:00:00", 28 * 24 * time.Hour},
		{"New York leap February", driver.Month, ny, "2028-02-29 23:59:59", 29 * 24 * time.Hour},
		{"Lord Howe April (30 minutes back)", driver.Month, lhi, "2026-04-15 12:00:00", 30*24*time.Hour + 30*time.Minute},
		{"Lord Howe October (30 minutes ahead)", driver.Month, lhi, "2026-10-15 12:00:00", 31*24*time.Hour - 30*time.Minute},
		{"Lord Howe spring-forward hour 02:00 is 30 minutes", driver.Hour, lhi, "2026-10-04 02:40:00", 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := CalendarBounds(tc.u, tc.loc, at(tc.loc, tc.at))
			if got := e.Sub(s); got != tc.want {
				t.Errorf("CalendarBounds(%v, %s) = [%v, %v), %v long, want %v", tc.u, tc.at, s, e, got, tc.want)
			}
		})
	}
}
