package bench

import (
	goredis "github.com/redis/go-redis/v9"

	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// benchMemory flushes the target, takes cfg.MemoryTakes decisions for
// each of cfg.Subjects subjects (rotating the values of the other
// dimensions) and returns the used_memory growth per subject.
func benchMemory(ctx context.Context, c goredis.UniversalClient, cfg Config, lim *sdk.Limiter, p *sdk.Policy, gen *subjects) (float64, error) {
	if err := flushAll(ctx, c); err != nil {
		return 0, err
	}
	before, err := usedMemory(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("bench: INFO memory: %w", err)
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	deadline := time.Now().Add(10 * time.Minute)
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := next.Add(1) - 1
				if j >= int64(cfg.Subjects) || time.Now().After(deadline) {
					return
				}
				for k := range cfg.MemoryTakes {
					if _, err := lim.Allow(ctx, p, gen.subject(int(j), k)); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("bench: memory run: %w", firstErr)
	}
	after, err := usedMemory(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("bench: INFO memory: %w", err)
	}
	return float64(after-before) / float64(cfg.Subjects), nil
}

// flushAll sends a synchronous FLUSHALL to every master.
func flushAll(ctx context.Context, c goredis.UniversalClient) error {
	if err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		// A synchronous FLUSHALL of a large dataset outlasts the bench's
		// timeouts: send it on a client of its own with a long one.
		o := *n.Options()
		o.ReadTimeout, o.WriteTimeout = 5*time.Minute, 5*time.Minute
		fc := goredis.NewClient(&o)
		defer fc.Close()
		return fc.FlushAll(ctx).Err()
	}); err != nil {
		return fmt.Errorf("bench: FLUSHALL: %w", err)
	}
	return nil
}
