package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/faulty"
	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestConformance: while up, the wrapper is the backend it wraps.
func TestConformance(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return faulty.New(memory.New(&memory.Options{Clock: clock})) },
		Clock:      clock,
	})
}

func TestFailAndRecover(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	b := faulty.New(memory.New(nil))
	lim := sdk.New(b)
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 2, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := sdk.NewPolicy("n", []sdk.Rule{sdk.FixedWindow("f", 2, time.Hour).By("user"), sdk.FixedWindow("g", 2, time.Hour).By("user", "campaign")})
	if err != nil {
		t.Fatal(err)
	}
	open, err := sdk.NewPolicy("o", []sdk.Rule{sdk.FixedWindow("f", 2, time.Hour).By("user")}, sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}}
	if d, err := lim.Take(ctx, p, a); err != nil || !d.Allowed {
		t.Fatalf("Take while up = %+v, %v; want allowed", d, err)
	}
	b.Fail(boom)
	for name, err := range map[string]error{
		"take":    func() error { _, err := lim.Take(ctx, p, a); return err }(),
		"peek":    func() error { _, err := lim.Peek(ctx, p, a); return err }(),
		"inspect": func() error { _, err := lim.Admin().Inspect(ctx, p, a.Subject); return err }(),
		"reset":   lim.Admin().Reset(ctx, p, a.Subject),
		"reserve": func() error { _, _, err := lim.Reserve(ctx, p, a, time.Minute); return err }(),
		"batch":   lim.TakeBatch(ctx, p, []sdk.Attempt{a})[0].Err,
		"values": func() error {
			_, err := lim.Admin().Values(ctx, nested, a.Subject, "campaign", sdk.ValuesOptions{})
			return err
		}(),
	} {
		if !errors.Is(err, boom) {
			t.Errorf("%s while failing = %v, want %v", name, err, boom)
		}
	}
	if d, err := lim.Take(ctx, open, a); err != nil || !d.Allowed || !d.Degraded {
		t.Errorf("fail-open Take while failing = %+v, %v; want allowed and degraded", d, err)
	}
	b.Recover()
	if d, err := lim.Take(ctx, p, a); err != nil || !d.Allowed || d.Rules[0].Used != 2 {
		t.Errorf("Take after Recover = %+v, %v; want allowed with used 2 (nothing counted while down)", d, err)
	}
	down := faulty.Down(boom)
	down.Recover()
	if _, err := sdk.New(down).Take(ctx, p, a); !errors.Is(err, boom) {
		t.Errorf("Down(…) after Recover = %v, want still %v (no backend behind it)", err, boom)
	}
}

// TestUnsupported: an optional operation the wrapped backend lacks is
// unsupported through the wrapper too.
func TestUnsupported(t *testing.T) {
	ctx := context.Background()
	b := faulty.New(takeOnly{memory.New(nil)})
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 2, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.New(b).Peek(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": "u"}}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Peek through a take-only backend = %v, want errors.ErrUnsupported", err)
	}
	n, err := sdk.NewPolicy("n", []sdk.Rule{sdk.FixedWindow("f", 2, time.Hour).By("user"), sdk.FixedWindow("g", 2, time.Hour).By("user", "campaign")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.New(b).Admin().Values(ctx, n, sdk.Subject{"user": "u"}, "campaign", sdk.ValuesOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Values through a take-only backend = %v, want errors.ErrUnsupported", err)
	}
	k := sdk.Attempt{Subject: sdk.Subject{"user": "u"}, IdempotencyKey: "k"}
	if _, err := sdk.New(b).Take(ctx, p, k); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Take with a key through a take-only backend = %v, want errors.ErrUnsupported", err)
	}
}

type takeOnly struct{ m *memory.Backend }

func (b takeOnly) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	if req.IdempotencyKey != "" {
		return driver.Result{}, fmt.Errorf("take-only: idempotency keys: %w", errors.ErrUnsupported)
	}
	return b.m.Take(ctx, req)
}
