package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	fqclient "github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// serveCoalesce is the coalescing of the server the runs through serve
// use: cfg.Coalesce, or freqcap serve's default, 4.
func serveCoalesce(cfg Config) int {
	if cfg.Coalesce > 0 {
		return cfg.Coalesce
	}
	return 4
}

// startServe starts a freqcap serve on a loopback port over its own
// backend on c (bopts plus coalescing) with key prefix prefix, serving p
// (no credentials: loopback only). It returns its URL and a stop func.
func startServe(ctx context.Context, c goredis.UniversalClient, bopts *redis.Options, cfg Config, prefix string, p *sdk.Policy) (string, func(), error) {
	o := *bopts
	o.Coalesce = serveCoalesce(cfg)
	be := redis.New(c, &o)
	if _, err := be.Capabilities(ctx); err != nil { // detection, before the measured runs
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	return startServeOn(sdk.New(be, sdk.WithPrefix(prefix)), cfg, p)
}

// startServeOn starts a freqcap serve on a loopback port deciding with
// lim, serving p.
func startServeOn(lim *sdk.Limiter, cfg Config, p *sdk.Policy) (string, func(), error) {
	srv, err := serve.New(serve.Config{
		Limiter:  lim,
		Policies: []*sdk.Policy{p},
		MaxBatch: max(serve.DefaultMaxBatch, cfg.Batch),
		Timeout:  cfg.Timeout + time.Second,
	})
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("bench: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// peekOne peeks at one random subject per call: on the memory backend,
// where no subject has been taken, a lookup that finds nothing. Through
// serve it is the RPC layer's own cost per call (serve's floor).
func peekOne(c *fqclient.Client, p *sdk.Policy, gen *subjects) decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		d, err := c.Peek(ctx, p, sdk.Attempt{Subject: gen.pick(rng)})
		o.add(err, d.Allowed, d.Cached)
		return o
	}
}

// noRetry is the bench's client retry setting: the in-process runs carry
// no idempotency key, so the runs through serve carry none either (the
// client's default, client.DefaultRetry, gives each take one: a
// different decision path, costed in docs/serve/retries.md) and ratios compare
// the same decisions.
var noRetry = &fqclient.Retry{Tries: 1}

// oneRPC is the client coalescing of the runs through serve that send
// one RPC per call: serve's floor (the RPC layer's cost per call), and
// the policy's run without client coalescing.
var oneRPC = &fqclient.Coalesce{Off: true}
