package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// withOverrides returns policy again, reading overrides
// (sdk.WithOverrides): its rules, its trail, its hot-deny cache.
func withOverrides(policy *sdk.Policy) (*sdk.Policy, error) {
	opts := []sdk.PolicyOption{sdk.WithOverrides()}
	if m, ttl := policy.Trail(); m > 0 {
		opts = append(opts, sdk.WithTrail(m, ttl))
	}
	if n := policy.HotDenyCache(); n > 0 {
		opts = append(opts, sdk.WithHotDenyCache(n))
	}
	if policy.FailOpen() {
		opts = append(opts, sdk.WithFailOpen())
	}
	p, err := sdk.NewPolicy(policy.Name(), policy.Rules(), opts...)
	if err != nil {
		return nil, fmt.Errorf("bench: overrides: %w", err)
	}
	return p, nil
}

// setLimitOverrides gives every subject of gen one Limit override under
// lim: the policy's first rule's own limit, so that decisions stay those
// of the run without overrides while each one reads and applies an
// override. It sets them with workers concurrent callers.
func setLimitOverrides(ctx context.Context, lim *sdk.Limiter, p *sdk.Policy, gen *subjects, n, workers int) error {
	r := p.Rules()[0]
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := int(next.Add(1) - 1); j < n; j = int(next.Add(1) - 1) {
				o := driver.Override{Kind: driver.Limit, Limits: map[string]int64{r.Name: r.Limit}, Reason: "bench", By: "bench"}
				if _, err := lim.Admin().SetOverride(ctx, p, gen.subject(j, 0), o); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("bench: set overrides: %w", first)
	}
	return nil
}
