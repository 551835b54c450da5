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
