package sdk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// quietZones are zones whose changes test the quiet spans' memo: DST of
// an hour at 02:00 (New York) and at 01:00 UTC (London), of half an hour
// (Lord Howe), and a fractional offset without DST (Kolkata).
func quietZones(t testing.TB) []*time.Location {
	t.Helper()
	var locs []*time.Location
	for _, name := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc, err := LoadZone(name)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	return locs
}

// quietPolicies are quiet hours of several shapes: nights, weekday
// nights and weekend lunches, short periods across the hours DST changes
// skip or repeat, two periods that touch (merged into one span), and
// more periods within two hours than a request carries (cut).
func quietPolicies(t testing.TB, loc *time.Location) map[string]*Policy {
	t.Helper()
	h, m := time.Hour, time.Minute
	weekdays := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}
	var many []QuietPeriod
	for k := range 14 {
		from := h + time.Duration(10*k)*m
		many = append(many, QuietPeriod{From: from, To: from + 2*m})
	}
	shapes := map[string][]QuietPeriod{
		"night":    {{From: 21 * h, To: 8 * h}},
		"weekdays": {{From: 21 * h, To: 8 * h, Days: weekdays}, {From: 12 * h, To: 13 * h, Days: []time.Weekday{time.Saturday, time.Sunday}}},
		"dst":      {{From: 0, To: 30 * m}, {From: h + 45*m, To: 2*h + 15*m}, {From: 2*h + 30*m, To: 3*h + 10*m}},
		"touching": {{From: 22 * h, To: 23 * h}, {From: 23 * h, To: h}, {From: 2 * h, To: 2*h + m}},
		"many":     many,
	}
	ps := make(map[string]*Policy)
	for name, periods := range shapes {
		p, err := NewPolicy("p", []Rule{FixedWindow("f", 5, time.Hour).By("u")}, WithQuietHours(loc, periods...))
		if err != nil {
			t.Fatal(err)
		}
		ps[name] = p
	}
	return ps
}

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

// spanAt returns the index of the span of q holding t, -1 when none does:
// what a backend whose clock reads t decides (driver.Request.Quiet).
func spanAt(q []driver.Span, t time.Time) int {
	for i, s := range q {
		if !t.Before(s.Start) && t.Before(s.End) {
			return i
		}
	}
	return -1
}

func equalSpans(a, b []driver.Span) bool {
	return slices.EqualFunc(a, b, func(x, y driver.Span) bool { return x.Start.Equal(y.Start) && x.End.Equal(y.End) })
}

// quietNows returns the instants the memo tests ask at in loc: walks
// over its changes from 2024 to 2026, forward then back, at odd seconds
// and nanoseconds, and random instants, some a little before the one
// before (a clock gone back).
func quietNows(loc *time.Location, seed uint64) []time.Time {
	from, to := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	var nows []time.Time
	for _, ch := range zoneChanges(loc, from, to) {
		for d := -3 * time.Hour; d <= 3*time.Hour; d += 7*time.Minute + 13*time.Second {
			nows = append(nows, ch.Add(d))
		}
		for d := 3 * time.Hour; d >= -3*time.Hour; d -= 11*time.Minute + 17*time.Second + 1 {
			nows = append(nows, ch.Add(d))
		}
		for d := -3 * time.Hour; d <= 3*time.Hour; d += 15 * time.Minute {
			nows = append(nows, ch.Add(d)) // whole minutes
		}
		nows = append(nows, ch, ch.Add(-time.Nanosecond), ch.Add(time.Minute-time.Nanosecond), ch.Add(time.Nanosecond))
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	now := from
	for range 400 {
		switch rng.IntN(3) {
		case 0:
			now = from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)))))
		case 1:
			now = now.Add(-time.Duration(rng.Int64N(int64(3 * time.Minute))))
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
		}
		nows = append(nows, now, now.Truncate(time.Minute))
	}
	return nows
}

// The memo's spans are the minute's (the same for every instant of it,
// shared), and a backend's clock within quietReach of the sdk's decides
// as with the spans around the sdk's own clock (quietFrame over
// [now-quietReach, now+quietReach), what the sdk sent before it kept
// them per minute): quiet exactly when quiet hours hold (never a frame:
// the frames start at least quietReach away), until the same end. More
// spans in the minute's reach than a request carries: now's own spans,
// as before.
func TestQuietSpansMemo(t *testing.T) {
	const reach = quietReach
	for zi, loc := range quietZones(t) {
		for name, p := range quietPolicies(t, loc) {
			t.Run(fmt.Sprintf("%s/%s", loc, name), func(t *testing.T) {
				cuts := 0
				for _, now := range quietNows(loc, uint64(zi)) {
					q := p.quietSpans(loc, now)
					old, oldCut := p.quietFrame(loc, now.Add(-reach), now.Add(reach), now)
					m := quietMinute(now)
					minute, cut := p.quietFrame(loc, m.Add(-time.Minute-reach), m.Add(reach), now)
					if cut {
						cuts++
						if !equalSpans(q, old) {
							t.Fatalf("quietSpans(%v) = %v, want now's own (cut) %v", now, q, old)
						}
						continue
					}
					if oldCut {
						t.Fatalf("quietSpans(%v): the minute's spans not cut, now's are", now)
					}
					if !equalSpans(q, minute) {
						t.Fatalf("quietSpans(%v) = %v, want the minute's %v", now, q, minute)
					}
					// Every instant of the minute shares them.
					later := m.Add(-time.Duration(rand.Int64N(int64(time.Minute))))
					if q2 := p.quietSpans(loc, later); &q2[0] != &q[0] {
						t.Fatalf("quietSpans(%v) after quietSpans(%v), the same minute: not the memo's", later, now)
					}
					if q[0].End.After(now.Add(-reach)) || q[len(q)-1].Start.Before(now.Add(reach)) {
						t.Fatalf("quietSpans(%v) = %v: frames within quietReach", now, q)
					}
					for d := -reach; d < reach; d += 5 * time.Minute {
						for _, bt := range []time.Time{now.Add(d), now.Add(d + time.Duration(rand.Int64N(int64(5*time.Minute))))} {
							i, j := spanAt(q, bt), spanAt(old, bt)
							end := alg.QuietEnd(p.quiet, loc, bt)
							quiet := end.After(bt)
							switch {
							case i == 0 || i == len(q)-1:
								t.Fatalf("now %v, backend %v: in a frame of %v", now, bt, q)
							case (i > 0) != quiet || (j > 0) != quiet:
								t.Fatalf("now %v, backend %v: quiet %v (memo %d of %v, before %d of %v), want %v", now, bt, quiet, i, q, j, old, quiet)
							case quiet && !q[i].End.Equal(old[j].End):
								t.Fatalf("now %v, backend %v: quiet until %v, before %v (quiet hours end %v)", now, bt, q[i].End, old[j].End, end)
							}
						}
					}
				}
				if name == "many" && cuts == 0 {
					t.Errorf("no minute with more spans than a request carries")
				}
			})
		}
	}
}

// The memo computes anew for another minute, later or earlier (a clock
// gone back), keeps each zone's apart, and stays within quietMemoMax
// zones.
func TestQuietSpansMemoEntries(t *testing.T) {
	locs := quietZones(t)
	p := quietPolicies(t, locs[0])["night"]
	now := time.Date(2026, 3, 8, 6, 59, 30, 0, time.UTC) // 01:59:30 in New York, the spring-forward night
	for _, tc := range []struct {
		name string
		now  time.Time
		loc  *time.Location
	}{
		{"first", now, locs[0]},
		{"same minute", now.Add(29 * time.Second), locs[0]},
		{"next minute", now.Add(30 * time.Second), locs[0]},
		{"gone back a minute", now.Add(-time.Nanosecond), locs[0]},
		{"gone back a nanosecond", now.Add(-30*time.Second - time.Nanosecond), locs[0]},
		{"another zone", now, locs[3]},
		{"back to the first zone", now, locs[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := quietMinute(tc.now)
			want, _ := p.quietFrame(tc.loc, m.Add(-time.Minute-quietReach), m.Add(quietReach), tc.now)
			if got := p.quietSpans(tc.loc, tc.now); !equalSpans(got, want) {
				t.Errorf("quietSpans(%v, %v) = %v, want %v", tc.loc, tc.now, got, want)
			}
		})
	}
	for i := range 3 * quietMemoMax {
		loc := time.FixedZone(fmt.Sprintf("z%d", i), (i%96-48)*15*60)
		m := quietMinute(now)
		want, _ := p.quietFrame(loc, m.Add(-time.Minute-quietReach), m.Add(quietReach), now)
		if got := p.quietSpans(loc, now); !equalSpans(got, want) {
			t.Fatalf("quietSpans(%v, %v) = %v, want %v", loc, now, got, want)
		}
		if n := p.quietMemo.c.Len(); n > quietMemoMax {
			t.Fatalf("after %d zones: %d in the memo, want <= %d", i+1, n, quietMemoMax)
		}
	}
	// A rebuilt policy (other quiet hours) has a memo of its own.
	p2, err := NewPolicy("p", []Rule{FixedWindow("f", 5, time.Hour).By("u")}, WithQuietHours(locs[0], QuietPeriod{From: 2 * time.Hour, To: 3 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := p.quietSpans(locs[0], now), p2.quietSpans(locs[0], now); equalSpans(a, b) {
		t.Errorf("two policies' quiet spans at %v: both %v", now, a)
	}
	// The zero Policy keeps nothing.
	var zero Policy
	if zero.quietMemo.get(locs[0], quietMinute(now)) != nil {
		t.Errorf("the zero Policy's memo has spans")
	}
	zero.quietMemo.put(locs[0], quietMinute(now), nil)
}

// quietMinute is the first whole minute at or after t, on both sides of
// 1970, without a monotonic reading.
func TestQuietMinute(t *testing.T) {
	x := time.FixedZone("x", 5*3600+45*60)
	for _, tc := range []struct{ t, want time.Time }{
		{time.Unix(120, 0), time.Unix(120, 0)},
		{time.Unix(120, 1), time.Unix(180, 0)},
		{time.Unix(179, 999999999), time.Unix(180, 0)},
		{time.Unix(0, 0), time.Unix(0, 0)},
		{time.Unix(-1, 0), time.Unix(0, 0)},
		{time.Unix(-60, 0), time.Unix(-60, 0)},
		{time.Unix(-61, 5), time.Unix(-60, 0)},
		{time.Unix(-120, 0).Add(-1), time.Unix(-120, 0)},
		{time.Date(2026, 3, 8, 1, 59, 59, 1, x), time.Date(2026, 3, 8, 2, 0, 0, 0, x)},
	} {
		if got := quietMinute(tc.t); !got.Equal(tc.want) {
			t.Errorf("quietMinute(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
	if s := quietMinute(time.Now()).String(); strings.Contains(s, "m=") {
		t.Errorf("quietMinute(time.Now()) = %s, has a monotonic reading", s)
	}
}

// A period starting exactly quietReach after the sdk's clock (on a whole
// minute) is not sent, as before the memo: a period it touches ends
// where it did (22:00 to 23:00 then 23:00 to 01:00, asked at 22:00).
func TestQuietSpansTouching(t *testing.T) {
	for _, loc := range quietZones(t) {
		p := quietPolicies(t, loc)["touching"]
		now := time.Date(2026, 6, 3, 22, 0, 0, 0, loc)
		q := p.quietSpans(loc, now)
		bt := now.Add(30 * time.Minute)
		i := spanAt(q, bt)
		if want := time.Date(2026, 6, 3, 23, 0, 0, 0, loc); i <= 0 || i == len(q)-1 || !q[i].End.Equal(want) {
			t.Errorf("%s: quietSpans(%v) = %v: a backend at %v quiet in span %d, want until %v", loc, now, q, bt, i, want)
		}
	}
}

// Limiters deciding on one policy at once, in one minute and across
// minutes, share the memo's spans (run with -race: a backend writing a
// request's Quiet would race), and each attempt gets its minute's.
func TestQuietSpansMemoConcurrent(t *testing.T) {
	locs := quietZones(t)
	ps := quietPolicies(t, locs[0])
	p := ps["weekdays"]
	base := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			now := base
			for range 2000 {
				now = now.Add(time.Duration(rng.Int64N(int64(20*time.Second))) - 5*time.Second)
				loc := locs[rng.IntN(len(locs))]
				m := quietMinute(now)
				want, _ := p.quietFrame(loc, m.Add(-time.Minute-quietReach), m.Add(quietReach), now)
				if got := p.quietSpans(loc, now); !equalSpans(got, want) {
					errs <- fmt.Errorf("quietSpans(%v, %v) = %v, want %v", loc, now, got, want)
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
	// Through a Limiter on the memory backend: concurrent decisions of
	// one minute, each carrying the shared spans.
	clk := fakeclock.New(base.Add(30 * time.Second))
	lim := New(memory.New(&memory.Options{Clock: clk}), WithClock(clk))
	var wg2 sync.WaitGroup
	for g := range 8 {
		wg2.Go(func() {
			for i := range 50 {
				a := Attempt{Subject: Subject{"u": fmt.Sprint(g, "-", i)}, Zone: locs[i%len(locs)]}
				if _, err := lim.Take(context.Background(), p, a); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg2.Wait()
}
