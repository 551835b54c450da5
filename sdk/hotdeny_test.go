package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func hotPolicy(t *testing.T, size int, rules ...sdk.Rule) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy("hot", rules, sdk.WithHotDenyCache(size))
	if err != nil {
		t.Fatalf("NewPolicy(hot) = %v", err)
	}
	return p
}

func TestHotDenyCacheOption(t *testing.T) {
	for _, size := range []int{0, -1} {
		if _, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 1, time.Minute).By("user")}, sdk.WithHotDenyCache(size)); !errors.Is(err, sdk.ErrInvalidPolicy) {
			t.Errorf("NewPolicy(…, WithHotDenyCache(%d)) = %v, want %v", size, err, sdk.ErrInvalidPolicy)
		}
	}
	if got := hotPolicy(t, 7, sdk.FixedWindow("f", 1, time.Minute).By("user")).HotDenyCache(); got != 7 {
		t.Errorf("HotDenyCache() = %d, want 7", got)
	}
}

// TestHotDeny walks one subject through the cache: fill, hit, expiry by
// the clock, and the events it reports.
func TestHotDeny(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0) // on a minute boundary
	b := newCounting(c)
	var events []sdk.Event
	lim := sdk.New(b, sdk.WithClock(c), sdk.WithObserver(func(e sdk.Event) { events = append(events, e) }))
	p := hotPolicy(t, 10, sdk.FixedWindow("f", 1, time.Minute).By("user"), sdk.SlidingLog("l", 100, time.Hour).By("user"))
	s := sdk.Subject{"user": "u"}
	allow := func(label string, wantAllowed, wantCached bool, wantRetry time.Duration, wantCalls int) sdk.Decision {
		t.Helper()
		d, err := lim.Allow(ctx, p, s)
		if err != nil || d.Allowed != wantAllowed || d.Cached != wantCached || d.RetryAfter != wantRetry {
			t.Errorf("%s: Allow(…) = {Allowed %t Cached %t RetryAfter %v}, %v, want {%t %t %v}", label,
				d.Allowed, d.Cached, d.RetryAfter, err, wantAllowed, wantCached, wantRetry)
		}
		if got := b.calls(); got != wantCalls {
			t.Errorf("%s: backend calls = %d, want %d", label, got, wantCalls)
		}
		return d
	}
	allow("first", true, false, 0, 1)
	c.Advance(10 * time.Second)
	first := allow("denied", false, false, 50*time.Second, 2)
	c.Advance(20 * time.Second)
	d := allow("cached", false, true, 30*time.Second, 2)
	if d.Rules[0].RetryAfter != 30*time.Second || d.Rules[0].ResetAfter != 30*time.Second || d.Rules[1].Used != 1 {
		t.Errorf("cached Rules = %+v, want f retry/reset 30s, l used 1", d.Rules)
	}
	if !d.At.Equal(first.At.Add(20 * time.Second)) {
		t.Errorf("cached At = %v, want %v", d.At, first.At.Add(20*time.Second))
	}
	if first.Cached || first.Rules[0].RetryAfter != 50*time.Second {
		t.Errorf("the first denial changed after caching: %+v", first)
	}
	if e := events[len(events)-1]; !e.Decision.Cached || e.Latency != 0 || e.Op != "take" {
		t.Errorf("event of a cached decision = %+v, want Cached, Latency 0, Op take", e)
	}
	c.Advance(30*time.Second - time.Millisecond)
	allow("1ms before retry", false, true, time.Millisecond, 2)
	c.Advance(time.Millisecond)
	allow("at retry", true, false, 0, 3)
	if st := lim.Admin().HotDenyStats(p); st != (sdk.HotDenyStats{Size: 10, Entries: 0, Hits: 2, Misses: 3}) {
		t.Errorf("HotDenyStats = %+v, want size 10, no entries, 2 hits, 3 misses", st)
	}
}

func TestHotDenyRules(t *testing.T) {
	ctx := context.Background()
	s := sdk.Subject{"user": "u"}
	rules := []sdk.Rule{sdk.FixedWindow("f", 3, time.Minute).By("user")}
	type step struct {
		do         func(*sdk.Limiter, *sdk.Policy, *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error)
		wantCached bool
		wantCalls  int // backend requests so far
	}
	allowN := func(n int64) func(*sdk.Limiter, *sdk.Policy, *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
		return func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
			d, err := l.Take(ctx, p, sdk.Attempt{Subject: s, Cost: n})
			return d, r, err
		}
	}
	peek := func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
		d, err := l.Peek(ctx, p, sdk.Attempt{Subject: s})
		return d, r, err
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"larger cost hits, smaller asks", []step{
			{allowN(2), false, 1}, // used 2
			{allowN(2), false, 2}, // denied: cached for cost 2
			{allowN(3), true, 2},  // a larger cost is denied at least as long
			{allowN(1), false, 3}, // a smaller one might fit: it does, and evicts
			{allowN(2), false, 4}, // denied again (used 3)
		}},
		{"cost too high is not cached", []step{
			{allowN(4), false, 1},
			{allowN(4), false, 2},
		}},
		{"peek neither reads nor fills", []step{
			{allowN(3), false, 1},
			{peek, false, 2},
			{allowN(1), false, 3},
			{peek, false, 4},
			{allowN(1), true, 4},
		}},
		{"idempotent attempts go to the backend", []step{
			{allowN(3), false, 1},
			{allowN(1), false, 2},
			{func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
				d, err := l.Take(ctx, p, sdk.Attempt{Subject: s, IdempotencyKey: "k"})
				return d, r, err
			}, false, 3},
			{allowN(1), true, 3},
		}},
		{"reset evicts", []step{
			{allowN(3), false, 1},
			{allowN(1), false, 2},
			{func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
				return sdk.Decision{}, r, l.Admin().Reset(ctx, p, s)
			}, false, 2},
			{allowN(1), false, 3},
		}},
		{"reserve is cached, cancel evicts", []step{
			{func(l *sdk.Limiter, p *sdk.Policy, _ *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
				return l.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: 3}, time.Minute)
			}, false, 1},
			{func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
				d, r2, err := l.Reserve(ctx, p, sdk.Attempt{Subject: s}, time.Minute)
				if r2 != nil {
					err = errors.New("a denied Reserve returned a reservation")
				}
				return d, r, err
			}, false, 2},
			{allowN(1), true, 2},
			{func(l *sdk.Limiter, p *sdk.Policy, r *sdk.Reservation) (sdk.Decision, *sdk.Reservation, error) {
				return sdk.Decision{}, r, r.Cancel(ctx)
			}, false, 2},
			{allowN(1), false, 3},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			b := newCounting(c)
			lim := sdk.New(b, sdk.WithClock(c))
			p := hotPolicy(t, 10, rules...)
			var r *sdk.Reservation // the reservation the steps pass on
			for i, st := range tc.steps {
				var d sdk.Decision
				var err error
				d, r, err = st.do(lim, p, r)
				if err != nil {
					t.Fatalf("step %d = %v", i, err)
				}
				if d.Cached != st.wantCached || b.calls() != st.wantCalls {
					t.Errorf("step %d: Cached %t, backend calls %d, want %t, %d", i, d.Cached, b.calls(), st.wantCached, st.wantCalls)
				}
			}
		})
	}
}

func TestHotDenyBound(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{1, 3, 16, 50} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newClock(t0)
			lim := sdk.New(newCounting(c), sdk.WithClock(c))
			p := hotPolicy(t, size, sdk.FixedWindow("f", 1, time.Hour).By("user"))
			const subjects = 200
			for i := range subjects {
				s := sdk.Subject{"user": fmt.Sprint(i)}
				_, _ = lim.Allow(ctx, p, s)
				if d, _ := lim.Allow(ctx, p, s); d.Allowed || d.Cached {
					t.Fatalf("second Allow(%d) = %+v, want denied by the backend", i, d)
				}
				if st := lim.Admin().HotDenyStats(p); st.Entries > size {
					t.Fatalf("after %d denials: %d entries, want <= %d", i+1, st.Entries, size)
				}
			}
			st := lim.Admin().HotDenyStats(p)
			if st.Entries != size || st.Evictions != uint64(subjects-size) {
				t.Errorf("HotDenyStats = %+v, want %d entries, %d evictions", st, size, subjects-size)
			}
			// The most recent denial is still cached.
			if d, _ := lim.Allow(ctx, p, sdk.Subject{"user": fmt.Sprint(subjects - 1)}); !d.Cached {
				t.Errorf("Allow(newest denied subject) = %+v, want cached", d)
			}
		})
	}
}

func TestHotDenyBatch(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := newCounting(c)
	lim := sdk.New(b, sdk.WithClock(c))
	p := hotPolicy(t, 100, sdk.FixedWindow("f", 1, time.Hour).By("user"))
	as := []sdk.Attempt{{Subject: sdk.Subject{"user": "a"}}, {Subject: sdk.Subject{"user": "b"}}}
	lim.TakeBatch(ctx, p, as)
	lim.TakeBatch(ctx, p, as) // both denied, cached
	as = append(as, sdk.Attempt{Subject: sdk.Subject{"user": "c"}})
	got := lim.TakeBatch(ctx, p, as)
	if !got[0].Decision.Cached || !got[1].Decision.Cached || got[2].Decision.Cached || !got[2].Decision.Allowed {
		t.Errorf("TakeBatch(a, b, c) = %+v, want a and b cached, c allowed", got)
	}
	if want := []int{2, 2, 1}; fmt.Sprint(b.batches) != fmt.Sprint(want) {
		t.Errorf("TakeBatch sizes = %v, want %v (cached attempts are not sent)", b.batches, want)
	}
}

// TestHotDenyReload: a new Policy value with the same name starts an
// empty cache.
func TestHotDenyReload(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := sdk.New(newCounting(c), sdk.WithClock(c))
	rules := []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("user")}
	p1 := hotPolicy(t, 10, rules...)
	s := sdk.Subject{"user": "u"}
	_, _ = lim.Allow(ctx, p1, s)
	_, _ = lim.Allow(ctx, p1, s)
	if d, _ := lim.Allow(ctx, p1, s); !d.Cached {
		t.Fatalf("third Allow = %+v, want cached", d)
	}
	p2 := hotPolicy(t, 10, sdk.FixedWindow("f", 5, time.Hour).By("user")) // a raised limit
	if d, _ := lim.Allow(ctx, p2, s); d.Cached || !d.Allowed {
		t.Errorf("Allow under the reloaded policy = %+v, want allowed by the backend", d)
	}
	if st := lim.Admin().HotDenyStats(p1); st != (sdk.HotDenyStats{}) {
		t.Errorf("HotDenyStats(old policy) = %+v, want zero (replaced)", st)
	}
}

// TestHotDenyConcurrent exercises the cache from many goroutines (run
// with -race): every decision is either from the backend or a cached
// denial, and the cache stays within its bound.
func TestHotDenyConcurrent(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := sdk.New(newCounting(c), sdk.WithClock(c))
	const size = 8
	p := hotPolicy(t, size, sdk.FixedWindow("f", 3, time.Minute).By("user"))
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				s := sdk.Subject{"user": fmt.Sprint((g + i) % 20)}
				switch i % 10 {
				case 0:
					_ = lim.Admin().Reset(ctx, p, sdk.Subject{"user": fmt.Sprint(i % 20)})
					continue
				case 1:
					c.Advance(time.Second)
				}
				var ds []sdk.Decision
				if i%3 == 0 {
					for _, r := range lim.TakeBatch(ctx, p, []sdk.Attempt{{Subject: s}, {Subject: s, Cost: 2}}) {
						if r.Err != nil {
							t.Errorf("TakeBatch = %v", r.Err)
						}
						ds = append(ds, r.Decision)
					}
				} else {
					d, err := lim.Allow(ctx, p, s)
					if err != nil {
						t.Errorf("Allow = %v", err)
					}
					ds = append(ds, d)
				}
				for _, d := range ds {
					if d.Cached && (d.Allowed || d.RetryAfter <= 0) {
						t.Errorf("cached decision %+v, want a denial with a retry", d)
					}
				}
				if st := lim.Admin().HotDenyStats(p); st.Entries > size {
					t.Errorf("%d entries, want <= %d", st.Entries, size)
				}
			}
		})
	}
	wg.Wait()
	st := lim.Admin().HotDenyStats(p)
	if st.Hits == 0 || st.Misses == 0 {
		t.Errorf("HotDenyStats = %+v, want some hits and misses", st)
	}
}

// slowBackend decides after its clock moved on by delay (a slow round
// trip before the server decided).
type slowBackend struct {
	*countingBackend
	c     *fakeclock.Clock
	delay time.Duration
}

func (s *slowBackend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	s.c.Advance(s.delay)
	return s.countingBackend.Take(ctx, req)
}

// TestHotDenyAtNotAhead: a denial decided late in its call (the backend
// answered 3 s after the call began) and hit from the cache 1 s after it
// came back says At = its own At + 1 s: the instant of the hit, never
// later (advancing it from the call's start put cached decisions up to a
// round trip in the future, and a recorder counted them in a bucket its
// reader had not reached yet).
func TestHotDenyAtNotAhead(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := &slowBackend{countingBackend: newCounting(c), c: c}
	lim := sdk.New(b, sdk.WithClock(c))
	p := hotPolicy(t, 10, sdk.FixedWindow("f", 1, time.Minute).By("user"))
	s := sdk.Subject{"user": "u"}
	if d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
		t.Fatalf("first Take = %+v, %v; want allowed", d, err)
	}
	b.delay = 3 * time.Second
	first, err := lim.Take(ctx, p, sdk.Attempt{Subject: s})
	if err != nil || first.Allowed || first.Cached {
		t.Fatalf("second Take = %+v, %v; want denied by the backend", first, err)
	}
	b.delay = 0
	c.Advance(time.Second)
	d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s})
	if err != nil || !d.Cached {
		t.Fatalf("third Take = %+v, %v; want a cached denial", d, err)
	}
	if want := first.At.Add(time.Second); !d.At.Equal(want) || d.At.After(c.Now()) {
		t.Errorf("cached At = %v, want %v (the hit's instant, %v)", d.At, want, c.Now())
	}
}
