package protoconv_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// A decision and an inspection survive the trip to the wire and back.
func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 123456789, time.UTC)
	d := sdk.Decision{
		Allowed: false, Policy: "push", At: at, Denied: []string{"b"}, RetryAfter: 1500 * time.Millisecond,
		CostTooHigh: true, NonAtomic: true, Replayed: true, Cached: true, ShadowDenied: []string{"c"}, Durable: true, Replicas: 2,
		Override: driver.Override{ID: 12, Kind: driver.Limit, Limits: map[string]int64{"b": 5}, Until: at.Add(time.Hour),
			Reason: "partner", By: "ops", Created: at.Add(-time.Hour)},
		Rules: []sdk.RuleDecision{
			{Rule: "a", Algorithm: driver.GCRA, Allowed: true, Used: 1, Limit: 15, Remaining: 14, ResetAfter: time.Second, Strategy: "gcra-tat"},
			{Rule: "b", Algorithm: driver.FixedWindow, Used: 5, Limit: 5, Before: 3},
			{Rule: "b", Algorithm: driver.SlidingLog, Used: 5, Limit: 5, ResetAfter: time.Minute, RetryAfter: 1500 * time.Millisecond, CostTooHigh: true},
			{Rule: "c", Algorithm: driver.FixedWindow, Used: 1, Limit: 1, Shadow: true},
		},
	}
	if got := protoconv.FromDecision(protoconv.Decision(d)); !reflect.DeepEqual(got, d) {
		t.Errorf("round trip = %+v, want %+v", got, d)
	}
	deg := sdk.Decision{Allowed: true, Policy: "push", At: at, Degraded: true, Err: errors.New("dial tcp 10.0.0.1:6379: refused")}
	w := protoconv.Decision(deg)
	if w.GetDegradedReason() != protoconv.DegradedReason {
		t.Errorf("degraded reason = %q: the backend's error must not travel", w.GetDegradedReason())
	}
	if got := protoconv.FromDecision(w); !got.Degraded || !errors.Is(got.Err, protoconv.ErrDegraded) {
		t.Errorf("degraded round trip = %+v", got)
	}
	in := sdk.Inspection{
		Policy: "push", At: at, Skipped: []string{"c"}, TrailMax: 100, TrailTTL: 24 * time.Hour, TrailFull: true,
		Rules: d.Rules,
		Denials: []sdk.Denial{
			{At: at, Policy: "push", Rule: "b", Used: 5, Limit: 5, Cost: 1, RetryAfter: time.Second, Values: map[string]string{"content": "x"}, ValuesPartial: true},
			{At: at, Policy: "push", Rule: "c", Used: 1, Limit: 1, Cost: 1, Shadow: true},
			{At: at, Policy: "push", Cost: 1, RetryAfter: time.Hour, Override: 12},
		},
	}
	if got := protoconv.FromInspection(protoconv.Inspection(in)); !reflect.DeepEqual(got, in) {
		t.Errorf("inspection round trip = %+v, want %+v", got, in)
	}
}

// The seed policies (a calendar rule in a time zone, GCRA, fail-open, a
// trail) are rebuilt from the wire as they were.
func TestPolicyRoundTrip(t *testing.T) {
	ps, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		got, err := protoconv.FromPolicy(protoconv.Policy(p))
		if err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
		if diff := fleet.AnnouncementOf(got).Diff(fleet.AnnouncementOf(p)); diff != nil {
			t.Errorf("%s: %v", p.Name(), diff)
		}
		if !reflect.DeepEqual(got.Rules(), p.Rules()) || got.FailOpen() != p.FailOpen() || got.HotDenyCache() != p.HotDenyCache() ||
			got.ReadsOverrides() != p.ReadsOverrides() {
			t.Errorf("%s: rebuilt as %+v, want %+v", p.Name(), got.Rules(), p.Rules())
		}
		gm, gt := got.Trail()
		wm, wt := p.Trail()
		if gm != wm || gt != wt {
			t.Errorf("%s: trail %d %v, want %d %v", p.Name(), gm, gt, wm, wt)
		}
	}
}

// A policy's overrides flag and its rules' shadow flags and epochs travel.
func TestPolicyRoundTripStoreFields(t *testing.T) {
	p, err := sdk.NewPolicy("vip", []sdk.Rule{
		sdk.FixedWindow("daily", 2, 24*time.Hour).By("user"),
		sdk.FixedWindow("trial", 1, 24*time.Hour).By("user").AsShadow(),
		sdk.FixedWindow("campaign", 3, 24*time.Hour).By("user", "campaign"),
	}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	rules := p.Rules()
	rules[0].Epoch = 4
	p, err = sdk.NewPolicy("vip", rules, sdk.WithOverrides(), sdk.WithWide("campaign"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := protoconv.FromPolicy(protoconv.Policy(p))
	if err != nil {
		t.Fatal(err)
	}
	if !got.ReadsOverrides() || !reflect.DeepEqual(got.Rules(), p.Rules()) || !reflect.DeepEqual(got.RuleIDs(), p.RuleIDs()) || !reflect.DeepEqual(got.Wide(), p.Wide()) {
		t.Errorf("rebuilt as %+v (overrides %v, wide %v), want %+v (wide %v)", got.Rules(), got.ReadsOverrides(), got.Wide(), p.Rules(), p.Wide())
	}
}
