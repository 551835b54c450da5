package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestAttemptIdempotencyTTL: the idempotency record of a Take, a Reserve
// and a batched Take lives the attempt's own IdempotencyTTL when it sets
// one (PTTL at most that), else the policy's (24h here: its longest
// window).
func TestAttemptIdempotencyTTL(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("idemttl%d", time.Now().UnixNano())
	lim := sdk.New(b, sdk.WithPrefix(prefix))
	p, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 1000, time.Minute).By("user"),
		sdk.FixedWindow("recv-24h", 1000, 24*time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := sdk.Subject{"user": "u"}
	// pttl is the remaining life of key k's record.
	pttl := func(k string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, prefix+":{u}:push:!i:"+k).Result()
		if err != nil {
			t.Fatalf("PTTL of key %s's record: %v", k, err)
		}
		return d
	}
	ops := []struct {
		name string
		do   func(a sdk.Attempt) error
	}{
		{"take", func(a sdk.Attempt) error { _, err := lim.Take(ctx, p, a); return err }},
		{"reserve", func(a sdk.Attempt) error { _, _, err := lim.Reserve(ctx, p, a, time.Hour); return err }},
		{"take batch", func(a sdk.Attempt) error { return lim.TakeBatch(ctx, p, []sdk.Attempt{a})[0].Err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			for i, tc := range []struct {
				ttl, max, min time.Duration
			}{
				{2 * time.Second, 2 * time.Second, time.Millisecond},
				{65 * time.Second, 65 * time.Second, 5 * time.Second},
				{0, 24 * time.Hour, 24*time.Hour - time.Minute},
				{48 * time.Hour, 24 * time.Hour, 24*time.Hour - time.Minute}, // cut to the policy's
			} {
				k := fmt.Sprintf("%s-%d", strings.ReplaceAll(op.name, " ", "-"), i) // nothing to escape
				if err := op.do(sdk.Attempt{Subject: s, IdempotencyKey: k, IdempotencyTTL: tc.ttl}); err != nil {
					t.Fatalf("%s(ttl %v) = %v", op.name, tc.ttl, err)
				}
				got := pttl(k)
				if got > tc.max || got < tc.min {
					t.Errorf("%s(ttl %v): record PTTL %v, want from %v to %v", op.name, tc.ttl, got, tc.min, tc.max)
				}
				t.Logf("%s(ttl %v): record PTTL %v", op.name, tc.ttl, got)
			}
		})
	}
}
