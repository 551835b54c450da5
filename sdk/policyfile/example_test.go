package policyfile_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

func ExampleLoad() {
	const file = `
policies:
  - name: push
    failure: open
    rules:
      - {name: recv-1m, algorithm: sliding_window, limit: 15, window: 1m, by: [user]}
      - {name: content-59s, algorithm: sliding_window, limit: 2, window: 59s, by: [user, content]}
  - name: api
    rules:
      - {name: burst, algorithm: gcra, limit: 30, window: 60s, burst: 14, by: [user]}
      - {name: daily, algorithm: fixed_window, calendar: day, timezone: UTC, limit: 1000, by: [user]}
`
	policies, err := policyfile.Load(strings.NewReader(file))
	if err != nil {
		panic(err)
	}
	for _, p := range policies {
		fmt.Printf("%s (fail-open %v, shard by %v)\n", p.Name(), p.FailOpen(), p.ShardBy())
		for _, r := range p.Rules() {
			fmt.Printf("  %s: %v %d per %v by %v\n", r.Name, r.Algorithm, r.Limit, r.Window, r.Dimensions)
		}
	}

	_, err = policyfile.Load(strings.NewReader("policies:\n  - name: p\n    rules:\n      - {name: a, algorithm: gcra, limit: 5, windw: 1m}\n"))
	fmt.Println(err)
	// Output:
	// push (fail-open true, shard by [user])
	//   recv-1m: sliding_window 15 per 1m0s by [user]
	//   content-59s: sliding_window 2 per 59s by [user content]
	// api (fail-open false, shard by [user])
	//   burst: gcra 30 per 1m0s by [user]
	//   daily: fixed_window 1000 per 24h0m0s by [user]
	// policyfile: policies: line 4: invalid policy: unknown key "windw"
}

func ExampleStore() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	store := policyfile.NewStore(lim, policyfile.WithClock(clock))

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

	live, err := store.Watch(ctx, policyfile.WatchOptions{})
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
