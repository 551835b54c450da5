// Command quickstart is the README's quick start: one policy of the four
// seed caps on the embedded memory backend.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
)

func main() {
	push, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user"),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.SlidingWindow("content-59m", 5, 59*time.Minute).By("user", "content"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(nil))
	d, err := lim.Allow(context.Background(), push, sdk.Subject{
		"user":    "18829340001",
		"content": sdk.Fingerprint("Your parcel is on its way"),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Allowed, d.Rules[0].Remaining) // true 14
}
