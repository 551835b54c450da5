package sdk_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

func TestReserveMemory(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, "ads", sdk.FixedWindow("daily", 3, 24*time.Hour).By("user", "campaign"))
	s := sdk.Subject{"user": "u", "campaign": "c"}
	tests := []struct {
		name     string
		settle   func(*sdk.Reservation) error
		advance  time.Duration
		wantUsed int64
		wantErr  error
	}{
		{"commit keeps", func(r *sdk.Reservation) error { return r.Commit(ctx) }, 0, 2, nil},
		{"cancel refunds", func(r *sdk.Reservation) error { return r.Cancel(ctx) }, 0, 0, nil},
		{"lapse refunds", func(r *sdk.Reservation) error { return r.Commit(ctx) }, 2 * time.Minute, 0, sdk.ErrReservationNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			lim := newMemLimiter(t, c)
			d, res, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: 2}, time.Minute)
			if err != nil || !d.Allowed || res == nil {
				t.Fatalf("Reserve(…, 2) = %+v, %v, %v, want allowed", d, res, err)
			}
			if d.Rules[0].Used != 2 {
				t.Errorf("Reserve(…, 2).Rules[0].Used = %d, want 2", d.Rules[0].Used)
			}
			// While held, the units count: a second reservation of 2 is denied.
			if d, res2, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: 2}, time.Minute); err != nil || d.Allowed || res2 != nil {
				t.Errorf("Reserve(…, 2) while held = %+v, %v, %v, want denied, no reservation", d, res2, err)
			}
			c.Advance(tc.advance)
			if err := tc.settle(res); !errors.Is(err, tc.wantErr) {
				t.Errorf("settle = %v, want %v", err, tc.wantErr)
			}
			if got := used(t, lim, p, s)["daily"]; got != tc.wantUsed {
				t.Errorf("used after settle = %d, want %d", got, tc.wantUsed)
			}
			if err := res.Cancel(ctx); !errors.Is(err, sdk.ErrReservationNotFound) {
				t.Errorf("second settle = %v, want %v", err, sdk.ErrReservationNotFound)
			}
		})
	}
}

func TestResetMemory(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	push := loadPolicies(t)["push"]
	s := sdk.Subject{"user": "A", "content": "c"}
	for range 3 {
		_, _ = lim.Allow(ctx, push, s)
	}
	// Reset with the user only: the per-user rules are forgotten, the
	// per-content ones (which it cannot name) are kept.
	if err := lim.Admin().Reset(ctx, push, sdk.Subject{"user": "A"}); err != nil {
		t.Fatalf("Reset(user A) = %v", err)
	}
	want := map[string]int64{"recv-1m": 0, "recv-24h": 0, "content-59s": 2, "content-59m": 2} // the third send was denied
	got := used(t, lim, push, s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("used[%s] after Reset = %d, want %d", k, got[k], v)
		}
	}
	// The trail is kept.
	ins, err := lim.Admin().Inspect(ctx, push, s)
	if err != nil || len(ins.Denials) != 1 || ins.Denials[0].Rule != "content-59s" {
		t.Errorf("Inspect(…).Denials after Reset = %+v, %v, want the content-59s denial", ins.Denials, err)
	}
}

func TestCalendarAndGCRAMemory(t *testing.T) {
	ctx := context.Background()
	api := loadPolicies(t)["api"]
	loc := shanghai(t)
	// 23:59 in Shanghai: the daily cap resets a minute later.
	c := newClock(time.Date(2025, 3, 1, 23, 59, 0, 0, loc))
	lim := newMemLimiter(t, c)
	s := sdk.Subject{"user": "u", "campaign": "spring"}
	for i := range 3 {
		if d, err := lim.Allow(ctx, api, s); err != nil || !d.Allowed {
			t.Fatalf("Allow(%d) = %+v, %v, want allowed", i+1, d, err)
		}
	}
	d, err := lim.Allow(ctx, api, s)
	if err != nil || d.Allowed || !slices.Equal(d.Denied, []string{"daily"}) || d.RetryAfter != time.Minute {
		t.Fatalf("Allow(4) = %+v, %v, want denied by [daily], retry after 1m", d, err)
	}
	if r := d.Rules[0]; r.Rule != "burst" || r.Limit != 15 || r.Used != 3 || r.Remaining != 12 {
		t.Errorf("Allow(4).Rules[0] = %+v, want burst 3/15", r)
	}
	c.Advance(time.Minute)
	if d, err := lim.Allow(ctx, api, s); err != nil || !d.Allowed {
		t.Errorf("Allow after local midnight = %+v, %v, want allowed", d, err)
	}
	// GCRA: 15 at once, then one per 2 s; the cost 16 never fits.
	if d, err := lim.Take(ctx, api, sdk.Attempt{Subject: sdk.Subject{"user": "v", "campaign": "x"}, Cost: 16}); err != nil || d.Allowed || !d.CostTooHigh {
		t.Errorf("Take(cost 16) = %+v, %v, want denied, cost too high", d, err)
	}
}

// TestConcurrentAllow: one shared Limiter admits exactly Limit of many
// concurrent requests.
func TestConcurrentAllow(t *testing.T) {
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p := mustPolicy(t, "c", sdk.SlidingLog("l", 10, time.Minute).By("user"), sdk.FixedWindow("f", 100, time.Minute).By("user"))
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			d, err := lim.Allow(context.Background(), p, sdk.Subject{"user": "u"})
			if err != nil {
				t.Errorf("Allow(…) = %v", err)
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Errorf("%d of 50 concurrent Allow(…) allowed, want 10", allowed)
	}
	if got := used(t, lim, p, sdk.Subject{"user": "u"})["f"]; got != 10 {
		t.Errorf("fixed rule used = %d, want 10 (denials consume nothing)", got)
	}
}
