package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

func bg() context.Context { return context.Background() }

// concurrency races 64 goroutines on one subject: the backend must admit
// exactly the limit, each admitted take seeing a distinct count. alg 0
// races one request naming a rule of every algorithm.
func concurrency(alg driver.Algorithm) func(e *env) {
	return func(e *env) {
		const limit, workers, each = 20, 64, 4
		w := time.Hour
		e.ensureRoom(w, 30*time.Second)
		var rules []driver.Rule
		switch alg {
		case driver.FixedWindow:
			rules = []driver.Rule{e.fixed("r", limit, w)}
		case driver.SlidingWindow:
			rules = []driver.Rule{e.sliding("r", limit, w, 10)}
		case driver.SlidingLog:
			rules = []driver.Rule{e.log("r", limit, w)}
		case driver.GCRA:
			rules = []driver.Rule{e.gcra("r", limit, w, limit-1)}
		default:
			rules = e.fourRules(limit, w)
		}
		req := e.request(driver.OpTake, 1, rules...)
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
					res, err := e.b.Take(bg(), req)
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, err)
					case len(res.Rules) != len(rules):
						errs = append(errs, fmt.Errorf("%d rule results, want %d", len(res.Rules), len(rules)))
					case res.Allowed:
						admits++
						seen[res.Rules[0].Used]++
					}
					mu.Unlock()
				}
			})
		}
		close(release)
		wg.Wait()
		if len(errs) > 0 {
			e.t.Fatalf("Take(%s) from %d goroutines: %d errors, first %v", opName(req), workers, len(errs), errs[0])
		}
		if admits != limit {
			e.t.Errorf("Take(%s) from %d goroutines × %d = %d admitted, want exactly %d", opName(req), workers, each,
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
		res := e.peek(1, rules...)
		for i, rr := range res.Rules {
			if rr.Used != limit {
				e.t.Errorf("Peek(%s) after the race rule %d = %s, want used %d", opName(req), i, fmtRule(rr), limit)
			}
		}
	}
}
