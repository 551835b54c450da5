package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// shiftedZone returns a zone whose wall clock at instant u reads what
// loc's read at u-delta (delta whole seconds): loc's changes from from to
// to, each delta later, at offsets delta smaller. So the server's clock,
// which cannot be moved, stands at any instant of loc's past: a calendar
// window of the shifted zone around now is loc's window around
// now-delta, delta later. (TZif version 1 data: changes as 32-bit
// seconds, so until 2038.)
func shiftedZone(t *testing.T, loc *time.Location, delta time.Duration, from, to time.Time) *time.Location {
	t.Helper()
	d := int64(delta / time.Second)
	type period struct {
		start int64 // Unix s, shifted
		off   int32 // shifted
	}
	_, off0 := from.In(loc).Zone()
	first := period{off: int32(int64(off0) - d)}
	var ps []period
	for u := from; u.Before(to); {
		_, end := u.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		_, off := end.In(loc).Zone()
		ps = append(ps, period{start: end.Unix() + d, off: int32(int64(off) - d)})
		u = end
	}
	be := binary.BigEndian
	b := append([]byte("TZif"), make([]byte, 16)...)
	for _, n := range []uint32{0, 0, 0, uint32(len(ps)), uint32(len(ps) + 1), 2} {
		b = be.AppendUint32(b, n)
	}
	for _, p := range ps {
		b = be.AppendUint32(b, uint32(int32(p.start)))
	}
	for i := range ps {
		b = append(b, byte(i+1))
	}
	for _, p := range append([]period{first}, ps...) {
		b = append(be.AppendUint32(b, uint32(p.off)), 0, 0)
	}
	b = append(b, 'Z', 0)
	z, err := time.LoadLocationFromTZData(fmt.Sprintf("%s+%ds", loc, d), b)
	if err != nil {
		t.Fatalf("LoadLocationFromTZData: %v", err)
	}
	return z
}

// TestCalendarBoundsAcrossDST is the differential test of calendar
// windows across DST changes: for instants around each change of five
// zones (whole-hour DST, Lord Howe's 30 minutes, Kolkata without DST,
// Chatham's :45 offset), every unit, a Redis take on the server's clock,
// in a zone shifted to stand at that instant (shiftedZone; the attempt
// carries it), and the memory backend at the same instant report the
// window end alg.CalendarEnd gives for the real zone (itself held to a
// brute-force search of the local clock: internal/alg), to the
// microsecond. On a standalone server and a cluster.
func TestCalendarBoundsAcrossDST(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var b *Backend
			if mode == "standalone" {
				b, _ = standalone(t)
			} else {
				b, _ = cluster(t)
			}
			calendarAcrossDST(t, b)
		})
	}
}

func calendarAcrossDST(t *testing.T, b *Backend) {
	ctx := context.Background()
	from, to := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	units := []driver.CalendarUnit{driver.Hour, driver.Day, driver.Week, driver.Month}
	checked := 0
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		// Instants around each change: an hour and a bit before and after,
		// a day and a bit, three days; none near a boundary (the take
		// happens a few ms after the instant it aims at).
		var at []time.Time
		for u := from; ; {
			_, end := u.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(to) {
				break
			}
			for _, d := range []time.Duration{-73 * time.Hour, -25 * time.Hour, -67 * time.Minute, 7 * time.Minute, 67 * time.Minute, 25 * time.Hour, 73 * time.Hour} {
				at = append(at, end.Add(d+17*time.Second))
			}
			u = end
		}
		if len(at) == 0 { // no DST (Kolkata): a spread of instants
			for m := 0; m < 36; m += 5 {
				at = append(at, from.AddDate(0, m, 13).Add(7*time.Hour+17*time.Second))
			}
		}
		for _, tm := range at {
			for _, u := range units {
				now := time.Now()
				delta := now.Add(20 * time.Millisecond).Sub(tm).Truncate(time.Second)
				z := shiftedZone(t, loc, delta, tm.AddDate(0, -2, 0), tm.AddDate(0, 2, 0))
				s := newSubject(t, "dst")
				r := driver.Rule{Name: "c", Key: s.key("c"), Algorithm: driver.FixedWindow, Limit: 100, Window: u.Nominal(), Calendar: u, Location: time.UTC}
				req := s.request(opTake, 1, r)
				req.Zone = z
				res := take(t, b, req)
				past := res.Now.Add(-delta) // the instant of loc the server stood at
				end := alg.CalendarEnd(u, loc, past)
				label := fmt.Sprintf("%s %v at %v (server %v)", zone, u, past.In(loc), res.Now)
				if got, want := res.Rules[0].ResetAfter, end.Sub(past).Truncate(time.Microsecond); got != want {
					t.Errorf("%s: Redis ResetAfter = %v, want %v (until %v)", label, got, want, end.In(loc))
				}
				mem := memory.New(&memory.Options{Clock: fakeclock.New(res.Now)})
				mres, err := mem.Take(ctx, req.Request)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := mres.Rules[0].ResetAfter, res.Rules[0].ResetAfter; got != want {
					t.Errorf("%s: memory ResetAfter = %v, Redis's %v", label, got, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d windows checked", checked)
}

// TestCalendarZoneChangeKeepsEntry: a take in another zone keeps the
// stored entry's window (its expiry) until it ends, counting on in it.
func TestCalendarZoneChangeKeepsEntry(t *testing.T) {
	b, c := standalone(t)
	now := serverNow(t, c).Truncate(time.Second)
	// Zones whose midnights are an hour and two hours away.
	at := func(mid time.Time) *time.Location {
		return time.FixedZone("mid", int((24*time.Hour-time.Duration(mid.Unix()%86400)*time.Second)/time.Second))
	}
	endA, endB := now.Add(time.Hour), now.Add(2*time.Hour)
	s := newSubject(t, "zones")
	r := driver.Rule{Name: "d", Key: s.key("d"), Algorithm: driver.FixedWindow, Limit: 3, Window: 24 * time.Hour, Calendar: driver.Day, Location: time.UTC}
	for i, tc := range []struct {
		zone *time.Location
		used int64
	}{{at(endA), 1}, {at(endB), 2}, {nil, 3}} {
		req := s.request(opTake, 1, r)
		req.Zone = tc.zone
		res := take(t, b, req)
		checkRule(t, fmt.Sprintf("take #%d", i+1), res.Rules[0], true, tc.used, 3)
		if got, want := res.Rules[0].ResetAfter, endA.Sub(res.Now); got != want {
			t.Errorf("take #%d ResetAfter = %v, want %v (the first zone's midnight)", i+1, got, want)
		}
		if e, ok := entryOf(t, c, r); !ok || e.Expiry != endA.UnixMilli() || e.Ints[0] != tc.used {
			t.Errorf("take #%d: entry %+v (present %t), want count %d expiring at %d", i+1, e, ok, tc.used, endA.UnixMilli())
		}
	}
}
