package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// backendError is an error a Limiter call returned. The central error
// handler answers it 503 with backendUnavailable and logs its text,
// which names socket addresses. It wraps the call's error, so errors.Is
// still tells bad input (sdk.ErrInvalidSubject: 400) and missing
// features (errors.ErrUnsupported) apart.
type backendError struct{ err error }

func (e *backendError) Error() string { return e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }

func marked(err error) error {
	if err == nil {
		return nil
	}
	return &backendError{err: err}
}

// markedLimiter is the Limiter the console calls: Config.Limiter, with
// every error it returns a *backendError, so that no handler can pass a
// backend failure on as an internal error (500).
type markedLimiter struct{ l Limiter }

var _ Limiter = markedLimiter{}

func (m markedLimiter) Peek(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error) {
	d, err := m.l.Peek(ctx, p, a)
	return d, marked(err)
}

// markedAdmin is the Admin the console calls: Config.Admin, its errors
// marked as markedLimiter's are.
type markedAdmin struct{ a Admin }

var _ Admin = markedAdmin{}

func (m markedAdmin) Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error) {
	ins, err := m.a.Inspect(ctx, p, s)
	return ins, marked(err)
}

func (m markedAdmin) Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error {
	return marked(m.a.Reset(ctx, p, s))
}

func (m markedAdmin) ResetRules(ctx context.Context, p *sdk.Policy, s sdk.Subject, rules ...string) error {
	return marked(m.a.ResetRules(ctx, p, s, rules...))
}

// markedFleet is the Fleet the console calls: Config.Fleet, with every
// error it returns a *backendError (a *fleet.MalformedError stays
// reachable with errors.As).
type markedFleet struct{ f Fleet }

var _ Fleet = markedFleet{}

func (m markedFleet) Stats(ctx context.Context, p *sdk.Policy, window time.Duration) (fleet.Stats, error) {
	st, err := m.f.Stats(ctx, p, window)
	return st, marked(err)
}

func (m markedFleet) Announced(ctx context.Context, within time.Duration) ([]fleet.Announcement, error) {
	a, err := m.f.Announced(ctx, within)
	return a, marked(err)
}

func (m markedFleet) Shadow(ctx context.Context, p *sdk.Policy, window time.Duration) (fleet.ShadowStats, error) {
	st, err := m.f.Shadow(ctx, p, window)
	return st, marked(err)
}

func (m markedFleet) Evictions(ctx context.Context, window time.Duration) (fleet.Evictions, error) {
	ev, err := m.f.Evictions(ctx, window)
	return ev, marked(err)
}

// noFleet is the Fleet of a console given none: the backend keeps no
// statistics.
type noFleet struct{}

func (noFleet) Stats(context.Context, *sdk.Policy, time.Duration) (fleet.Stats, error) {
	return fleet.Stats{}, fmt.Errorf("console: stats: no Config.Fleet: %w", errors.ErrUnsupported)
}

func (noFleet) Announced(context.Context, time.Duration) ([]fleet.Announcement, error) {
	return nil, fmt.Errorf("console: announced: no Config.Fleet: %w", errors.ErrUnsupported)
}

func (noFleet) Shadow(context.Context, *sdk.Policy, time.Duration) (fleet.ShadowStats, error) {
	return fleet.ShadowStats{}, fmt.Errorf("console: shadow: no Config.Fleet: %w", errors.ErrUnsupported)
}

func (m markedAdmin) Describe(ctx context.Context) (driver.Description, error) {
	d, err := m.a.Describe(ctx)
	return d, marked(err)
}

func (m markedAdmin) KeyLayout(p *sdk.Policy, s sdk.Subject) sdk.KeyLayout {
	return m.a.KeyLayout(p, s)
}

func (noFleet) Evictions(context.Context, time.Duration) (fleet.Evictions, error) {
	return fleet.Evictions{}, fmt.Errorf("console: evictions: no Config.Fleet: %w", errors.ErrUnsupported)
}
