package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Wait is Take that delays instead of denying (shaping rather than
// policing): it takes a.Cost units (0 means 1) for a.Subject as soon as
// every rule of p admits them, sleeping until the decision's NextEligible
// (every rule admits the attempt then, outside quiet hours) between
// attempts.
//
// Before each sleep it checks ctx's deadline: if the request cannot be
// admitted before it (a retry due exactly at the deadline counts as too
// late), Wait returns the denied Decision and an error
// wrapping ErrWaitTooLong at once, having consumed nothing; so does a
// Block override without end (Admin.SetOverride). A cost some
// rule can never admit returns ErrCostTooHigh at once. When ctx is done
// while sleeping, Wait returns ctx's error. On these errors the Decision
// returned is the last denial.
//
// Wait reserves nothing while it sleeps: another caller may take the
// freed units first, and Wait then sleeps again, so under contention it
// can wait longer than the first RetryAfter (and is not FIFO-fair).
// Sleeps and the deadline check use the Limiter's clock (WithClock): on a
// fake clock Wait takes no real time.
func (l *Limiter) Wait(ctx context.Context, p *Policy, a Attempt) (Decision, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	for {
		var c call
		d, err := l.take(ctx, &c, "wait", opTake, p, a, 0)
		if err != nil || d.Allowed {
			return d, err
		}
		if d.CostTooHigh {
			return d, fmt.Errorf("sdk: wait: %w (denied by %v)", ErrCostTooHigh, d.Denied)
		}
		if d.Override.Kind == driver.Block && d.RetryAfter <= 0 {
			return d, fmt.Errorf("sdk: wait: %w: blocked by override #%d, which has no end", ErrWaitTooLong, d.Override.ID)
		}
		delay := max(d.RetryAfter, time.Millisecond)
		if dl, ok := ctx.Deadline(); ok && !l.now().Add(delay).Before(dl) {
			return d, fmt.Errorf("sdk: wait: %w: retry after %v", ErrWaitTooLong, delay)
		}
		if err := l.clock.Sleep(ctx, delay); err != nil {
			return d, fmt.Errorf("sdk: wait: %w", err)
		}
	}
}
