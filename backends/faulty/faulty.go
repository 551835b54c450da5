// Package faulty is a backend that fails on demand: it wraps another
// backend and, while failing, answers every call with a given error, as a
// backend that lost its server would. It is for testing how a caller (a
// service's fail-open policy, a console, an alert) behaves during an
// outage and after it, without stopping a server:
//
//	b := faulty.New(memory.New(nil))
//	lim := sdk.New(b)
//	b.Fail(errors.New("dial tcp 10.0.0.7:6379: connection refused"))
//	// … decisions fail (or degrade, under a fail-open policy) …
//	b.Recover()
package faulty

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Backend wraps a backend and fails while told to. It implements every
// optional interface of package driver; one the wrapped backend lacks
// answers errors.ErrUnsupported (as the sdk would say for it), and
// idempotency keys are the wrapped backend's to honour or refuse. It is safe for
// concurrent use.
type Backend struct {
	b   driver.Backend
	err atomic.Pointer[error]
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Peeker      = (*Backend)(nil)
	_ driver.Reserver    = (*Backend)(nil)
	_ driver.Inspector   = (*Backend)(nil)
	_ driver.Resetter    = (*Backend)(nil)
	_ driver.Describer   = (*Backend)(nil)
	_ driver.Batcher     = (*Backend)(nil)
	_ driver.Clocked     = (*Backend)(nil)
	_ driver.ValueLister = (*Backend)(nil)
)

// New returns a Backend that passes every call to b until Fail.
func New(b driver.Backend) *Backend { return &Backend{b: b} }

// Down returns a Backend that always fails with err: no backend behind it.
func Down(err error) *Backend {
	f := &Backend{}
	f.Fail(err)
	return f
}

// Fail makes every call fail with err (a nil err means a generic
// "backend down") until Recover.
func (f *Backend) Fail(err error) {
	if err == nil {
		err = errors.New("faulty: backend down")
	}
	f.err.Store(&err)
}

// Recover lets calls through to the wrapped backend again. A Backend made
// by Down has none: its calls keep failing.
func (f *Backend) Recover() {
	if f.b != nil {
		f.err.Store(nil)
	}
}

// down returns the error to answer with, or nil to pass the call on.
func (f *Backend) down() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func unsupported(what string, b driver.Backend) error {
	return fmt.Errorf("faulty: %T cannot %s: %w", b, what, errors.ErrUnsupported)
}

// Take passes req on, or fails.
func (f *Backend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := f.down(); err != nil {
		return driver.Result{}, err
	}
	return f.b.Take(ctx, req)
}

// Peek passes req on, or fails.
func (f *Backend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := f.down(); err != nil {
		return driver.Result{}, err
	}
	p, ok := f.b.(driver.Peeker)
	if !ok {
		return driver.Result{}, unsupported("peek", f.b)
	}
	return p.Peek(ctx, req)
}

// Reserve passes req on, or fails.
func (f *Backend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := f.down(); err != nil {
		return driver.Result{}, err
	}
	r, ok := f.b.(driver.Reserver)
	if !ok {
		return driver.Result{}, unsupported("reserve", f.b)
	}
	return r.Reserve(ctx, req)
}

// Commit passes the call on, or fails.
func (f *Backend) Commit(ctx context.Context, key, id string) error {
	return f.settle(ctx, key, id, true)
}

// Cancel passes the call on, or fails.
func (f *Backend) Cancel(ctx context.Context, key, id string) error {
	return f.settle(ctx, key, id, false)
}

func (f *Backend) settle(ctx context.Context, key, id string, commit bool) error {
	if err := f.down(); err != nil {
		return err
	}
	r, ok := f.b.(driver.Reserver)
	if !ok {
		return unsupported("settle", f.b)
	}
	if commit {
		return r.Commit(ctx, key, id)
	}
	return r.Cancel(ctx, key, id)
}

// Inspect passes req on, or fails.
func (f *Backend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := f.down(); err != nil {
		return driver.Result{}, err
	}
	i, ok := f.b.(driver.Inspector)
	if !ok {
		return driver.Result{}, unsupported("inspect", f.b)
	}
	return i.Inspect(ctx, req)
}

// Reset passes req on, or fails.
func (f *Backend) Reset(ctx context.Context, req driver.Request) error {
	if err := f.down(); err != nil {
		return err
	}
	r, ok := f.b.(driver.Resetter)
	if !ok {
		return unsupported("reset", f.b)
	}
	return r.Reset(ctx, req)
}

// Describe passes the call on, or fails.
func (f *Backend) Describe(ctx context.Context) (driver.Description, error) {
	if err := f.down(); err != nil {
		return driver.Description{}, err
	}
	d, ok := f.b.(driver.Describer)
	if !ok {
		return driver.Description{}, unsupported("describe itself", f.b)
	}
	return d.Describe(ctx)
}

// ListValues passes req on, or fails.
func (f *Backend) ListValues(ctx context.Context, req driver.ValuesRequest) (driver.ValuesPage, error) {
	if err := f.down(); err != nil {
		return driver.ValuesPage{}, err
	}
	l, ok := f.b.(driver.ValueLister)
	if !ok {
		return driver.ValuesPage{}, unsupported("list values", f.b)
	}
	return l.ListValues(ctx, req)
}

// TakeBatch passes reqs on (one Take each when the wrapped backend has no
// batches), or fails every request.
func (f *Backend) TakeBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return f.batch(ctx, reqs, false)
}

// PeekBatch passes reqs on, or fails every request.
func (f *Backend) PeekBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return f.batch(ctx, reqs, true)
}

func (f *Backend) batch(ctx context.Context, reqs []driver.Request, peek bool) []driver.BatchResult {
	if bt, ok := f.b.(driver.Batcher); ok && f.down() == nil {
		if peek {
			return bt.PeekBatch(ctx, reqs)
		}
		return bt.TakeBatch(ctx, reqs)
	}
	out := make([]driver.BatchResult, len(reqs))
	for i, req := range reqs {
		if peek {
			out[i].Result, out[i].Err = f.Peek(ctx, req)
		} else {
			out[i].Result, out[i].Err = f.Take(ctx, req)
		}
	}
	return out
}

// Clock returns the wrapped backend's clock when it has one, else the
// system clock.
func (f *Backend) Clock() driver.Clock {
	if c, ok := f.b.(driver.Clocked); ok {
		return c.Clock()
	}
	return driver.SystemClock
}
