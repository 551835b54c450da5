package redis

import (
	"time"

	"github.com/freqcap/freqcap/internal/bounded"
	"github.com/freqcap/freqcap/sdk/driver"
)

// calendarCacheMax bounds the calendar boundaries a Backend keeps, one
// entry per unit, zone and span: when a new one would exceed it, the
// cache is emptied and refills from the zones in use. Zones come from
// attempts (driver.Request.Zone), so a process sending to many
// recipients' zones may reach it; every call still gets its own zone's
// boundaries.
const calendarCacheMax = 1024

// calendarKey is what calendarBounds computes from besides now. A zone
// is its *time.Location: two loads of one name are two keys (sdk.LoadZone
// loads each name once).
type calendarKey struct {
	unit driver.CalendarUnit
	loc  *time.Location
	span int
}

// calendarEntry is the last boundaries computed for a key and the unit
// [cur, next) they hold for (calendarWindow). It is never changed once
// stored.
type calendarEntry struct {
	cur, next time.Time // no monotonic reading: compared on the wall clock
	bounds    string
}

// calendarCache maps calendarKey to the last calendarEntry computed for
// it, at most calendarCacheMax entries (it empties when full, as
// specCache does). A calendar rule's boundaries change only when the
// clock leaves their unit (an hour at most), so every attempt of the
// unit after the first reads them here, with no time-zone arithmetic.
// Safe for concurrent use.
type calendarCache struct {
	c bounded.Map[calendarKey, *calendarEntry]
}

// bounds returns calendarBounds(now, unit, loc, span): the entry of
// (unit, loc, span) when now falls in its unit [cur, next), else the
// boundaries computed anew, which replace it. A clock that goes back
// before cur computes them anew too: the entry is never used outside its
// unit.
func (c *calendarCache) bounds(now time.Time, unit driver.CalendarUnit, loc *time.Location, span int) (string, error) {
	if loc == nil {
		loc = time.UTC
	}
	k := calendarKey{unit: unit, loc: loc, span: span}
	if e, _ := c.c.Get(k); e != nil && !now.Before(e.cur) && now.Before(e.next) {
		return e.bounds, nil
	}
	bs, cur, next, err := calendarWindow(now, unit, loc, span)
	if err != nil {
		return "", err
	}
	c.c.Put(k, &calendarEntry{cur: cur.Round(0), next: next.Round(0), bounds: bs}, calendarCacheMax)
	return bs, nil
}
