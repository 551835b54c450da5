package memory

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestExemptSaturates: a counted exempt counts past the limit, and Used
// saturates at driver.MaxUsed (never wraps, never negative); a GCRA
// rule's Used stays Burst+1 and its TAT at most driver.MaxDebt ahead
// (the product cost*T, 2^50 × an hour, no longer overflows).
func TestExemptSaturates(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule driver.Rule
	}{
		{"fixed", driver.Rule{Algorithm: driver.FixedWindow, Limit: 10, Window: time.Hour}},
		{"sliding", driver.Rule{Algorithm: driver.SlidingWindow, Limit: 1000, Window: time.Hour, SubWindows: 4}},
		{"sliding-as-log", driver.Rule{Algorithm: driver.SlidingWindow, Limit: 10, Window: time.Hour}},
		{"log", driver.Rule{Algorithm: driver.SlidingLog, Limit: 10, Window: time.Hour}},
		{"gcra", driver.Rule{Algorithm: driver.GCRA, Limit: 10, Window: time.Hour, Burst: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			b := New(&Options{Clock: clock})
			ctx := context.Background()
			const ovKey = "{u}:p:!o"
			if _, err := b.SetOverride(ctx, ovKey, driver.Override{Kind: driver.Exempt, Counted: true}); err != nil {
				t.Fatal(err)
			}
			r := tc.rule
			r.Name, r.Key = "r", "{u}:p:r.x"
			req := driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: driver.MaxLimit - 1, OverrideKey: ovKey}
			var sent int64
			for k := range 8 { // 8 × (2^50-1) > 2^52: saturated from the 5th
				res, err := b.Take(ctx, req)
				if err != nil || !res.Allowed {
					t.Fatalf("take %d = %+v, %v, want allowed by the exempt", k+1, res, err)
				}
				sent += req.Cost
				got := res.Rules[0]
				want := min(sent, driver.MaxUsed)
				if r.Algorithm == driver.GCRA {
					want = r.Burst + 1
				}
				if got.Used != want || got.Remaining != 0 {
					t.Fatalf("take %d: Used %d Remaining %d, want %d and 0", k+1, got.Used, got.Remaining, want)
				}
				if r.Algorithm == driver.GCRA && (got.ResetAfter <= 0 || got.ResetAfter > driver.MaxDebt) {
					t.Fatalf("take %d: ResetAfter %v, want in (0, MaxDebt = %v]", k+1, got.ResetAfter, driver.MaxDebt)
				}
				clock.Advance(time.Millisecond)
			}
			res, err := b.Peek(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Algorithm == driver.GCRA {
				if ra := res.Rules[0].ResetAfter; ra != driver.MaxDebt-time.Millisecond {
					t.Errorf("Peek: ResetAfter %v, want MaxDebt less the 1ms since = %v", ra, driver.MaxDebt-time.Millisecond)
				}
			} else if u := res.Rules[0].Used; u != driver.MaxUsed {
				t.Errorf("Peek: Used %d, want MaxUsed %d", u, driver.MaxUsed)
			}
		})
	}
}

// TestExemptSaturatedReservation: a reservation under a counted exempt
// that took only what MaxUsed left gives back only that.
func TestExemptSaturatedReservation(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	ctx := context.Background()
	const ovKey = "{u}:p:!o"
	if _, err := b.SetOverride(ctx, ovKey, driver.Override{Kind: driver.Exempt, Counted: true}); err != nil {
		t.Fatal(err)
	}
	r := driver.Rule{Name: "r", Key: "{u}:p:r.x", Algorithm: driver.FixedWindow, Limit: 10, Window: time.Hour}
	req := driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: driver.MaxLimit, OverrideKey: ovKey, ReservationKey: "{u}:p:!h"}
	for range 3 {
		if _, err := b.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	req.Cost = driver.MaxLimit - 5 // 3 × 2^50: then 2^50-5 more leaves 5 to MaxUsed
	if _, err := b.Take(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Cost, req.ReservationID, req.ReservationTTL = 1000, "res-1", time.Minute
	res, err := b.Reserve(ctx, req)
	if err != nil || res.Rules[0].Used != driver.MaxUsed {
		t.Fatalf("Reserve = %+v, %v, want Used MaxUsed", res, err)
	}
	if err := b.Cancel(ctx, req.ReservationKey, "res-1"); err != nil {
		t.Fatal(err)
	}
	res, err = b.Peek(ctx, req)
	if want := int64(driver.MaxUsed - 5); err != nil || res.Rules[0].Used != want {
		t.Errorf("Peek after Cancel = %+v, %v, want Used %d (the 5 units the reservation took, given back)", res, err, want)
	}
}
