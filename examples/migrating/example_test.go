package migrating_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func Example() {
	// One rule per peer limiter; the peer's key is a dimension.
	api, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.GCRA("per-key", 10, time.Second, 9).By("key"), // redis_rate.PerSecond(10)
	})
	if err != nil {
		panic(err)
	}
	// A fixed clock for the example; sdk.New(memory.New(nil)) uses the
	// system clock, sdk.New(redis.New(rdb, nil)) the Redis server's.
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	d, err := lim.Allow(context.Background(), api, sdk.Subject{"key": "project:123"})
	if err != nil {
		panic(err) // no decision: invalid input, or the backend failed
	}
	fmt.Println("allowed", d.Allowed, "remaining", d.Rules[0].Remaining)
	// Output: allowed true remaining 9
}

func Example_costZero() {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.GCRA("per-key", 10, time.Second, 2).By("key")})
	if err != nil {
		panic(err)
	}
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	s := sdk.Subject{"key": "k1"}

	// Cost 0 means 1: each of these takes a unit, where a peer's
	// quantity 0 would only look.
	for i := 0; i < 3; i++ {
		d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: 0})
		if err != nil {
			panic(err)
		}
		fmt.Printf("Take, Cost 0: allowed=%-5v remaining=%d\n", d.Allowed, d.Rules[0].Remaining)
	}
	// Peek looks: it consumes nothing and answers for the attempt's cost
	// (0 means 1 here too): would one more unit be admitted?
	d, err := lim.Peek(ctx, p, sdk.Attempt{Subject: s})
	if err != nil {
		panic(err)
	}
	fmt.Printf("Peek:         allowed=%-5v remaining=%d retry after %v\n", d.Allowed, d.Rules[0].Remaining, d.RetryAfter)
	// Output:
	// Take, Cost 0: allowed=true  remaining=2
	// Take, Cost 0: allowed=true  remaining=1
	// Take, Cost 0: allowed=true  remaining=0
	// Peek:         allowed=false remaining=0 retry after 100ms
}

func Example_gcraBurst() {
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	// redis_rate.PerSecond(10) is Rate 10, Burst 10: 10 at once. freqcap's
	// burst comes on top of the first unit: burst 10 admits 11, burst 9
	// admits redis_rate's 10.
	for _, burst := range []int64{10, 9} {
		p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.GCRA("per-key", 10, time.Second, burst).By("key")})
		if err != nil {
			panic(err)
		}
		s := sdk.Subject{"key": fmt.Sprint("burst-", burst)}
		admitted := 0
		for {
			d, err := lim.Allow(ctx, p, s)
			if err != nil {
				panic(err)
			}
			if !d.Allowed {
				fmt.Printf("GCRA 10/s, burst %d: %d at once (Limit %d)\n", burst, admitted, d.Rules[0].Limit)
				break
			}
			admitted++
		}
	}
	// Output:
	// GCRA 10/s, burst 10: 11 at once (Limit 11)
	// GCRA 10/s, burst 9: 10 at once (Limit 10)
}

func Example_raisedRate() {
	slow, err := sdk.NewPolicy("api", []sdk.Rule{sdk.GCRA("per-key", 1, time.Minute, 0).By("key")})
	if err != nil {
		panic(err)
	}
	// The same rule name, algorithm and window, a higher limit: the same
	// keys, so the state (the theoretical arrival time) carries over.
	fast, err := sdk.NewPolicy("api", []sdk.Rule{sdk.GCRA("per-key", 60, time.Minute, 0).By("key")})
	if err != nil {
		panic(err)
	}
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	s := sdk.Subject{"key": "k1"}

	d, err := lim.Allow(ctx, slow, s)
	if err != nil {
		panic(err)
	}
	fmt.Printf("1/min:  allowed=%v\n", d.Allowed)
	if d, err = lim.Allow(ctx, fast, s); err != nil {
		panic(err)
	}
	fmt.Printf("60/min: allowed=%v retry after %v\n", d.Allowed, d.RetryAfter)
	start := clock.Now()
	if d, err = lim.Wait(ctx, fast, sdk.Attempt{Subject: s}); err != nil {
		panic(err)
	}
	fmt.Printf("60/min: Wait allowed=%v after %v\n", d.Allowed, clock.Now().Sub(start))
	if d, err = lim.Allow(ctx, fast, s); err != nil {
		panic(err)
	}
	fmt.Printf("60/min: allowed=%v retry after %v\n", d.Allowed, d.RetryAfter)
	// Output:
	// 1/min:  allowed=true
	// 60/min: allowed=false retry after 1m0s
	// 60/min: Wait allowed=true after 1m0s
	// 60/min: allowed=false retry after 1s
}

func Example_fixedWindow() {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 2, time.Minute).By("key")})
	if err != nil {
		panic(err)
	}
	// The first request comes at 08:00:50: its window is 08:00:00-08:01:00
	// (epoch-aligned), not 08:00:50-08:01:50.
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 50, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	s := sdk.Subject{"key": "k1"}
	for _, advance := range []time.Duration{0, 0, 0, 10 * time.Second, 0, 0} {
		clock.Advance(advance)
		d, err := lim.Allow(ctx, p, s)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s allowed=%-5v used=%d reset after %v\n",
			clock.Now().Format("15:04:05"), d.Allowed, d.Rules[0].Used, d.Rules[0].ResetAfter)
	}
	// Output:
	// 08:00:50 allowed=true  used=1 reset after 10s
	// 08:00:50 allowed=true  used=2 reset after 10s
	// 08:00:50 allowed=false used=2 reset after 10s
	// 08:01:00 allowed=true  used=1 reset after 1m0s
	// 08:01:00 allowed=true  used=2 reset after 1m0s
	// 08:01:00 allowed=false used=2 reset after 1m0s
}

func Example_denialsDoNotCount() {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 10, time.Minute).By("key")})
	if err != nil {
		panic(err)
	}
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	s := sdk.Subject{"key": "k1"}
	// The 6 do not fit beside the 5: denied, and nothing is counted, so
	// the next unit still fits. (ulule/limiter would count 11, then 12.)
	for _, cost := range []int64{5, 6, 1} {
		d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: cost})
		if err != nil {
			panic(err)
		}
		fmt.Printf("Take %d: allowed=%-5v used=%d/%d\n", cost, d.Allowed, d.Rules[0].Used, d.Rules[0].Limit)
	}
	// Output:
	// Take 5: allowed=true  used=5/10
	// Take 6: allowed=false used=5/10
	// Take 1: allowed=true  used=6/10
}
