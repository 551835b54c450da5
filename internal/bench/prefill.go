package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// prefillStats is what a pre-fill did.
type prefillStats struct {
	takes, allowed int64
	elapsed        time.Duration
}

// checkPrefill returns an error unless p has a dimension outside its
// shard dimensions: the one whose values a pre-fill makes live.
func checkPrefill(p *sdk.Policy) error {
	if len(newSubjects(p, 1, 1).other) == 0 {
		return fmt.Errorf("bench: -prefill: policy %q has no dimension outside its shard dimensions (%v) whose values to pre-fill", p.Name(), p.ShardBy())
	}
	return nil
}

// prefill takes once, through lim, for each of subjects subjects and each
// k < values: subject j with the k-th value of each other dimension
// (gen.subject(j, k)), so that every subject has values live values, the
// ones the measured decisions pick among (gen.pick). workers goroutines
// share the subjects; each subject's takes are made in order by one of
// them. It returns at the first error.
func prefill(ctx context.Context, lim *sdk.Limiter, p *sdk.Policy, gen *subjects, subjects, values, workers int) (prefillStats, error) {
	var (
		next, allowed, takes atomic.Int64
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		firstErr             error
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := next.Add(1) - 1
				if j >= int64(subjects) || ctx.Err() != nil {
					return
				}
				for k := range values {
					d, err := lim.Allow(ctx, p, gen.subject(int(j), k))
					if err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						next.Store(int64(subjects)) // stop the others
						return
					}
					takes.Add(1)
					if d.Allowed {
						allowed.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	st := prefillStats{takes: takes.Load(), allowed: allowed.Load(), elapsed: time.Since(start)}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return st, fmt.Errorf("bench: pre-fill: %w", firstErr)
	}
	return st, nil
}
