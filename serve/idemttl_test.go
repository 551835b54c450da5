package serve_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// TestGeneratedKeyTTL: through serve on Redis, the idempotency record of
// a key the client generated lives the call's retry window plus
// client.GeneratedKeySlack, not the policy's IdempotencyTTL (24h for
// push); a caller's key keeps the policy's unless the caller sets its own
// TTL; a call with no bound on its re-sends keeps the policy's. Read with
// PTTL on the record itself.
func TestGeneratedKeyTTL(t *testing.T) {
	addr := redistest.Standalone(t)
	b, _ := redisBackend(t, addr)
	rdb := goredis.NewClient(testserver.Patient(&goredis.UniversalOptions{Addrs: []string{addr}}).Simple())
	t.Cleanup(func() { rdb.Close() })
	prefix := uniquePrefix()
	e := start(t, b, serve.Config{Limiter: sdk.New(b, sdk.WithPrefix(prefix))})
	push := e.policies["push"]
	const day = 24 * time.Hour
	slack := client.GeneratedKeySlack
	perTry := &client.Retry{Tries: 3, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, PerTry: time.Second}
	// perTry's window: 3 sends of 1s, pauses of at most 75ms and 150ms.
	perTryWindow := 3*time.Second + 75*time.Millisecond + 150*time.Millisecond

	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			n := 0
			for _, tc := range []struct {
				name     string
				retry    *client.Retry
				timeout  time.Duration // the call's context deadline (0: none)
				call     func(ctx context.Context, c *client.Client, s sdk.Subject) error
				min, max time.Duration // the record's PTTL; max 0: no record
			}{
				{"take, generated key", nil, 5 * time.Second, idemTake(push, sdk.Attempt{}), slack, 5*time.Second + slack},
				{"reserve, generated key", nil, 5 * time.Second, idemReserve(push, sdk.Attempt{}), slack, 5*time.Second + slack},
				{"take batch, generated key", nil, 5 * time.Second, idemTakeBatch(push, sdk.Attempt{}), slack, 5*time.Second + slack},
				{"take, generated key, PerTry, no deadline", perTry, 0, idemTake(push, sdk.Attempt{}), slack, perTryWindow + slack},
				{"take, generated key, deadline shorter than PerTry's window", perTry, 2 * time.Second, idemTake(push, sdk.Attempt{}), slack, 2*time.Second + slack},
				{"take, generated key, caller's TTL", nil, 5 * time.Second, idemTake(push, sdk.Attempt{IdempotencyTTL: 10 * time.Second}), 5 * time.Second, 10 * time.Second},
				{"take, generated key, no deadline", nil, 0, idemTake(push, sdk.Attempt{}), day - time.Minute, day},
				{"take, caller's key", nil, 5 * time.Second, idemTake(push, sdk.Attempt{IdempotencyKey: "message-1"}), day - time.Minute, day},
				{"reserve, caller's key", nil, 5 * time.Second, idemReserve(push, sdk.Attempt{IdempotencyKey: "message-2"}), day - time.Minute, day},
				{"take, caller's key and TTL", nil, 5 * time.Second, idemTake(push, sdk.Attempt{IdempotencyKey: "message-3", IdempotencyTTL: 10 * time.Second}), 5 * time.Second, 10 * time.Second},
				{"take batch, caller's key and TTL", nil, 5 * time.Second, idemTakeBatch(push, sdk.Attempt{IdempotencyKey: "message-4", IdempotencyTTL: 10 * time.Second}), 5 * time.Second, 10 * time.Second},
				{"take, retries off", &client.Retry{Tries: 1}, 5 * time.Second, idemTake(push, sdk.Attempt{}), 0, 0},
			} {
				n++
				user := fmt.Sprintf("%s-%d", pr.name, n)
				c := client.New(e.url, &client.Options{Protocol: pr.p, Retry: tc.retry})
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				}
				err := tc.call(ctx, c, sdk.Subject{"user": user, "content": "c"})
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				keys, err := rdb.Keys(context.Background(), prefix+":{"+user+"}:push:!i:*").Result()
				if err != nil {
					t.Fatalf("KEYS: %v", err)
				}
				if tc.max == 0 {
					if len(keys) != 0 {
						t.Errorf("%s: idempotency records %q, want none", tc.name, keys)
					}
					continue
				}
				if len(keys) != 1 {
					t.Fatalf("%s: idempotency records %q, want one", tc.name, keys)
				}
				got, err := rdb.PTTL(context.Background(), keys[0]).Result()
				if err != nil {
					t.Fatalf("PTTL: %v", err)
				}
				if got < tc.min || got > tc.max {
					t.Errorf("%s: record PTTL %v, want from %v to %v", tc.name, got, tc.min, tc.max)
				}
				t.Logf("%s: record PTTL %v", tc.name, got)
			}
		})
	}
}

func idemTake(p *sdk.Policy, a sdk.Attempt) func(context.Context, *client.Client, sdk.Subject) error {
	return func(ctx context.Context, c *client.Client, s sdk.Subject) error {
		a.Subject = s
		_, err := c.Take(ctx, p, a)
		return err
	}
}

func idemReserve(p *sdk.Policy, a sdk.Attempt) func(context.Context, *client.Client, sdk.Subject) error {
	return func(ctx context.Context, c *client.Client, s sdk.Subject) error {
		a.Subject = s
		_, _, err := c.Reserve(ctx, p, a, time.Minute)
		return err
	}
}

func idemTakeBatch(p *sdk.Policy, a sdk.Attempt) func(context.Context, *client.Client, sdk.Subject) error {
	return func(ctx context.Context, c *client.Client, s sdk.Subject) error {
		a.Subject = s
		return c.TakeBatch(ctx, p, []sdk.Attempt{a})[0].Err
	}
}
