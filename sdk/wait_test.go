package sdk_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// waitSetup returns a Limiter on a memory backend with the default clock
// (synctest's fake time inside a bubble) and a 2-per-second fixed window
// policy whose window for "u" is already used up.
func waitSetup(t *testing.T) (*sdk.Limiter, *sdk.Policy, sdk.Subject) {
	t.Helper()
	lim := sdk.New(memory.New(nil))
	p := mustPolicy(t, "w", sdk.FixedWindow("f", 2, time.Second).By("user"))
	s := sdk.Subject{"user": "u"}
	for range 2 {
		if d, err := lim.Allow(context.Background(), p, s); err != nil || !d.Allowed {
			t.Fatalf("Allow(…) = %+v, %v, want allowed", d, err)
		}
	}
	return lim, p, s
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, p, s := waitSetup(t)
		start := time.Now()
		d, err := lim.Wait(context.Background(), p, sdk.Attempt{Subject: s})
		if err != nil || !d.Allowed {
			t.Fatalf("Wait(…) = %+v, %v, want allowed", d, err)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("Wait(…) took %v, want 1s (the window's end)", got)
		}
		if d.Rules[0].Used != 1 {
			t.Errorf("Wait(…).Rules[0].Used = %d, want 1", d.Rules[0].Used)
		}
	})
}

func TestWaitTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, p, s := waitSetup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := lim.Wait(ctx, p, sdk.Attempt{Subject: s})
		if !errors.Is(err, sdk.ErrWaitTooLong) || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("Wait(…) = %+v, %v, want denied (retry 1s) and %v", d, err, sdk.ErrWaitTooLong)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("Wait(…) took %v, want it to return at once", got)
		}
		// Nothing consumed: at the next window the full limit is there.
		time.Sleep(time.Second)
		pd, err := lim.Peek(context.Background(), p, sdk.Attempt{Subject: s, Cost: 2})
		if err != nil || !pd.Allowed || pd.Rules[0].Used != 0 {
			t.Errorf("Peek(…, 2) in the next window = %+v, %v, want allowed with 0 used", pd, err)
		}
		// A deadline that leaves enough time works.
		_, _ = lim.Allow(context.Background(), p, s)
		_, _ = lim.Allow(context.Background(), p, s)
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		if _, err := lim.Wait(ctx2, p, sdk.Attempt{Subject: s}); !errors.Is(err, sdk.ErrWaitTooLong) {
			t.Errorf("Wait(…) with a deadline at the retry time = %v, want %v", err, sdk.ErrWaitTooLong)
		}
		ctx3, cancel3 := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel3()
		if d, err := lim.Wait(ctx3, p, sdk.Attempt{Subject: s}); err != nil || !d.Allowed {
			t.Errorf("Wait(…) with a 1.5s deadline = %+v, %v, want allowed", d, err)
		}
	})
}

func TestWaitCostTooHigh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, p, s := waitSetup(t)
		d, err := lim.Wait(context.Background(), p, sdk.Attempt{Subject: s, Cost: 3})
		if !errors.Is(err, sdk.ErrCostTooHigh) || !d.CostTooHigh {
			t.Errorf("Wait(…, 3) = %+v, %v, want %v", d, err, sdk.ErrCostTooHigh)
		}
	})
}

func TestWaitCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, p, s := waitSetup(t)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		_, err := lim.Wait(ctx, p, sdk.Attempt{Subject: s})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(…) = %v, want %v", err, context.Canceled)
		}
		if got := time.Since(start); got != 100*time.Millisecond {
			t.Errorf("Wait(…) returned after %v, want 100ms", got)
		}
	})
}

// TestWaitContention: three waiters for a window that frees 2 units a
// second; the one that loses the race waits again.
func TestWaitContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, p, s := waitSetup(t)
		start := time.Now()
		var mu sync.Mutex
		var took []time.Duration
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				d, err := lim.Wait(context.Background(), p, sdk.Attempt{Subject: s})
				if err != nil || !d.Allowed {
					t.Errorf("Wait(…) = %+v, %v, want allowed", d, err)
				}
				mu.Lock()
				took = append(took, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		want := map[time.Duration]int{time.Second: 2, 2 * time.Second: 1}
		got := map[time.Duration]int{}
		for _, d := range took {
			got[d]++
		}
		if len(got) != len(want) || got[time.Second] != 2 || got[2*time.Second] != 1 {
			t.Errorf("waits took %v, want two of 1s and one of 2s", took)
		}
	})
}

// TestWaitFakeClock: with one fake clock given to the memory backend, the
// Limiter reads it too, and Wait sleeps by advancing it: no real time
// passes, and the clock lands exactly on the window's end.
func TestWaitFakeClock(t *testing.T) {
	start := time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)
	clk := fakeclock.New(start)
	lim := sdk.New(memory.New(&memory.Options{Clock: clk}))
	p := mustPolicy(t, "w", sdk.FixedWindow("f", 2, time.Second).By("user"))
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}}
	ctx := context.Background()
	for range 2 {
		if d, err := lim.Take(ctx, p, a); err != nil || !d.Allowed {
			t.Fatalf("Take(…) = %+v, %v, want allowed", d, err)
		}
	}
	clk.Advance(300 * time.Millisecond)
	d, err := lim.Wait(ctx, p, a)
	if err != nil || !d.Allowed {
		t.Fatalf("Wait(…) = %+v, %v, want allowed", d, err)
	}
	if got, want := clk.Now(), start.Add(time.Second); !got.Equal(want) {
		t.Errorf("clock after Wait = %v, want %v (the window's end)", got, want)
	}
	if !d.At.Equal(start.Add(time.Second)) {
		t.Errorf("Wait(…).At = %v, want the backend's clock at the window's end", d.At)
	}
}
