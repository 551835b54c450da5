package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// fixed returns the examples' clock: a fake one reading a set instant
// (it moves only when told to), so the output is deterministic.
func fixed() *fakeclock.Clock { return fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)) }

func ExampleLimiter_Allow() {
	replies, err := sdk.NewPolicy("replies", []sdk.Rule{
		sdk.SlidingWindow("per-minute", 3, time.Minute).By("user"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fixed()}))
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := lim.Allow(ctx, replies, sdk.Subject{"user": "alice"})
		if err != nil {
			panic(err) // the backend could not decide
		}
		fmt.Printf("reply %d: allowed=%v remaining=%d\n", i, d.Allowed, d.Rules[0].Remaining)
	}
	// Output:
	// reply 1: allowed=true remaining=2
	// reply 2: allowed=true remaining=1
	// reply 3: allowed=true remaining=0
	// reply 4: allowed=false remaining=0
}

// A policy checks all its rules at once; a denial names every rule that
// denied and consumes nothing from the others. (The retry is 59s, the
// window: sliding windows whose limit is at most driver.LogLine are exact
// logs, and the first send leaves 59s after it.)
func ExampleLimiter_Allow_multiRule() {
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("user", "content"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fixed()}))
	ctx := context.Background()
	msg := sdk.Subject{"user": "u42", "content": sdk.Fingerprint("Your parcel has arrived")}
	for i := 1; i <= 3; i++ {
		d, err := lim.Allow(ctx, push, msg)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("send %d: allowed\n", i)
			continue
		}
		fmt.Printf("send %d: denied by %s, retry after %v\n", i, strings.Join(d.Denied, ", "), d.RetryAfter)
		for _, r := range d.Rules {
			fmt.Printf("  %-11s %d/%d allowed=%v\n", r.Rule, r.Used, r.Limit, r.Allowed)
		}
	}
	// Output:
	// send 1: allowed
	// send 2: allowed
	// send 3: denied by content-59s, retry after 59s
	//   recv-1m     2/15 allowed=true
	//   recv-24h    2/50 allowed=true
	//   content-59s 2/2 allowed=false
	//   content-59m 2/5 allowed=true
}

// Reserve checks and consumes now; Commit keeps the units, Cancel gives
// them back.
func ExampleLimiter_Reserve() {
	ads, err := sdk.NewPolicy("ads", []sdk.Rule{
		sdk.Daily("impressions", 3, time.UTC).By("user", "campaign"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fixed()}))
	ctx := context.Background()
	s := sdk.Subject{"user": "u42", "campaign": "spring-sale"}

	// Candidate selection: hold one impression for a minute.
	d, res, err := lim.Reserve(ctx, ads, sdk.Attempt{Subject: s}, time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("reserved:", d.Allowed, "used:", d.Rules[0].Used)
	if err := res.Cancel(ctx); err != nil { // the ad was not shown
		panic(err)
	}
	d, _ = lim.Peek(ctx, ads, sdk.Attempt{Subject: s})
	fmt.Println("after cancel, used:", d.Rules[0].Used)

	d, res, _ = lim.Reserve(ctx, ads, sdk.Attempt{Subject: s}, time.Minute)
	if err := res.Commit(ctx); err != nil { // the ad was shown
		panic(err)
	}
	d, _ = lim.Peek(ctx, ads, sdk.Attempt{Subject: s})
	fmt.Println("after commit, used:", d.Rules[0].Used)
	// Output:
	// reserved: true used: 1
	// after cancel, used: 0
	// after commit, used: 1
}

// KeyLayout shows where a subject's state lives (one Redis hash tag per
// subject, so one decision touches one cluster slot): the rules by set of
// dimensions, each set's key (where the Redis backend keeps its rules)
// and each rule's own (where the memory backend keeps it).
func ExampleAdmin_KeyLayout() {
	push, _ := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
	})
	lim := sdk.New(memory.New(nil))
	l := lim.Admin().KeyLayout(push, sdk.Subject{"user": "u:42", "content": "c1"})
	for _, set := range l.Sets {
		fmt.Println("set", set.Dimensions, set.Key)
		for _, r := range set.Rules {
			fmt.Println("  rule", r.Rule, r.Key)
		}
	}
	fmt.Println("trail", l.Trail)
	fmt.Println("reservations", l.Reservations)
	// Output:
	// set [user] fc:{u%3A42}:push:=
	//   rule recv-1m fc:{u%3A42}:push:recv-1m.w26372
	// set [content user] fc:{u%3A42}:push:=content:c1
	//   rule content-59s fc:{u%3A42}:push:content-59s.gh4q2k:c1
	// trail fc:{u%3A42}:push:!t
	// reservations fc:{u%3A42}:push:!h
}

// TakeBatch decides a campaign's recipients in one backend call; each
// recipient is decided on its own, and answered in input order. The
// idempotency keys make the retry after a timeout safe: it gets the first
// decisions back and consumes nothing more.
func ExampleLimiter_TakeBatch() {
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.Daily("campaigns", 2, time.UTC).By("user"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fixed()}))
	ctx := context.Background()
	_, _ = lim.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": "bob"}, Cost: 2}) // bob had his two today

	var batch []sdk.Attempt
	for _, u := range []string{"alice", "bob", "", "carol"} {
		batch = append(batch, sdk.Attempt{Subject: sdk.Subject{"user": u}, IdempotencyKey: "spring-sale"})
	}
	for try := 1; try <= 2; try++ {
		fmt.Println("try", try)
		for i, r := range lim.TakeBatch(ctx, push, batch) {
			switch {
			case r.Err != nil:
				fmt.Printf("  %d: error: %v\n", i, r.Err)
			default:
				fmt.Printf("  %d: allowed=%v used=%d replayed=%v\n", i, r.Decision.Allowed, r.Decision.Rules[0].Used, r.Decision.Replayed)
			}
		}
	}
	// Output:
	// try 1
	//   0: allowed=true used=1 replayed=false
	//   1: allowed=false used=2 replayed=false
	//   2: error: sdk: take batch: invalid subject: dimension "user" is empty
	//   3: allowed=true used=1 replayed=false
	// try 2
	//   0: allowed=true used=1 replayed=true
	//   1: allowed=false used=2 replayed=true
	//   2: error: sdk: take batch: invalid subject: dimension "user" is empty
	//   3: allowed=true used=1 replayed=true
}
