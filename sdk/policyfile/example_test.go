package policyfile_test

import (
	"fmt"
	"strings"

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
