package redis

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// calendarZones are zones whose changes test the cache: DST of an hour
// (New York, London), of half an hour (Lord Howe), a boundary a change
// skips (Havana's midnight, Chatham's 02:45), a day skipped (Apia,
// 2011-12-30), a fractional offset and no DST (Kolkata), and UTC.
func calendarZones(t testing.TB) []*time.Location {
	t.Helper()
	var locs []*time.Location
	for _, name := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "America/Havana", "Pacific/Chatham", "Pacific/Apia", "UTC"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	return locs
}

var calendarUnits = []driver.CalendarUnit{driver.Hour, driver.Day, driver.Week, driver.Month}

// zoneChanges returns loc's offset changes in [from, to).
func zoneChanges(loc *time.Location, from, to time.Time) []time.Time {
	var cs []time.Time
	for t := from; t.Before(to); {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		cs = append(cs, end)
		t = end
	}
	return cs
}

// checkBounds checks that c gives calendarBounds' answer at now.
func checkBounds(t *testing.T, c *calendarCache, now time.Time, u driver.CalendarUnit, loc *time.Location, span int) {
	t.Helper()
	want, err := calendarBounds(now, u, loc, span)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.bounds(now, u, loc, span); err != nil || got != want {
		t.Fatalf("bounds(%v, %v, %v, %d) = %s, %v, want %s (uncached)", now, u, loc, span, got, err, want)
	}
}

// The cache gives the uncached boundaries at every instant, walking the
// clock forward and back: around every offset change of the zones from
// 2023 to 2027 (and Apia's skipped day), minute by minute and at each
// boundary's nanosecond before and after, and at random instants.
func TestCalendarCacheMatches(t *testing.T) {
	from, to := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, loc := range calendarZones(t) {
		for _, u := range calendarUnits {
			for _, span := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%v/%d", loc, u, span), func(t *testing.T) {
					var c calendarCache
					changes := zoneChanges(loc, from, to)
					if loc.String() == "Pacific/Apia" {
						changes = append(changes, zoneChanges(loc, time.Date(2011, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2012, 1, 1, 0, 0, 0, 0, time.UTC))...)
					}
					for _, ch := range changes {
						// Forward minute by minute, then back.
						for d := -3 * time.Hour; d <= 3*time.Hour; d += time.Minute {
							checkBounds(t, &c, ch.Add(d), u, loc, span)
						}
						for d := 3 * time.Hour; d >= -3*time.Hour; d -= 7 * time.Minute {
							checkBounds(t, &c, ch.Add(d), u, loc, span)
						}
						// Each boundary, its nanosecond before (a clock gone
						// back out of the cached unit) and after.
						_, cur, next, err := calendarWindow(ch, u, loc, span)
						if err != nil {
							t.Fatal(err)
						}
						for _, b := range []time.Time{cur, next} {
							for _, d := range []time.Duration{0, -1, 1, -1, 0, 1, time.Millisecond, -time.Millisecond} {
								checkBounds(t, &c, b.Add(d), u, loc, span)
							}
						}
					}
					rng := rand.New(rand.NewPCG(uint64(u), uint64(span)))
					now := from
					for range 2000 {
						switch rng.IntN(4) {
						case 0: // anywhere
							now = from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)))))
						case 1: // back a little
							now = now.Add(-time.Duration(rng.Int64N(int64(2 * time.Hour))))
						default: // on a little
							now = now.Add(time.Duration(rng.Int64N(int64(90 * time.Minute))))
						}
						checkBounds(t, &c, now, u, loc, span)
					}
				})
			}
		}
	}
}

// Once computed, a unit's boundaries are served without computing them
// again (the entry's unit), and a clock outside it (later, or gone back)
// replaces the entry.
func TestCalendarCacheEntry(t *testing.T) {
	ny := calendarZones(t)[0]
	var c calendarCache
	now := time.Date(2024, 11, 3, 12, 0, 0, 0, ny) // the fall-back day: 25 hours
	want, err := calendarBounds(now, driver.Day, ny, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkBounds(t, &c, now, driver.Day, ny, 1)
	e, _ := c.c.Get(calendarKey{driver.Day, ny, 1})
	day0, day1 := time.Date(2024, 11, 3, 0, 0, 0, 0, ny), time.Date(2024, 11, 4, 0, 0, 0, 0, ny)
	if e == nil || !e.cur.Equal(day0) || !e.next.Equal(day1) || e.bounds != want {
		t.Fatalf("entry = %+v, want [%v, %v) %s", e, day0, day1, want)
	}
	// A forged entry shows which calls read it: those in its unit only.
	e.bounds = "cached"
	for _, tc := range []struct {
		now    time.Time
		cached bool
	}{
		{day0, true},
		{day0.Add(24*time.Hour + 59*time.Minute), true}, // 23:59, the 25th hour
		{day1.Add(-time.Nanosecond), true},
		{day0.Add(-time.Nanosecond), false}, // the clock went back
	} {
		got, err := c.bounds(tc.now, driver.Day, ny, 1)
		if err != nil || (got == "cached") != tc.cached {
			t.Errorf("bounds(%v) = %s, %v, want cached %v", tc.now, got, err, tc.cached)
		}
	}
	if got, _ := c.bounds(day0, driver.Day, ny, 1); got == "cached" {
		t.Errorf("bounds(%v) after the clock went back = the old entry, want it replaced", day0)
	}
	if got, _ := c.bounds(day1, driver.Day, ny, 1); got == "cached" {
		t.Errorf("bounds(%v) = the previous day's entry", day1)
	}
	// The span and the unit are part of the key.
	checkBounds(t, &c, day1, driver.Day, ny, 2)
	checkBounds(t, &c, day1, driver.Hour, ny, 1)
	// An unknown unit is an error, never cached.
	if _, err := c.bounds(now, driver.CalendarUnit(99), ny, 1); err == nil {
		t.Errorf("bounds(unit 99) = nil error, want one")
	}
}

// More zones than calendarCacheMax keep the cache bounded, and every
// call gets its own zone's boundaries.
func TestCalendarCacheBounded(t *testing.T) {
	var c calendarCache
	now := time.Date(2026, 3, 4, 12, 30, 0, 0, time.UTC)
	for i := range 3 * calendarCacheMax {
		loc := time.FixedZone(fmt.Sprintf("z%d", i), (i%96-48)*15*60)
		checkBounds(t, &c, now, driver.Day, loc, 1)
		if n := c.c.Len(); n > calendarCacheMax {
			t.Fatalf("after %d zones: %d entries, want <= %d", i+1, n, calendarCacheMax)
		}
	}
}

// Goroutines sharing a cache, each on its own clock walking over New
// York's and Lord Howe's changes forward and back, all get the uncached
// boundaries (run with -race).
func TestCalendarCacheConcurrent(t *testing.T) {
	locs := calendarZones(t)
	var c calendarCache
	base := time.Date(2024, 11, 3, 4, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			now := base
			for range 3000 {
				now = now.Add(time.Duration(rng.Int64N(int64(40*time.Minute))) - 15*time.Minute)
				loc := locs[rng.IntN(3)]
				u := calendarUnits[rng.IntN(len(calendarUnits))]
				want, _ := calendarBounds(now, u, loc, 1)
				if got, err := c.bounds(now, u, loc, 1); err != nil || got != want {
					errs <- fmt.Errorf("bounds(%v, %v, %v) = %s, %v, want %s", now, u, loc, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
