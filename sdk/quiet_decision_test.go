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
