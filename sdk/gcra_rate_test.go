package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestSameState(t *testing.T) {
	by := func(r sdk.Rule) sdk.Rule { return r.By("user") }
	g := by(sdk.GCRA("r", 10, 2*time.Hour, 9))
	epoch := func(r sdk.Rule, e int64) sdk.Rule { r.Epoch = e; return r }
	tests := []struct {
		name string
		a, b sdk.Rule
		want bool
	}{
		{"same", g, g, true},
		{"gcra burst", g, by(sdk.GCRA("r", 10, 2*time.Hour, 4)), true},
		{"gcra shadow", g, g.AsShadow(), true},
		{"gcra rate", g, by(sdk.GCRA("r", 5, 2*time.Hour, 9)), false},
		{"gcra rate and burst", g, by(sdk.GCRA("r", 5, 2*time.Hour, 4)), false},
		{"gcra rate within a µs", by(sdk.GCRA("r", 300, time.Millisecond, 0)), by(sdk.GCRA("r", 320, time.Millisecond, 0)), true}, // both 3µs
		{"gcra window", g, by(sdk.GCRA("r", 20, 4*time.Hour, 9)), false},
		{"fixed limit", by(sdk.FixedWindow("r", 10, time.Hour)), by(sdk.FixedWindow("r", 5, time.Hour)), true},
		{"log limit", by(sdk.SlidingLog("r", 10, time.Hour)), by(sdk.SlidingLog("r", 50, time.Hour)), true},
		{"log limit across LogLine", by(sdk.SlidingLog("r", 100, time.Hour)), by(sdk.SlidingLog("r", 101, time.Hour)), false},
		{"log limit above LogLine", by(sdk.SlidingLog("r", 200, time.Hour)), by(sdk.SlidingLog("r", 101, time.Hour)), true},
		{"sliding limit across LogLine", by(sdk.SlidingWindow("r", 100, time.Hour)), by(sdk.SlidingWindow("r", 101, time.Hour)), false},
		{"sliding limit above LogLine", by(sdk.SlidingWindow("r", 200, time.Hour)), by(sdk.SlidingWindow("r", 101, time.Hour)), true},
		{"window", by(sdk.FixedWindow("r", 10, time.Hour)), by(sdk.FixedWindow("r", 10, 2*time.Hour)), false},
		{"algorithm", by(sdk.FixedWindow("r", 10, time.Hour)), by(sdk.SlidingLog("r", 10, time.Hour)), false},
		{"epoch", g, epoch(g, 3), false},
		{"dimensions", g, g.By("user", "app"), false},
		{"invalid", g, by(sdk.GCRA("r", 0, 2*time.Hour, 9)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sdk.SameState(tc.a, tc.b); got != tc.want {
				t.Errorf("SameState(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// TestWithChangeGCRARate: a GCRA rate change is a change (WithChange
// accepts it, the rule under a new Epoch); under the same Epoch it would
// share the rule's keys, which NewPolicy refuses; a burst change is not
// a change.
func TestWithChangeGCRARate(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	from := sdk.GCRA("r", 10, 2*time.Hour, 9).By("user")
	for _, tc := range []struct {
		name    string
		to      sdk.Rule
		epoch   int64
		wantErr bool
	}{
		{"rate, new epoch", sdk.GCRA("r", 5, 2*time.Hour, 9).By("user"), 2, false},
		{"rate, same epoch", sdk.GCRA("r", 5, 2*time.Hour, 9).By("user"), 0, true},
		{"burst only", sdk.GCRA("r", 10, 2*time.Hour, 4).By("user"), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.to
			r.Epoch = tc.epoch
			_, err := sdk.NewPolicy("p", []sdk.Rule{r}, sdk.WithChange("r", sdk.Change{From: from, At: at, Version: 2}))
			if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, sdk.ErrInvalidPolicy) {
				t.Errorf("NewPolicy(%s) = %v, want error %v (ErrInvalidPolicy)", tc.name, err, tc.wantErr)
			}
		})
	}
}

// TestCodeGCRARateChangeMemory: a policy built in code whose GCRA rule
// keeps its name and changes its rate, with no Change given (issue 38: 4
// used under 10 per 2h read as 2/10 under 5 per 2h, and 8 more passed).
// The memory backend records the interval its state was stored at and
// reads it at the new one: the 4 units carry, drained at the new rate
// from then on, so 6 more pass, as under either version.
func TestCodeGCRARateChangeMemory(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	alice := sdk.Subject{"user": "alice"}
	p1 := mustPolicy(t, "p", sdk.GCRA("r", 10, 2*time.Hour, 9).By("user"))
	for i := range 4 {
		if d, err := lim.Allow(ctx, p1, alice); err != nil || !d.Allowed {
			t.Fatalf("attempt %d under 10 per 2h = %+v, %v; want allowed", i+1, d, err)
		}
	}
	clock.Advance(time.Minute)
	p2 := mustPolicy(t, "p", sdk.GCRA("r", 5, 2*time.Hour, 9).By("user"))
	d, err := lim.Peek(ctx, p2, sdk.Attempt{Subject: alice, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Rules[0].Used; got != 4 {
		t.Errorf("Peek after 10 → 5 per 2h: used %d/%d, want 4 (the units held carry)", got, d.Rules[0].Limit)
	}
	admitted := 0
	for range 10 {
		d, err := lim.Allow(ctx, p2, alice)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 6 {
		t.Errorf("after 10 → 5 per 2h with 4 used: %d more admitted, want 6", admitted)
	}
	// At the new rate: the next unit one interval (24 min) after the bucket's
	// first free slot, not 12 min.
	clock.Advance(13 * time.Minute)
	if d, _ := lim.Allow(ctx, p2, alice); d.Allowed {
		t.Errorf("13 min later under 5 per 2h: allowed, want denied (one unit per 24 min)")
	}
	// Back to 10 per 2h, a faster rate: the old rate's debt is kept (as on
	// Redis, docs/MIGRATING.md): the TAT, 225 min ahead, admits when it is
	// one interval (12 min) inside the tolerance (120 min): 117 min on.
	if d, _ := lim.Allow(ctx, p1, alice); d.Allowed {
		t.Errorf("back to 10 per 2h with 225 min of debt: allowed, want denied")
	}
	clock.Advance(116 * time.Minute)
	if d, _ := lim.Allow(ctx, p1, alice); d.Allowed {
		t.Errorf("back to 10 per 2h, 116 min later: allowed, want denied (the old rate's debt)")
	}
	clock.Advance(time.Minute)
	if d, _ := lim.Allow(ctx, p1, alice); !d.Allowed {
		t.Errorf("back to 10 per 2h, 117 min later: denied, want allowed")
	}
}
