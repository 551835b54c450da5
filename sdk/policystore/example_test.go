package policystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policystore"
)

func ExampleStore() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: clock})
	lim := sdk.New(b)
	store := policystore.New(b, policystore.WithClock(clock))

	apply := func(src string) {
		plan, err := store.Plan(ctx, []byte(src))
		if err != nil {
			panic(err)
		}
		fmt.Print(plan)
		v, err := store.Apply(ctx, plan, "alice", "example")
		if err != nil {
			panic(err)
		}
		fmt.Printf("applied version %d\n", v.Number)
	}
	apply(`
policies:
  - name: push
    rules:
      - {name: daily, algorithm: fixed_window, limit: 50, window: 24h, by: [user]}
`)
	// Try 40 per day beside the enforced 50, and move the 50 to a
	// sliding log: its counts carry conservatively.
	apply(`
policies:
  - name: push
    rules:
      - {name: daily, algorithm: sliding_log, limit: 50, window: 24h, by: [user]}
      - {name: daily-40, algorithm: sliding_log, limit: 40, window: 24h, by: [user], shadow: true}
`)

	live, err := store.Watch(ctx, policystore.WatchOptions{})
	if err != nil {
		panic(err)
	}
	defer live.Close()
	snap := live.Current() // one version per decision
	d, err := lim.Allow(ctx, snap.Policy("push"), sdk.Subject{"user": "u1"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("version %d: allowed %v\n", snap.Version, d.Allowed)
	// Output:
	// plan: version 1 (the store is empty)
	// policy push: added
	//   rule daily: added: fixed_window 50 per 24h0m0s by [user]; starts afresh, or from the counts of the same rule run from a policy file (epoch 0)
	// applied version 1
	// plan: version 2 (against version 1)
	// policy push: modified
	//   rule daily: identity changed: algorithm fixed_window → sliding_log; carries conservatively: starts under epoch 2 from the old rule's count at each person's first attempt after the apply; the old rule stays enforced for 24h0m0s after the apply
	//   rule daily-40: added: sliding_log 40 per 24h0m0s by [user] shadow epoch 2; starts afresh
	// applied version 2
	// version 2: allowed true
}
