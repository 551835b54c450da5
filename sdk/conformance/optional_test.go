package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// takeOnly is a backend with Take alone: it hides every optional
// interface of the memory backend it wraps (Clocked too: the suite reads
// the clock through the backend).
type takeOnly struct{ b *memory.Backend }

func (t takeOnly) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	if req.IdempotencyKey != "" { // as the contract asks of a backend without them
		return driver.Result{}, fmt.Errorf("take-only: idempotency keys: %w", errors.ErrUnsupported)
	}
	return t.b.Take(ctx, req)
}

// TestTakeOnlyBackend runs the suite on a backend with no optional
// interface: the cases needing one check that the sdk refuses the
// operation (errors.ErrUnsupported) and are skipped; the rest pass.
func TestTakeOnlyBackend(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := takeOnly{memory.New(&memory.Options{Clock: clock})}
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
		Clock:      clock,
	})
}

// TestUnsupported: each sdk operation needing an optional interface the
// backend lacks returns an error wrapping errors.ErrUnsupported, and
// consumes nothing.
func TestUnsupported(t *testing.T) {
	ctx := context.Background()
	mem := memory.New(nil)
	lim := sdk.New(takeOnly{mem}, sdk.WithPrefix("unsupported"))
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("u")})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := sdk.NewPolicy("n", []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("u"), sdk.FixedWindow("g", 1, time.Hour).By("u", "c")})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"u": "1"}
	a := sdk.Attempt{Subject: s}
	tests := []struct {
		name string
		call func() error
	}{
		{"Peek (driver.Peeker)", func() error { _, err := lim.Peek(ctx, p, a); return err }},
		{"PeekBatch (driver.Peeker)", func() error { return lim.PeekBatch(ctx, p, []sdk.Attempt{a})[0].Err }},
		{"Reserve (driver.Reserver)", func() error { _, _, err := lim.Reserve(ctx, p, a, time.Minute); return err }},
		{"Inspect (driver.Inspector)", func() error { _, err := lim.Admin().Inspect(ctx, p, s); return err }},
		{"Reset (driver.Resetter)", func() error { return lim.Admin().Reset(ctx, p, s) }},
		{"Describe (driver.Describer)", func() error { _, err := lim.Admin().Describe(ctx); return err }},
		{"Values (driver.ValueLister)", func() error {
			_, err := lim.Admin().Values(ctx, nested, s, "c", sdk.ValuesOptions{})
			return err
		}},
		{"Link (driver.Linker)", func() error { _, err := lim.Admin().Link(ctx, "id", "person", "", ""); return err }},
		{"Person (driver.Linker)", func() error { _, err := lim.Admin().Person(ctx, "person"); return err }},
		{"Take with a key (no idempotency)", func() error {
			_, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, IdempotencyKey: "k"})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("%s = %v, want an error wrapping %v", tc.name, err, errors.ErrUnsupported)
			}
		})
	}
	// Nothing was consumed: the one unit is still there.
	if d, err := lim.Take(ctx, p, a); err != nil || !d.Allowed || d.Rules[0].Used != 1 {
		t.Errorf("Take after the refused operations = %+v, %v, want allowed with used 1", d, err)
	}
	// Without a Batcher, TakeBatch falls back to one Take per attempt.
	if out := lim.TakeBatch(ctx, p, []sdk.Attempt{a}); out[0].Err != nil || out[0].Decision.Allowed {
		t.Errorf("TakeBatch at the limit on a Take-only backend = %+v, want denied, no error", out[0])
	}
}
