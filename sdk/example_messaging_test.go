package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

// A push sender with one-time passwords, alerts and promotions: 5 per
// calendar day in the recipient's zone, promotions stopping at 3 so that
// alerts keep room (headroom for priority 1), no sends from 21:00 to
// 08:00 where the recipient lives, except one-time passwords, which are
// never blocked but still count. A denial says when the same send would
// be allowed (NextEligible): the sender defers instead of dropping.
func ExampleWithClass() {
	berlin, err := sdk.LoadZone("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.Daily("daily", 5, berlin).By("user").WithHeadroom(2, 1),
	},
		sdk.WithQuietHours(berlin, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}),
		sdk.WithClass(sdk.Class{Name: "otp", AllRules: true, Counted: true, QuietHours: true}),
	)
	if err != nil {
		panic(err)
	}
	clock := fixed() // 2025-03-01 08:00 UTC: 09:00 in Berlin
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	send := func(what string, a sdk.Attempt) {
		a.Subject = sdk.Subject{"user": "alice"}
		d, err := lim.Take(ctx, push, a)
		if err != nil {
			panic(err)
		}
		at := clock.Now().In(berlin).Format("15:04")
		switch {
		case d.Allowed && len(d.Exempted) > 0:
			fmt.Printf("%s %s: allowed, exempt from %v (%d of 5 used)\n", at, what, d.Exempted, d.Rules[0].Used)
		case d.Allowed:
			fmt.Printf("%s %s: allowed (%d of 5 used)\n", at, what, d.Rules[0].Used)
		case !d.Quiet.IsZero():
			fmt.Printf("%s %s: quiet hours, next at %s\n", at, what, d.NextEligible.In(berlin).Format("Mon 15:04"))
		case d.Headroom:
			fmt.Printf("%s %s: kept for alerts, next at %s\n", at, what, d.NextEligible.In(berlin).Format("Mon 15:04"))
		default:
			fmt.Printf("%s %s: denied by %v, next at %s\n", at, what, d.Denied, d.NextEligible.In(berlin).Format("Mon 15:04"))
		}
	}
	for range 4 {
		send("promotion", sdk.Attempt{})
	}
	send("alert", sdk.Attempt{Priority: 1})
	send("otp", sdk.Attempt{Class: "otp"})
	send("alert", sdk.Attempt{Priority: 1})
	clock.Advance(13 * time.Hour) // 22:00 in Berlin
	send("otp", sdk.Attempt{Class: "otp"})
	send("alert", sdk.Attempt{Priority: 1})
	// Output:
	// 09:00 promotion: allowed (1 of 5 used)
	// 09:00 promotion: allowed (2 of 5 used)
	// 09:00 promotion: allowed (3 of 5 used)
	// 09:00 promotion: kept for alerts, next at Sun 08:00
	// 09:00 alert: allowed (4 of 5 used)
	// 09:00 otp: allowed, exempt from [daily] (5 of 5 used)
	// 09:00 alert: denied by [daily], next at Sun 08:00
	// 22:00 otp: allowed, exempt from [daily] (6 of 5 used)
	// 22:00 alert: quiet hours, next at Sun 08:00
}
