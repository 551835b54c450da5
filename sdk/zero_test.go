package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
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
				"Reset":      func(l *sdk.Limiter) error { return l.Admin().Reset(ctx, p, s) },
				"ResetRules": func(l *sdk.Limiter) error { return l.Admin().ResetRules(ctx, p, s, "f") },
				"Inspect":    func(l *sdk.Limiter) error { _, err := l.Admin().Inspect(ctx, p, s); return err },
				"Describe":   func(l *sdk.Limiter) error { _, err := l.Admin().Describe(ctx); return err },
				"SetOverride": func(l *sdk.Limiter) error {
					_, err := l.Admin().SetOverride(ctx, p, s, driver.Override{Kind: driver.Block})
					return err
				},
				"DeleteOverride": func(l *sdk.Limiter) error { return l.Admin().DeleteOverride(ctx, p, s, 1) },
				"Overrides":      func(l *sdk.Limiter) error { _, err := l.Admin().Overrides(ctx, p, s); return err },
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
				_ = l.Admin().HotDenyStats(p) // must not panic
				_ = l.Admin().KeyLayout(p, s)
			})
		}
	}
}

// TestZeroAdmin: the zero Admin, like the Admin of a zero Limiter, has
// no backend: every method that can fail says to use sdk.New, and none
// panics.
func TestZeroAdmin(t *testing.T) {
	ctx := context.Background()
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 5, time.Minute).By("user")}, sdk.WithOverrides(), sdk.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "a"}
	admins := map[string]*sdk.Admin{"zero": {}, "nil Limiter's": (*sdk.Limiter)(nil).Admin()}
	for aname, ad := range admins {
		calls := map[string]func() error{
			"Reset":          func() error { return ad.Reset(ctx, p, s) },
			"ResetRules":     func() error { return ad.ResetRules(ctx, p, s, "f") },
			"Inspect":        func() error { _, err := ad.Inspect(ctx, p, s); return err },
			"Describe":       func() error { _, err := ad.Describe(ctx); return err },
			"SetOverride":    func() error { _, err := ad.SetOverride(ctx, p, s, driver.Override{Kind: driver.Block}); return err },
			"DeleteOverride": func() error { return ad.DeleteOverride(ctx, p, s, 1) },
			"Overrides":      func() error { _, err := ad.Overrides(ctx, p, s); return err },
		}
		for name, call := range calls {
			t.Run(aname+"/"+name, func(t *testing.T) {
				if err := call(); err == nil || !strings.Contains(err.Error(), "sdk.New") {
					t.Errorf("%s on the %s Admin = %v, want an error that says to use sdk.New", name, aname, err)
				}
			})
		}
		if st := ad.HotDenyStats(p); st != (sdk.HotDenyStats{}) {
			t.Errorf("HotDenyStats on the %s Admin = %+v, want zero", aname, st)
		}
		if kl := ad.KeyLayout(p, s); kl.Trail == "" {
			t.Errorf("KeyLayout on the %s Admin = %+v, want the keys (it touches no backend)", aname, kl)
		}
	}
}
