package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// A rule's window changes from a fixed hour to a sliding two hours. The
// user capped before the change stays capped: the former rule is still
// enforced (Before names the version that changed it) and the new one
// starts from the units it counted.
func ExampleWithChange() {
	clock := fixed()
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	alice := sdk.Subject{"user": "alice"}

	v1 := sdk.FixedWindow("sends", 3, time.Hour).By("user")
	p1, err := sdk.NewPolicy("push", []sdk.Rule{v1})
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := lim.Allow(ctx, p1, alice); err != nil {
			panic(err)
		}
	}

	v2 := sdk.SlidingWindow("sends", 3, 2*time.Hour).By("user")
	v2.Epoch = 2 // the store version that gave the rule its new identity
	p2, err := sdk.NewPolicy("push", []sdk.Rule{v2},
		sdk.WithChange("sends", sdk.Change{From: v1, At: clock.Now(), Version: 2}))
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(ctx, p2, alice)
	if err != nil {
		panic(err)
	}
	for _, r := range d.Rules {
		fmt.Printf("%s (before version %d): allowed=%v used=%d/%d\n", r.Rule, r.Before, r.Allowed, r.Used, r.Limit)
	}
	fmt.Println("allowed:", d.Allowed, "denied by:", d.Denied)
	// Output:
	// sends (before version 2): allowed=false used=3/3
	// sends (before version 0): allowed=false used=3/3
	// allowed: false denied by: [sends]
}

// A shadow rule tries a stricter cap beside the enforced one: it never
// denies, and ShadowDenied says what it would have denied.
func ExampleRule_AsShadow() {
	lim := sdk.New(memory.New(&memory.Options{Clock: fixed()}))
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.FixedWindow("sends", 5, time.Hour).By("user"),
		sdk.FixedWindow("sends-trial", 2, time.Hour).By("user").AsShadow(),
	})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		d, err := lim.Allow(context.Background(), p, sdk.Subject{"user": "bob"})
		if err != nil {
			panic(err)
		}
		fmt.Printf("send %d: allowed=%v shadow denied=%v\n", i, d.Allowed, d.ShadowDenied)
	}
	// Output:
	// send 1: allowed=true shadow denied=[]
	// send 2: allowed=true shadow denied=[]
	// send 3: allowed=true shadow denied=[sends-trial]
}

// Per-person overrides: a block until a time, with a reason, decided in
// the same step as the rules.
func ExampleAdmin_SetOverride() {
	clock := fixed()
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	p, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("sends", 5, time.Hour).By("user")}, sdk.WithOverrides())
	if err != nil {
		panic(err)
	}
	carol := sdk.Subject{"user": "carol"}
	o, err := lim.Admin().SetOverride(ctx, p, carol, driver.Override{
		Kind: driver.Block, Until: clock.Now().Add(30 * time.Minute), Reason: "spam reports", By: "support",
	})
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(ctx, p, carol)
	if err != nil {
		panic(err)
	}
	fmt.Printf("allowed=%v, %v by override #%d, retry after %v\n", d.Allowed, d.Override.Kind, o.ID, d.RetryAfter)
	// Output:
	// allowed=false, block by override #1, retry after 30m0s
}
