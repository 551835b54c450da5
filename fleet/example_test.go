package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// A service records its decisions; any process on the same storage (here
// the same memory backend) reads them. FlushEvery -1 starts no goroutine:
// the example flushes by hand.
func ExampleRecorder() {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	backend := memory.New(&memory.Options{Clock: clock}) // the Limiters and the recorder read it too
	rec, err := fleet.NewRecorder(backend, &fleet.Options{FlushEvery: -1})
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	lim := sdk.New(backend, sdk.WithObserver(rec.Observe))
	push, _ := sdk.NewPolicy("push", []sdk.Rule{sdk.SlidingWindow("recv-1m", 3, time.Minute).By("user")})

	ctx := context.Background()
	for range 5 {
		lim.Allow(ctx, push, sdk.Subject{"user": "u42"})
	}
	if err := rec.Flush(ctx); err != nil {
		panic(err)
	}

	console, _ := fleet.NewReader(backend, nil) // another process
	st, _ := console.Stats(ctx, push, time.Hour)
	fmt.Printf("last hour: %d allowed, %d denied\n", st.Allowed, st.Denied)
	for _, r := range st.Rules {
		fmt.Printf("%s: %d allowed, %d denied, %d near the limit\n", r.Rule, r.Allowed, r.Denied, r.NearLimit)
	}
	for _, d := range st.TopDenied {
		fmt.Printf("most denied: %v (%d)\n", d.Subject(push), d.Count)
	}
	// Output:
	// last hour: 3 allowed, 2 denied
	// recv-1m: 3 allowed, 2 denied, 1 near the limit
	// most denied: map[user:u42] (2)
}

// A team tries 3 a day beside the enforced 5 a day: the shadow rule
// never denies, and the reader tells what it would have denied, against
// what the enforced rule denied.
func ExampleReader_Shadow() {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	backend := memory.New(&memory.Options{Clock: clock})
	rec, err := fleet.NewRecorder(backend, &fleet.Options{FlushEvery: -1})
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	lim := sdk.New(backend, sdk.WithObserver(rec.Observe))
	push, _ := sdk.NewPolicy("push", []sdk.Rule{
		sdk.FixedWindow("daily", 5, 24*time.Hour).By("user"),
		sdk.FixedWindow("daily-trial", 3, 24*time.Hour).By("user").AsShadow(),
	})

	ctx := context.Background()
	for i := range 3 { // u0 sends 4 pushes, u1 5, u2 6
		for range 4 + i {
			lim.Allow(ctx, push, sdk.Subject{"user": fmt.Sprint("u", i)})
		}
	}
	if err := rec.Flush(ctx); err != nil {
		panic(err)
	}

	console, _ := fleet.NewReader(backend, nil)
	sh, _ := console.Shadow(ctx, push, 24*time.Hour)
	for _, r := range sh.Rules {
		fmt.Printf("%s would have denied %d attempts (%d of them allowed) of %d people\n", r.Rule, r.Attempts, r.Allowed, r.People)
	}
	for _, r := range sh.Enforced {
		fmt.Printf("%s denied %d attempts of %d people\n", r.Rule, r.Attempts, r.People)
	}
	// Output:
	// daily-trial would have denied 6 attempts (5 of them allowed) of 3 people
	// daily denied 1 attempts of 1 people
}
