package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

// "3 per calendar day, 10 per ISO week, 30 per month, in the person's own
// zone": calendar rules count in the local days, weeks and months of the
// zone each attempt carries (Attempt.Zone, loaded once by name with
// LoadZone); a rule's own zone (here UTC) serves attempts without one. A
// person whose zone changes keeps the day they were counted in until it
// ends: flying from Tokyo to Los Angeles does not start a new day early.
func ExampleDaily() {
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.Daily("daily", 3, time.UTC).By("user"),
		sdk.Weekly("weekly", 10, time.UTC).By("user"),
		sdk.Monthly("monthly", 30, time.UTC).By("user"),
	})
	if err != nil {
		panic(err)
	}
	clock := fixed() // 2025-03-01 08:00 UTC
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	tokyo, err := sdk.LoadZone("Asia/Tokyo")
	if err != nil {
		panic(err)
	}
	la, err := sdk.LoadZone("America/Los_Angeles")
	if err != nil {
		panic(err)
	}
	send := func(user string, zone *time.Location) {
		d, err := lim.Take(ctx, push, sdk.Attempt{Subject: sdk.Subject{"user": user}, Zone: zone})
		if err != nil {
			panic(err)
		}
		local := clock.Now().In(zone).Format("Mon 15:04")
		if d.Allowed {
			fmt.Printf("%s at %s %s: allowed, %d left today\n", user, local, zone, d.Rules[0].Remaining)
			return
		}
		fmt.Printf("%s at %s %s: denied by %v until %s local\n", user, local, zone, d.Denied, d.At.Add(d.RetryAfter).In(zone).Format("Mon 15:04"))
	}
	for range 4 {
		send("alice", tokyo)
	}
	send("bob", la)
	send("alice", la) // alice flew to Los Angeles: her Tokyo day still counts
	clock.Advance(7 * time.Hour)
	send("alice", la) // her Tokyo day is over: a Los Angeles day starts
	// Output:
	// alice at Sat 17:00 Asia/Tokyo: allowed, 2 left today
	// alice at Sat 17:00 Asia/Tokyo: allowed, 1 left today
	// alice at Sat 17:00 Asia/Tokyo: allowed, 0 left today
	// alice at Sat 17:00 Asia/Tokyo: denied by [daily] until Sun 00:00 local
	// bob at Sat 00:00 America/Los_Angeles: allowed, 2 left today
	// alice at Sat 00:00 America/Los_Angeles: denied by [daily] until Sat 07:00 local
	// alice at Sat 07:00 America/Los_Angeles: allowed, 2 left today
}
