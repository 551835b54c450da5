package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// unclocked hides the memory backend's clock from the Limiter.
type unclocked struct{ b *memory.Backend }

func (u unclocked) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return u.b.Take(ctx, req)
}

// A backend whose clock is far from the Limiter's is never given quiet
// hours it does not reach: the decision fails with ErrClockSkew, nothing
// consumed (Degraded under fail-open), whether the backend's clock is
// ahead or behind.
func TestQuietHoursClockSkew(t *testing.T) {
	for _, off := range []time.Duration{-2 * time.Hour, 2 * time.Hour, 90 * 24 * time.Hour} {
		limClock := fakeclock.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
		backClock := fakeclock.New(limClock.Now().Add(off))
		mem := memory.New(&memory.Options{Clock: backClock})
		lim := sdk.New(unclocked{mem}, sdk.WithClock(limClock))
		rules := []sdk.Rule{sdk.FixedWindow("f", 5, time.Hour).By("u")}
		night := sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 22 * time.Hour, To: 6 * time.Hour})
		p, err := sdk.NewPolicy("p", rules, night)
		if err != nil {
			t.Fatal(err)
		}
		a := sdk.Attempt{Subject: sdk.Subject{"u": "1"}}
		if d, err := lim.Take(context.Background(), p, a); !errors.Is(err, sdk.ErrClockSkew) {
			t.Errorf("offset %v: Take = %+v, %v, want ErrClockSkew", off, d, err)
		}
		open, err := sdk.NewPolicy("p", rules, night, sdk.WithFailOpen())
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lim.Take(context.Background(), open, a); err != nil || !d.Degraded || !errors.Is(d.Err, sdk.ErrClockSkew) {
			t.Errorf("offset %v: fail-open Take = %+v, %v, want Degraded with ErrClockSkew", off, d, err)
		}
		in, err := sdk.New(mem).Admin().Inspect(context.Background(), p, a.Subject)
		if err != nil || in.Rules[0].Used != 0 {
			t.Errorf("offset %v: after the refusals, used = %+v, %v, want 0: nothing consumed", off, in.Rules, err)
		}
	}
}
