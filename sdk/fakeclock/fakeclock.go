// Package fakeclock is a settable clock for tests: time passes only when
// the test says so. Give one to the memory backend (memory.Options.Clock)
// and the Limiter reads it too; Limiter.Wait's sleeps then advance it at
// once instead of waiting, so a test of Wait takes no real time.
package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a fake clock. It is safe for concurrent use; its zero value
// reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Sleep advances the clock by d (if positive) and returns at once, or
// returns ctx's error without advancing if ctx is done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(max(d, 0))
	return nil
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
