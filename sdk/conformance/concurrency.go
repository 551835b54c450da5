package conformance

import (
	"fmt"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// concurrency races 64 goroutines on one subject through one Limiter: the
// backend must admit exactly the limit, each admitted take seeing a
// distinct count. alg 0 races one policy with a rule of every algorithm.
func concurrency(alg driver.Algorithm) func(e *env) {
	return func(e *env) {
		const limit, workers, each = 20, 64, 4
		w := time.Hour
		e.ensureRoom(w, 30*time.Second)
		var rules []sdk.Rule
		switch alg {
		case driver.FixedWindow:
			rules = []sdk.Rule{e.fixed("r", limit, w)}
		case driver.SlidingWindow:
			rules = []sdk.Rule{e.sliding("r", limit, w, 10)}
		case driver.SlidingLog:
			rules = []sdk.Rule{e.log("r", limit, w)}
		case driver.GCRA:
			rules = []sdk.Rule{e.gcra("r", limit, w, limit-1)}
		default:
			rules = e.fourRules(limit, w)
		}
		p := e.policy(rules...)
		a := sdk.Attempt{Subject: e.subject()}
		var (
			mu      sync.Mutex
			admits  int
			seen    = map[int64]int{}
			errs    []error
			wg      sync.WaitGroup
			release = make(chan struct{})
		)
		for range workers {
			wg.Go(func() {
				<-release
				for range each {
					d, err := e.lim.Take(bg(), p, a)
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, err)
					case len(d.Rules) != len(rules):
						errs = append(errs, fmt.Errorf("%d rule decisions, want %d", len(d.Rules), len(rules)))
					case d.Allowed:
						admits++
						seen[d.Rules[0].Used]++
					}
					mu.Unlock()
				}
			})
		}
		close(release)
		wg.Wait()
		if len(errs) > 0 {
			e.t.Fatalf("Take(%s) from %d goroutines: %d errors, first %v", names(rules), workers, len(errs), errs[0])
		}
		if admits != limit {
			e.t.Errorf("Take(%s) from %d goroutines × %d = %d admitted, want exactly %d", names(rules), workers, each,
				admits, limit)
		}
		if alg != driver.GCRA {
			for u := int64(1); u <= limit; u++ {
				if seen[u] != 1 {
					e.t.Errorf("admitted takes reporting used %d = %d, want 1 (each admitted take sees a distinct count)",
						u, seen[u])
				}
			}
		}
		// The state after the race, by a take (every backend has one): it
		// is denied and reports the limit used.
		d := e.take(1, rules...)
		if d.Allowed {
			e.t.Errorf("Take(%s) after the race = allowed, want denied", names(rules))
		}
		for _, rr := range d.Rules {
			if rr.Used != limit {
				e.t.Errorf("Take(%s) after the race rule %s = %s, want used %d", names(rules), rr.Rule, fmtRule(rr), limit)
			}
		}
	}
}
