package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zones load on machines without zoneinfo

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

func TestFixedWindow(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "fixed")
	r := s.fixed("f", 3, time.Hour)
	for i := int64(1); i <= 3; i++ {
		res := take(t, b, s.request(opTake, 1, r))
		checkRule(t, fmt.Sprintf("take #%d", i), res.Rules[0], true, i, 3)
		end := res.Now.Truncate(time.Hour).Add(time.Hour)
		if got := res.Rules[0].ResetAfter; got != end.Sub(res.Now) {
			t.Errorf("take #%d ResetAfter = %v, want %v", i, got, end.Sub(res.Now))
		}
		pet, err := c.PExpireTime(ctx, r.Key).Result()
		if err != nil || pet != time.Duration(end.UnixMilli())*time.Millisecond {
			t.Errorf("PEXPIRETIME = %v, %v, want the window end %v", pet, err, end.UnixMilli())
		}
	}
	res := take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take #4", res.Rules[0], false, 3, 3)
	if res.Allowed || res.Rules[0].RetryAfter <= 0 || res.Rules[0].RetryAfter != res.Rules[0].ResetAfter {
		t.Errorf("take #4 = %+v, want denied with RetryAfter = ResetAfter > 0", res)
	}
	res = take(t, b, s.request(opTake, 4, r))
	if !res.Rules[0].CostTooHigh || res.Rules[0].RetryAfter != 0 || res.Rules[0].Used != 3 {
		t.Errorf("take cost 4 = %+v, want CostTooHigh, RetryAfter 0, used 3", res.Rules[0])
	}
	if e, ok := entryOf(t, c, r); !ok || len(e.Ints) != 1 || e.Ints[0] != 3 {
		t.Errorf("entry = %+v (present %v), want count {3} (denials consume nothing)", e, ok)
	}
}

func TestFixedWindowStaleCounter(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "stale")
	r := s.fixed("f", 3, time.Hour)
	// A counter of another window (expiring at a different instant) must
	// not count, whatever its TTL.
	// The rule's entry, with the rule's own tag, at its count's limit.
	end := serverNow(t, c).Truncate(time.Hour).Add(2*time.Hour + 7*time.Millisecond)
	putPacked(t, c, r.Key, packedEntry{Tag: ruleTag(&r), Expiry: end.UnixMilli(), Ints: []int64{3}})
	res := take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take over a stale counter", res.Rules[0], true, 1, 3)
	want := res.Now.Truncate(time.Hour).Add(time.Hour).UnixMilli()
	if e, ok := entryOf(t, c, r); !ok || len(e.Ints) != 1 || e.Ints[0] != 1 || e.Expiry != want {
		t.Errorf("entry = %+v (present %v), want count {1} expiring at the window end %d", e, ok, want)
	}
	if pet, _ := c.PExpireTime(ctx, r.Key).Result(); pet != time.Duration(want)*time.Millisecond {
		t.Errorf("PEXPIRETIME = %v, want the window end %d ms (the stale entry dropped)", pet, want)
	}
}

func TestCalendarWindow(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		unit driver.CalendarUnit
		zone string
	}{
		{"day shanghai", driver.Day, "Asia/Shanghai"},
		{"day new york", driver.Day, "America/New_York"},
		{"hour kolkata", driver.Hour, "Asia/Kolkata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := time.LoadLocation(tc.zone)
			if err != nil {
				t.Fatalf("zone %s: %v", tc.zone, err)
			}
			s := newSubject(t, "cal")
			r := driver.Rule{Name: "d", Key: s.key("d"), Algorithm: driver.FixedWindow, Limit: 2, Window: 24 * time.Hour, Calendar: tc.unit, Location: loc}
			res := take(t, b, s.request(opTake, 1, r))
			checkRule(t, "take", res.Rules[0], true, 1, 2)
			l := res.Now.In(loc)
			var end time.Time
			if tc.unit == driver.Day {
				end = time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
			} else {
				end = time.Date(l.Year(), l.Month(), l.Day(), l.Hour()+1, 0, 0, 0, loc)
			}
			if got := res.Rules[0].ResetAfter; got != end.Sub(res.Now) {
				t.Errorf("ResetAfter = %v, want %v (until %v)", got, end.Sub(res.Now), end)
			}
			pet, _ := c.PExpireTime(ctx, r.Key).Result()
			if pet != time.Duration(end.UnixMilli())*time.Millisecond {
				t.Errorf("PEXPIRETIME = %v ms, want %d", pet.Milliseconds(), end.UnixMilli())
			}
		})
	}
}

func TestCalendarSkewTooLarge(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "skew")
	r := driver.Rule{Name: "d", Key: s.key("d"), Algorithm: driver.FixedWindow, Limit: 2, Window: time.Hour, Calendar: driver.Hour, Location: time.UTC}
	rep, err := b.report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.encode(opTake, s.request(opTake, 1, r).Request, time.Now().Add(-5*time.Hour), rep)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.run(context.Background(), takeScript, lua.Take, false, c.keys, c.args)
	if err == nil || !strings.Contains(err.Error(), "calendar boundaries") {
		t.Errorf("take with boundaries 5h off = %v, want a calendar boundaries error", err)
	}
}

func TestCalendarBounds(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	ms := func(s string, loc *time.Location) int64 {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	for _, tc := range []struct {
		name string
		now  string
		loc  *time.Location
		unit driver.CalendarUnit
		want []string // local times
	}{
		{"spring forward day is 23h", "2024-03-10 12:00", ny, driver.Day, []string{"2024-03-09 00:00", "2024-03-10 00:00", "2024-03-11 00:00", "2024-03-12 00:00"}},
		{"fall back day is 25h", "2024-11-03 23:59", ny, driver.Day, []string{"2024-11-02 00:00", "2024-11-03 00:00", "2024-11-04 00:00", "2024-11-05 00:00"}},
		{"hour at half past in Kolkata", "2024-05-01 10:15", kolkata, driver.Hour, []string{"2024-05-01 09:00", "2024-05-01 10:00", "2024-05-01 11:00", "2024-05-01 12:00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, _ := time.ParseInLocation("2006-01-02 15:04", tc.now, tc.loc)
			got, err := calendarBounds(now, tc.unit, tc.loc, 1)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, strconv.FormatInt(ms(w, tc.loc), 10))
			}
			if got != strings.Join(want, ",") {
				t.Errorf("calendarBounds(%s) = %s, want %s", tc.now, got, strings.Join(want, ","))
			}
		})
	}
	// Across the fall-back change, hours stay one hour apart in absolute
	// time (the repeated local hour is two windows).
	now := time.Date(2024, 11, 3, 5, 30, 0, 0, time.UTC) // 01:30 EDT
	got, _ := calendarBounds(now, driver.Hour, ny, 2)
	parts := strings.Split(got, ",")
	for i := 1; i < len(parts); i++ {
		a, _ := strconv.ParseInt(parts[i-1], 10, 64)
		z, _ := strconv.ParseInt(parts[i], 10, 64)
		if z-a != time.Hour.Milliseconds() {
			t.Errorf("hour boundaries %s: step %d ms, want 3600000", got, z-a)
		}
	}
}

func TestSlidingWindow(t *testing.T) {
	b, c := plainStandalone(t) // the plain hash layout
	ctx := context.Background()
	s := newSubject(t, "slide")
	r := s.sliding("s", 3+driver.LogLine, time.Minute, 10) // above the line: cells
	const L = 3 + driver.LogLine
	res := take(t, b, s.request(opTake, driver.LogLine, r))
	checkRule(t, "take of the line", res.Rules[0], true, driver.LogLine, L)
	for i := int64(1); i <= 3; i++ {
		res := take(t, b, s.request(opTake, 1, r))
		checkRule(t, fmt.Sprintf("take #%d", i), res.Rules[0], true, driver.LogLine+i, L)
	}
	res = take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take #4", res.Rules[0], false, L, L)
	// All units sit in the current cell i, which counts until (i+N+1)·s:
	// RetryAfter = (i+11)*6s - now.
	cell := 6 * time.Second
	i := res.Now.UnixMicro() / cell.Microseconds()
	want := time.Duration((i+11)*cell.Microseconds())*time.Microsecond - time.Duration(res.Now.UnixMicro())*time.Microsecond
	if got := res.Rules[0].RetryAfter; got != want {
		t.Errorf("RetryAfter = %v, want %v", got, want)
	}
	// The entry: the newest cell's index, the cells' sum, then one cell
	// holding L (or two, the takes straddling a cell boundary).
	if e, ok := entryOf(t, c, r); !ok || len(e.Ints) < 3 || e.Ints[0] != i || e.Ints[1] != L || sum(e.Ints[2:]) != L {
		t.Errorf("entry = %+v (present %v), want cells {%d, %d, ...} summing to %d", e, ok, i, L, L)
	}
	pttl, _ := c.PTTL(ctx, r.Key).Result()
	if pttl <= 0 || pttl > time.Minute+2*cell {
		t.Errorf("PTTL = %v, want in (0, 72s]: until the cell stops counting, plus one cell", pttl)
	}
}

func TestSlidingWindowCells(t *testing.T) {
	b, c := plainStandalone(t) // the plain hash layout
	ctx := context.Background()
	// 10 cells of one hour: the test runs within one cell, unless it
	// starts at an hour boundary (then it retries once).
	for attempt := 0; attempt < 2; attempt++ {
		s := newSubject(t, "cells")
		const F = driver.LogLine + 1 // limits and counts times F: cells, not a log
		r := s.sliding("s", 3*F, 10*time.Hour, 10)
		cell := time.Hour.Microseconds()
		i := serverNow(t, c).UnixMicro() / cell
		// A dead cell (must be ignored and dropped), two counted ones: the
		// oldest, i-N, partly expired, still counts (strict). The entry:
		// the newest cell's index, the cells' sum, then the cells i-11 …
		// i-5.
		putPacked(t, c, r.Key, packedEntry{Tag: ruleTag(&r), Expiry: (i - 5 + 11) * cell / 1000,
			Ints: []int64{i - 5, 9 * F, 7 * F, F, 0, 0, 0, 0, F}})
		res := take(t, b, s.request(opTake, 2*F, r))
		if res.Now.UnixMicro()/cell != i {
			continue
		}
		checkRule(t, "take 2 over 2 live units", res.Rules[0], false, 2*F, 3*F)
		// need = 2+2-3 = 1: the oldest counted cell (i-10) frees it when
		// it stops counting, at (i-10+N+1)·s.
		want := time.Duration((i-10+11)*cell-res.Now.UnixMicro()) * time.Microsecond
		if got := res.Rules[0].RetryAfter; got != want {
			t.Errorf("RetryAfter = %v, want %v", got, want)
		}
		if got := res.Rules[0].ResetAfter; got != time.Duration((i-5+11)*cell-res.Now.UnixMicro())*time.Microsecond {
			t.Errorf("ResetAfter = %v, want when cell i-5 stops counting", got)
		}
		res = take(t, b, s.request(opTake, F, r))
		checkRule(t, "take 1", res.Rules[0], true, 3*F, 3*F)
		e, ok := entryOf(t, c, r)
		if !ok || len(e.Ints) < 3 {
			t.Fatalf("entry after a write = %+v (present %v), want cells", e, ok)
		}
		// Cells stored: e.Ints[0]-k+1 … e.Ints[0], oldest first, after
		// the index and the sum.
		k := int64(len(e.Ints) - 2)
		oldest := e.Ints[0] - k + 1
		cellOf := func(j int64) (int64, bool) {
			if j < oldest || j > e.Ints[0] {
				return 0, false
			}
			return e.Ints[2+j-oldest], true
		}
		if sum(e.Ints[2:]) != e.Ints[1] {
			t.Errorf("entry %+v: the sum is not the cells' sum", e)
		}
		if e.Ints[0] != i {
			t.Errorf("newest cell = %d, want the current cell %d", e.Ints[0], i)
		}
		if _, kept := cellOf(i - 11); kept {
			t.Errorf("dead cell i-11 still in the entry after a write: %+v", e)
		}
		if n, kept := cellOf(i - 10); !kept || n != F {
			t.Errorf("counted cell i-10 = %d (kept %v) after a write, want 1 kept (it counts until (i+1)·s)", n, kept)
		}
		if n, _ := cellOf(i - 5); n != F {
			t.Errorf("cell i-5 = %d, want 1", n)
		}
		if n, _ := cellOf(i); n != F {
			t.Errorf("current cell = %d, want 1", n)
		}
		if want := (i + 11) * cell / 1000; e.Expiry != want {
			t.Errorf("entry expiry = %d ms, want (i+N+1)·s = %d: when the new cell stops counting", e.Expiry, want)
		}
		if pet, _ := c.PExpireTime(ctx, r.Key).Result(); pet != time.Duration((i+11)*cell)*time.Microsecond {
			t.Errorf("PEXPIRETIME = %v, want (i+N+1)·s: the latest entry expiry, when the new cell stops counting", pet)
		}
		return
	}
	t.Fatal("crossed a cell boundary twice")
}

// TestSlidingRetryExact: on the server's clock, to the microsecond, a
// sliding rule denies until its RetryAfter has elapsed and admits from
// then on. Peeks are polled across the instant; at least one must land in
// the last millisecond before it, else the attempt is retried: a loaded
// machine (`go test -race` of other packages beside) can stretch every
// round trip past a millisecond for a while, so up to 10 attempts.
func TestSlidingRetryExact(t *testing.T) {
	b, _ := standalone(t)
	const attempts = 10
	for attempt := 1; attempt <= attempts; attempt++ {
		s := newSubject(t, "exact")
		r := s.sliding("s", 1, time.Second, 10) // 100ms cells
		take(t, b, s.request(opTake, 1, r))
		res := take(t, b, s.request(opTake, 1, r))
		if res.Allowed || res.Rules[0].RetryAfter <= 0 {
			t.Fatalf("take #2 = %+v, want denied with a retry", res.Rules[0])
		}
		leave := res.Now.Add(res.Rules[0].RetryAfter)
		deadline := time.Now().Add(5 * time.Second)
		lastMs := 0
		for {
			res = take(t, b, s.request(opPeek, 1, r))
			d := leave.Sub(res.Now)
			if d <= 0 {
				if !res.Allowed {
					t.Fatalf("peek %v after the retry instant = %+v, want allowed", -d, res.Rules[0])
				}
				break
			}
			if res.Allowed || res.Rules[0].RetryAfter != d {
				t.Fatalf("peek %v before the retry instant = %+v, want denied with retry %v", d, res.Rules[0], d)
			}
			if d <= time.Millisecond {
				lastMs++
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server's clock did not reach %v", leave)
			}
			if d > 30*time.Millisecond {
				time.Sleep(min(d/2, 20*time.Millisecond)) // poll; spin near the instant
			}
		}
		if lastMs > 0 {
			t.Logf("attempt %d: %d peeks in the last ms before the retry instant were denied", attempt, lastMs)
			return
		}
		t.Logf("attempt %d: no peek landed in the last ms before the retry instant; retrying", attempt)
	}
	t.Fatalf("no peek landed in the last ms before the retry instant in %d attempts", attempts)
}

func TestSlidingLog(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "log")
	r := s.log("l", 6, time.Hour)
	r.Group = s.base + "="
	res := take(t, b, s.request(opTake, 5, r))
	checkRule(t, "take 5", res.Rules[0], true, 5, 6)
	if e, _ := logOf(t, c, r); len(e.Ints) != 3 || e.Ints[2]-e.Ints[0] != 5 {
		t.Errorf("packed log after a take of 5 = %+v, want one record of 5 units", e)
	}
	first := res.Now
	res = take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take 1", res.Rules[0], true, 6, 6)
	res = take(t, b, s.request(opTake, 3, r))
	checkRule(t, "take 3 over the limit", res.Rules[0], false, 6, 6)
	// need = 6+3-6 = 3: reached by the oldest record, at first.
	if want := first.Add(time.Hour).Sub(res.Now); res.Rules[0].RetryAfter != want {
		t.Errorf("RetryAfter = %v, want %v", res.Rules[0].RetryAfter, want)
	}
	if n := logUnits(t, c, r); n != 6 {
		t.Errorf("packed log after a denial holds %d units, want 6 (a denial adds nothing)", n)
	}
	// Records older than the window do not count, and a write trims them.
	e, _ := logOf(t, c, r)
	old := res.Now.Add(-2 * time.Hour).UnixMicro()
	ints := append([]int64{0, old, 2}, e.Ints[1:]...)
	for k := 4; k < len(ints); k += 2 {
		ints[k] += 2 - e.Ints[0]
	}
	putPacked(t, c, group(&r), packedEntry{Tag: ruleTag(&r), Expiry: e.Expiry, Ints: ints})
	res = take(t, b, s.request(opPeek, 1, r))
	checkRule(t, "peek", res.Rules[0], false, 6, 6)
	r.Limit = 10 // the same rule (its tag ignores the limit), room again
	res = take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take with limit 10", res.Rules[0], true, 7, 10)
	if e, _ := logOf(t, c, r); len(e.Ints) != 7 || e.Ints[0] != 2 || e.Ints[1] == old {
		t.Errorf("packed log after a take = %+v, want the old record trimmed into the base (2), 3 records", e)
	}
	pttl, _ := c.PTTL(ctx, group(&r)).Result()
	if pttl <= 0 || pttl > time.Hour+time.Millisecond {
		t.Errorf("PTTL = %v, want in (0, 1h] (+1ms: expiry rounded up to the ms)", pttl)
	}
}

func TestGCRA(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "gcra")
	r := s.gcra("g", 10, time.Minute, 4) // T = 6s, limit 5
	var first time.Time
	for i := int64(1); i <= 5; i++ {
		res := take(t, b, s.request(opTake, 1, r))
		checkRule(t, fmt.Sprintf("take #%d", i), res.Rules[0], true, i, 5)
		if i == 1 {
			first = res.Now
		}
		// The TAT runs i emission intervals past the first take (each take
		// comes before the TAT), whatever the time between the takes.
		want := first.Add(time.Duration(i) * 6 * time.Second).Sub(res.Now)
		if d := res.Rules[0].ResetAfter - want; d > time.Millisecond || d < -time.Millisecond {
			t.Errorf("take #%d ResetAfter = %v, want %v (%v after the first take)", i, res.Rules[0].ResetAfter, want, res.Now.Sub(first))
		}
	}
	// The entry: the TAT in µs, 5 emission intervals ahead; its expiry
	// the TAT in ms, rounded up.
	e, ok := entryOf(t, c, r)
	if now := serverNow(t, c); !ok || len(e.Ints) != 1 || e.Ints[0] <= now.UnixMicro() || e.Ints[0] > now.Add(30*time.Second).UnixMicro() ||
		e.Expiry != (e.Ints[0]+999)/1000 {
		t.Errorf("GCRA entry = %+v (present %v), want {TAT} within 30s of now %d µs, expiring at the TAT", e, ok, now.UnixMicro())
	}
	res := take(t, b, s.request(opTake, 1, r))
	checkRule(t, "take #6", res.Rules[0], false, 5, 5)
	if ra := res.Rules[0].RetryAfter; ra <= 5*time.Second || ra > 6*time.Second {
		t.Errorf("RetryAfter = %v, want about 6s", ra)
	}
	if e2, _ := entryOf(t, c, r); fmt.Sprint(e2) != fmt.Sprint(e) {
		t.Errorf("state after a denial = %+v, want %+v unchanged", e2, e)
	}
	res = take(t, b, s.request(opTake, 6, r))
	if !res.Rules[0].CostTooHigh || res.Rules[0].RetryAfter != 0 {
		t.Errorf("take 6 = %+v, want CostTooHigh", res.Rules[0])
	}
	// A peek on a fresh key creates nothing.
	s2 := newSubject(t, "gcra-peek")
	r2 := s2.gcra("g", 10, time.Minute, 4)
	res = take(t, b, s2.request(opPeek, 1, r2))
	checkRule(t, "peek fresh", res.Rules[0], true, 0, 5)
	if n, _ := c.Exists(ctx, r2.Key).Result(); n != 0 {
		t.Errorf("a peek created the key")
	}
}

func TestAllOrNothing(t *testing.T) {
	b, c := standalone(t)
	s := newSubject(t, "multi")
	rules := []driver.Rule{
		s.sliding("a", 5, time.Minute, 10),
		s.fixed("b", 1, time.Hour),
		s.log("c", 5, time.Hour),
		s.gcra("d", 10, time.Minute, 4),
	}
	res := take(t, b, s.request(opTake, 1, rules...))
	if !res.Allowed {
		t.Fatalf("first take denied: %+v", res)
	}
	gcraState, ok := entryOf(t, c, rules[3])
	if !ok {
		t.Fatalf("no GCRA entry after an admitted take")
	}
	res = take(t, b, s.request(opTake, 1, rules...))
	if res.Allowed {
		t.Fatalf("second take allowed past rule b's limit 1")
	}
	for i, want := range []bool{true, false, true, true} {
		if res.Rules[i].Allowed != want {
			t.Errorf("rule %s allowed = %v, want %v", rules[i].Name, res.Rules[i].Allowed, want)
		}
		if res.Rules[i].Used != 1 {
			t.Errorf("rule %s used = %d after a denied take, want 1 (nothing consumed)", rules[i].Name, res.Rules[i].Used)
		}
	}
	if n := logUnits(t, c, rules[2]); n != 1 {
		t.Errorf("log size = %d units, want 1", n)
	}
	if g, _ := entryOf(t, c, rules[3]); fmt.Sprint(g) != fmt.Sprint(gcraState) {
		t.Errorf("GCRA state moved on a denied take: %+v -> %+v", gcraState, g)
	}
}

func TestTrail(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "trail")
	rules := []driver.Rule{s.fixed("a", 1, time.Hour), s.fixed("b", 1, time.Hour), s.fixed("ok", 9, time.Hour)}
	take(t, b, s.request(opTake, 1, rules...))
	for range 4 {
		take(t, b, s.request(opTake, 1, rules...))
	}
	take(t, b, s.request(opPeek, 1, rules...)) // a peek leaves no trail
	last := take(t, b, s.request(opTake, 2, rules...))
	res := take(t, b, s.request(opInspect, 0, rules...))
	if len(res.Trail) != 5 {
		t.Fatalf("trail has %d entries, want 5 (TrailMax)", len(res.Trail))
	}
	want := driver.Denial{At: last.Now, Policy: "p", Rule: "a", Used: 1, Limit: 1, Cost: 2, CostTooHigh: true}
	if res.Trail[0] != want {
		t.Errorf("trail[0] = %+v, want %+v", res.Trail[0], want)
	}
	if res.Trail[1].Rule != "b" || !res.Trail[1].At.Equal(last.Now) {
		t.Errorf("trail[1] = %+v, want rule b of the last denial", res.Trail[1])
	}
	if !res.Trail[2].At.Before(last.Now) {
		t.Errorf("trail[2] = %+v, want an older denial", res.Trail[2])
	}
	if pttl, _ := c.PTTL(ctx, s.trail()).Result(); pttl <= 0 || pttl > time.Hour {
		t.Errorf("trail PTTL = %v, want in (0, 1h]", pttl)
	}
	for i, rr := range res.Rules {
		if rr.Used != []int64{1, 1, 1}[i] {
			t.Errorf("inspect rule %d used = %d, want 1", i, rr.Used)
		}
	}
}

func TestReservations(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "reservation")
	rules := []driver.Rule{
		s.sliding("a", 5, time.Minute, 10),
		s.fixed("b", 5, time.Hour),
		s.log("c", 5, time.Hour),
		s.gcra("d", 10, time.Minute, 4),
	}
	reserve := func(id string, ttl time.Duration, cost int64) driver.Result {
		req := s.request(opReserve, cost, rules...)
		req.ReservationID, req.ReservationTTL = id, ttl
		return take(t, b, req)
	}
	used := func(what string, want ...int64) {
		t.Helper()
		res := take(t, b, s.request(opPeek, 1, rules...))
		for i, w := range want {
			if res.Rules[i].Used != w {
				t.Errorf("%s: rule %s used = %d, want %d", what, rules[i].Name, res.Rules[i].Used, w)
			}
		}
	}
	if res := reserve("h1", time.Hour, 2); !res.Allowed {
		t.Fatalf("reserve denied: %+v", res)
	}
	used("after reserve 2", 2, 2, 2, 2)
	if err := b.Cancel(ctx, s.reservations(), "h1"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	used("after cancel", 0, 0, 0, 0)
	if err := b.Cancel(ctx, s.reservations(), "h1"); !errors.Is(err, driver.ErrReservationNotFound) {
		t.Errorf("second cancel = %v, want ErrReservationNotFound", err)
	}
	reserve("h2", time.Hour, 1)
	if err := b.Commit(ctx, s.reservations(), "h2"); err != nil {
		t.Fatalf("commit: %v", err)
	}
	used("after commit", 1, 1, 1, 1)
	if err := b.Commit(ctx, s.reservations(), "h2"); !errors.Is(err, driver.ErrReservationNotFound) {
		t.Errorf("second commit = %v, want ErrReservationNotFound", err)
	}
	req := s.request(opReserve, 1, rules...)
	req.ReservationID, req.ReservationTTL = "h2x", time.Hour
	take(t, b, req)
	if _, err := b.do(ctx, req); err == nil || !strings.Contains(err.Error(), "hold id already in use") {
		t.Errorf("reserve with a used id = %v, want an error", err)
	}
	if err := b.Cancel(ctx, s.reservations(), "h2x"); err != nil {
		t.Fatal(err)
	}

	// A lapsed reservation is refunded by the next call naming its keys, and
	// only for those keys.
	reserve("h3", 30*time.Millisecond, 2)
	used("after reserve 2", 3, 3, 3, 3)
	partial := s.request(opInspect, 0, rules[0], rules[2])
	eventually(t, 2*time.Second, "lapse refund", func() bool {
		res := take(t, b, partial)
		return res.Rules[0].Used == 1
	})
	plan, err := c.HGet(ctx, s.reservations(), "h3").Result()
	if err != nil || strings.Contains(plan, rules[0].Key) || !strings.Contains(plan, rules[1].Key) {
		t.Errorf("reservation after a partial lapse = %q, %v, want only the entries of keys not named", plan, err)
	}
	if err := b.Commit(ctx, s.reservations(), "h3"); !errors.Is(err, driver.ErrReservationNotFound) {
		t.Errorf("commit of a lapsed reservation = %v, want ErrReservationNotFound", err)
	}
	used("after the lapse", 1, 1, 1, 1)
	if n, _ := c.Exists(ctx, s.reservations()).Result(); n != 0 {
		t.Errorf("reservation hash still exists after its last reservation went")
	}
}

func TestPeekChangesNothing(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "peek")
	rules := []driver.Rule{s.sliding("a", 5, time.Minute, 10), s.fixed("b", 5, time.Hour), s.log("c", 5, time.Hour), s.gcra("d", 10, time.Minute, 4)}
	res := take(t, b, s.request(opPeek, 5, rules...))
	if !res.Allowed {
		t.Errorf("peek 5 on fresh keys denied: %+v", res)
	}
	res = take(t, b, s.request(opPeek, 6, rules...))
	if res.Allowed {
		t.Errorf("peek 6 allowed")
	}
	for _, r := range rules {
		if n, _ := c.Exists(ctx, r.Key, sortedSetOf(t, rules, r)).Result(); n != 0 {
			t.Errorf("peek created %s", r.Name)
		}
	}
	if n, _ := c.Exists(ctx, s.trail()).Result(); n != 0 {
		t.Errorf("a denied peek wrote a trail")
	}
}

func TestReset(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "reset")
	rules := []driver.Rule{s.fixed("a", 1, time.Hour), s.log("b", 5, time.Hour)}
	req := s.request(opReserve, 1, rules...)
	req.ReservationID, req.ReservationTTL = "h", time.Hour
	take(t, b, req)
	take(t, b, s.request(opTake, 1, rules...)) // denied: trail
	if n, _ := c.Exists(ctx, rules[0].Key, rules[1].Key, s.reservations()).Result(); n != 3 {
		t.Fatalf("%d of the state keys exist before Reset, want 3", n)
	}
	if err := b.Reset(ctx, s.request(opTake, 1, rules...).Request); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, rules[0].Key, rules[1].Key, sortedSetOf(t, rules, rules[1]), s.reservations()).Result(); n != 0 {
		t.Errorf("%d keys remain after Reset, want 0", n)
	}
	if n, _ := c.Exists(ctx, s.trail()).Result(); n != 1 {
		t.Errorf("Reset deleted the trail")
	}
}

func TestDescribe(t *testing.T) {
	b, _ := standalone(t)
	d, err := b.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "redis" || d.Target == "" || len(d.Strategies) != 4 || len(d.Notes) == 0 {
		t.Errorf("Describe = %+v, want name redis, a target, 4 strategies, notes", d)
	}
}

func TestInvalidRequests(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "bad")
	for _, tc := range []struct {
		name string
		req  request
	}{
		{"cost 0", s.request(opTake, 0, s.fixed("a", 1, time.Hour))},
		{"limit 0", s.request(opTake, 1, s.fixed("a", 0, time.Hour))},
		{"reserve without id", s.request(opReserve, 1, s.fixed("a", 1, time.Hour))},
		{"no keys", request{op: opTake, Request: driver.Request{Cost: 1}}},
		{"gcra tolerance beyond 2^52 µs", s.request(opTake, 1, s.gcra("g", 1, time.Hour, 1<<21))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.do(context.Background(), tc.req); err == nil {
				t.Errorf("Take(%s) error = nil, want an error", tc.name)
			}
		})
	}
}
