package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestZeroLimiter: every method of a zero Limiter (and of New(nil))
// returns an error, under a fail-open policy as under a fail-closed one:
// a Limiter without a backend is a mistake of the caller, not a backend
// failure that fail-open may hide. Nothing panics.
func TestZeroLimiter(t *testing.T) {
	ctx := context.Background()
	rules := []sdk.Rule{sdk.FixedWindow("f", 5, time.Minute).By("user")}
	closed, err := sdk.NewPolicy("closed", rules, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	open, err := sdk.NewPolicy("open", rules, sdk.WithFailOpen(), sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "a"}
	a := sdk.Attempt{Subject: s}
	limiters := map[string]func() *sdk.Limiter{
		"zero":     func() *sdk.Limiter { return &sdk.Limiter{} },
		"New(nil)": func() *sdk.Limiter { return sdk.New(nil) },
	}
	for lname, mk := range limiters {
		for _, p := range []*sdk.Policy{closed, open} {
			calls := map[string]func(l *sdk.Limiter) error{
				"Allow": func(l *sdk.Limiter) error { _, err := l.Allow(ctx, p, s); return err },
				"Take":  func(l *sdk.Limiter) error { _, err := l.Take(ctx, p, a); return err },
				"Peek":  func(l *sdk.Limiter) error { _, err := l.Peek(ctx, p, a); return err },
				"Wait":  func(l *sdk.Limiter) error { _, err := l.Wait(ctx, p, a); return err },
				"Reserve": func(l *sdk.Limiter) error {
					_, r, err := l.Reserve(ctx, p, a, time.Minute)
					if r != nil {
						return fmt.Errorf("returned a Reservation (and error %v)", err)
					}
					return err
				},
				"TakeBatch":  func(l *sdk.Limiter) error { return l.TakeBatch(ctx, p, []sdk.Attempt{a})[0].Err },
				"PeekBatch":  func(l *sdk.Limiter) error { return l.PeekBatch(ctx, p, []sdk.Attempt{a})[0].Err },
				"Check":      func(l *sdk.Limiter) error { return l.Check(p, a) },
				"Reset":      func(l *sdk.Limiter) error { return l.Reset(ctx, p, s) },
				"ResetRules": func(l *sdk.Limiter) error { return l.ResetRules(ctx, p, s, "f") },
				"Inspect":    func(l *sdk.Limiter) error { _, err := l.Inspect(ctx, p, s); return err },
				"Describe":   func(l *sdk.Limiter) error { _, err := l.Describe(ctx); return err },
				"SetOverride": func(l *sdk.Limiter) error {
					_, err := l.SetOverride(ctx, p, s, sdk.Override{Kind: sdk.OverrideBlock})
					return err
				},
				"DeleteOverride": func(l *sdk.Limiter) error { return l.DeleteOverride(ctx, p, s, 1) },
				"Overrides":      func(l *sdk.Limiter) error { _, err := l.Overrides(ctx, p, s); return err },
				"ReservationOf": func(l *sdk.Limiter) error {
					_, err := l.ReservationOf(p, s, "0123456789abcdef")
					return err
				},
			}
			for name, call := range calls {
				t.Run(fmt.Sprintf("%s/%s/%s", lname, p.Name(), name), func(t *testing.T) {
					var err error
					func() {
						defer func() {
							if r := recover(); r != nil {
								err = fmt.Errorf("panic: %v", r)
								t.Errorf("%s on a %s Limiter panicked: %v", name, lname, r)
							}
						}()
						err = call(mk())
					}()
					if err == nil {
						t.Errorf("%s on a %s Limiter (policy %s) = nil error, want one", name, lname, p.Name())
					} else if !strings.Contains(err.Error(), "sdk.New") && !strings.HasPrefix(err.Error(), "panic") {
						t.Errorf("%s on a %s Limiter = %v, want an error that says to use sdk.New", name, lname, err)
					}
				})
			}
			t.Run(fmt.Sprintf("%s/%s/no-error methods", lname, p.Name()), func(t *testing.T) {
				l := mk()
				_ = l.HotDenyStats(p) // must not panic
				_ = l.KeyLayout(p, s)
			})
		}
	}
}
