package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/sdk"
)

// durableRun returns the run of Config.WaitReplicas: the policy one by
// one through a backend of its own with redis.Options.Durability (each
// decision waits for WaitReplicas replicas, at most WaitTimeout), under
// prefix, and the tally of its admissions that said Durable.
func durableRun(ctx context.Context, client goredis.UniversalClient, bopts *redis.Options, cfg Config, p *sdk.Policy, gen *subjects, prefix string) (string, decideFunc, *durableTally, error) {
	o := *bopts
	o.Durability = redis.Durability{Replicas: cfg.WaitReplicas, Timeout: cfg.WaitTimeout}
	be := redis.New(client, &o)
	if _, err := be.Capabilities(ctx); err != nil { // detection, before the measured runs
		return "", nil, nil, fmt.Errorf("bench: %w", err)
	}
	lim := sdk.New(be, sdk.WithPrefix(prefix))
	t := &durableTally{replicas: cfg.WaitReplicas}
	d := func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		dec, err := lim.Allow(ctx, p, gen.pick(rng))
		o.add(err, dec.Allowed, dec.Cached)
		if err == nil && dec.Allowed {
			t.allowed.Add(1)
			if dec.Durable {
				t.durable.Add(1)
			}
		}
		return o
	}
	name := fmt.Sprintf("policy %s, waiting for %d replica(s) (WAIT)", p.Name(), cfg.WaitReplicas)
	return name, d, t, nil
}

// durableTally counts a durable run's admissions and those that said
// Durable (warm-up included).
type durableTally struct {
	replicas         int
	allowed, durable atomic.Int64
}

func (t *durableTally) String() string {
	return fmt.Sprintf("durability: %d of %d admissions said Durable (acknowledged by %d replica(s) in time)", t.durable.Load(), t.allowed.Load(), t.replicas)
}
