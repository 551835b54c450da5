package whatif_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// A service runs 50 a day per user and records its traffic (here every
// subject: Sample 1; by default 1 in 16); before applying 40 a day, the
// console asks what 40 would have denied.
func ExampleEstimate() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	backend := memory.New(&memory.Options{Clock: clock})
	rec, _ := fleet.NewRecorder(backend, &fleet.Options{FlushEvery: -1, Sample: 1})
	lim := sdk.New(backend, sdk.WithObserver(rec.Observe))
	current, _ := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("daily", 50, 24*time.Hour).By("user")})
	proposed, _ := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("daily", 40, 24*time.Hour).By("user")})

	for i := range 3 { // u0 sends 45 pushes, u1 55, u2 65
		for range 45 + 10*i {
			clock.Advance(10 * time.Second)
			lim.Allow(ctx, current, sdk.Subject{"user": fmt.Sprint("u", i)})
		}
	}
	rec.Flush(ctx)

	reader, _ := fleet.NewReader(backend, nil)
	rep, err := whatif.Estimate(ctx, reader, []*sdk.Policy{current}, []*sdk.Policy{proposed}, 24*time.Hour)
	if err != nil {
		panic(err)
	}
	w := rep.Policies[0].Windows[0]
	fmt.Printf("last %v: %v attempts by %v people\n", w.Window, w.Attempts, w.People)
	fmt.Printf("current denies %v attempts of %v people\n", w.Current.Denied, w.Current.People)
	fmt.Printf("proposed would deny %v attempts of %v people\n", w.Proposed.Denied, w.Proposed.People)
	// Output:
	// last 24h0m0s: 165 attempts by 3 people
	// current denies 20 attempts of 2 people
	// proposed would deny 45 attempts of 3 people
}
