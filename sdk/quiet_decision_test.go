package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestDecisionQuiet: Decision.Quiet is set for a denial for quiet hours
// and for an attempt its class let through them, never for a denial of a
// rule that a class let through quiet hours (its doc: a denial with Quiet
// set is one for quiet hours).
func TestDecisionQuiet(t *testing.T) {
	at := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC) // in quiet hours, 21:00 to 08:00
	end := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	clock := fakeclock.New(at)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}), sdk.WithClock(clock))
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.SlidingLog("day", 1, 24*time.Hour).By("user")},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}),
		sdk.WithClass(sdk.Class{Name: "alert", QuietHours: true}))
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	tests := []struct {
		name    string
		class   string
		allowed bool
		quiet   time.Time
	}{
		{"plain: denied for quiet hours", "", false, end},
		{"alert: passes them", "alert", true, end},
		{"alert again: denied by the rule", "alert", false, time.Time{}},
	}
	for _, tc := range tests {
		d, err := lim.Take(context.Background(), p, sdk.Attempt{Subject: s, Class: tc.class})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tc.allowed || !d.Quiet.Equal(tc.quiet) {
			t.Errorf("%s: Take = allowed %v, Quiet %v; want %v, %v", tc.name, d.Allowed, d.Quiet, tc.allowed, tc.quiet)
		}
	}
}

// TestQuietHoursManySpans: when more quiet spans fall within the reach
// around the Limiter's clock than a request carries
// (driver.MaxQuietSpans), those sent are the ones around now, and an
// attempt inside a later one is still denied for quiet hours, never
// allowed because its span was left out.
func TestQuietHoursManySpans(t *testing.T) {
	var periods []sdk.QuietPeriod // 00:00-00:01, 00:02-00:03, … 00:26-00:27
	for i := range sdk.MaxQuietPeriods {
		from := time.Duration(2*i) * time.Minute
		periods = append(periods, sdk.QuietPeriod{From: from, To: from + time.Minute})
	}
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("f", 100, time.Hour).By("user")},
		sdk.WithQuietHours(time.UTC, periods...))
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range sdk.MaxQuietPeriods {
		for _, tc := range []struct {
			at    time.Duration
			quiet bool
		}{{time.Duration(2*i)*time.Minute + 30*time.Second, true}, {time.Duration(2*i+1)*time.Minute + 30*time.Second, false}} {
			clock := fakeclock.New(day.Add(tc.at))
			lim := sdk.New(memory.New(&memory.Options{Clock: clock}), sdk.WithClock(clock))
			d, err := lim.Take(context.Background(), p, sdk.Attempt{Subject: sdk.Subject{"user": "u"}})
			if err != nil {
				t.Fatalf("at %v: %v", tc.at, err)
			}
			if d.Allowed == tc.quiet || d.Quiet.IsZero() != !tc.quiet {
				t.Errorf("at %v: allowed %v, Quiet %v; want quiet %v", tc.at, d.Allowed, d.Quiet, tc.quiet)
			}
		}
	}
}

// TestRetryAfterPastQuietHours: a rule's retry that falls in quiet hours
// moves past them in Decision.RetryAfter as in NextEligible (one wait for
// Wait, Retry-After headers and serve).
func TestRetryAfterPastQuietHours(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 20, 30, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}), sdk.WithClock(clock))
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("hour", 1, time.Hour).By("user")},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}}
	if d, err := lim.Take(context.Background(), p, a); err != nil || !d.Allowed {
		t.Fatalf("first Take = %+v, %v", d, err)
	}
	d, err := lim.Take(context.Background(), p, a)
	want := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC) // the window ends at 21:00, in quiet hours
	if err != nil || d.Allowed || !d.NextEligible.Equal(want) || d.RetryAfter != want.Sub(d.At) {
		t.Fatalf("second Take = allowed %v, NextEligible %v, RetryAfter %v, %v; want denied until %v (%v)", d.Allowed, d.NextEligible, d.RetryAfter, err, want, want.Sub(d.At))
	}
}
