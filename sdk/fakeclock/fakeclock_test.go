package fakeclock_test

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(t0)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("Now() after Advance(1m) = %v, want %v", got, t0.Add(time.Minute))
	}
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Errorf("Now() after Set = %v, want %v", got, t0)
	}
	if err := c.Sleep(context.Background(), time.Second); err != nil || !c.Now().Equal(t0.Add(time.Second)) {
		t.Errorf("Sleep(1s) = %v, Now() %v, want nil, %v", err, c.Now(), t0.Add(time.Second))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); err == nil || !c.Now().Equal(t0.Add(time.Second)) {
		t.Errorf("Sleep on a done context = %v, Now() %v, want its error and no advance", err, c.Now())
	}
}
