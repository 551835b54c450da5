package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestEventCarriesAttempt: the observer's Event gives the attempt's
// priority, zone and identity beside its subject and cost, and its class
// in the decision, for takes, peeks and reservations alike.
func TestEventCarriesAttempt(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	var events []sdk.Event
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}), sdk.WithClock(clock), sdk.WithObserver(func(e sdk.Event) { events = append(events, e) }))
	tokyo, err := sdk.LoadZone("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.SlidingWindow("day", 5, 24*time.Hour).By("user").WithHeadroom(2, 1)},
		sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, Counted: true}), sdk.WithPerson("user"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}, Class: "otp", Priority: 3, Zone: tokyo, Identity: "+81-3-0000"}
	if _, err := lim.Take(ctx, p, a); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Peek(ctx, p, a); err != nil {
		t.Fatal(err)
	}
	plain := sdk.Attempt{Subject: sdk.Subject{"user": "u"}}
	if _, err := lim.Take(ctx, p, plain); err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 {
		t.Fatalf("observed %d events, want 3", len(events))
	}
	for i, e := range events[:2] {
		if e.Priority != 3 || e.Zone != tokyo || e.Identity != "+81-3-0000" || e.Decision.Class != "otp" {
			t.Errorf("event %d (%s) = priority %d, zone %v, identity %q, class %q; want 3, Asia/Tokyo, +81-3-0000, otp", i, e.Op, e.Priority, e.Zone, e.Identity, e.Decision.Class)
		}
	}
	if e := events[2]; e.Priority != 0 || e.Zone != nil || e.Identity != "" || e.Decision.Class != "" {
		t.Errorf("plain event = priority %d, zone %v, identity %q, class %q; want none", e.Priority, e.Zone, e.Identity, e.Decision.Class)
	}
}
