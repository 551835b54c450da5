package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// TestAttemptIdempotencyTTL: an attempt's own IdempotencyTTL is what the
// backend gets (0: the policy's; longer: cut to the policy's), and a
// negative one is refused before the backend is asked.
func TestAttemptIdempotencyTTL(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, "push", sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"), sdk.Daily("daily", 50, time.UTC).By("user"))
	b := &idemBackend{}
	lim := sdk.New(b)
	s := sdk.Subject{"user": "u"}
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{0, 24 * time.Hour},
		{2 * time.Second, 2 * time.Second},
		{24 * time.Hour, 24 * time.Hour},
		{48 * time.Hour, 24 * time.Hour},
	} {
		b.reqs = nil
		if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, IdempotencyKey: "k", IdempotencyTTL: tc.ttl}); err != nil {
			t.Fatalf("Take(ttl %v) = %v", tc.ttl, err)
		}
		if got := b.last(t).IdempotencyTTL; got != tc.want {
			t.Errorf("Take(ttl %v) sent IdempotencyTTL %v, want %v", tc.ttl, got, tc.want)
		}
		b.reqs = nil
		if _, _, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, IdempotencyKey: "r", IdempotencyTTL: tc.ttl}, time.Hour); err != nil {
			t.Fatalf("Reserve(ttl %v) = %v", tc.ttl, err)
		}
		if got := b.last(t).IdempotencyTTL; got != tc.want {
			t.Errorf("Reserve(ttl %v) sent IdempotencyTTL %v, want %v", tc.ttl, got, tc.want)
		}
	}
	b.reqs = nil
	if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, IdempotencyTTL: time.Second}); err != nil || b.last(t).IdempotencyTTL != 0 {
		t.Errorf("Take(no key, ttl 1s) = %v, sent IdempotencyTTL %v, want nil, 0", err, b.last(t).IdempotencyTTL)
	}

	neg := sdk.Attempt{Subject: s, IdempotencyKey: "k", IdempotencyTTL: -time.Second}
	b.reqs = nil
	if _, err := lim.Take(ctx, p, neg); !errors.Is(err, sdk.ErrInvalidIdempotencyKey) {
		t.Errorf("Take(ttl -1s) = %v, want %v", err, sdk.ErrInvalidIdempotencyKey)
	}
	if _, _, err := lim.Reserve(ctx, p, neg, time.Hour); !errors.Is(err, sdk.ErrInvalidIdempotencyKey) {
		t.Errorf("Reserve(ttl -1s) = %v, want %v", err, sdk.ErrInvalidIdempotencyKey)
	}
	for _, r := range lim.TakeBatch(ctx, p, []sdk.Attempt{neg}) {
		if !errors.Is(r.Err, sdk.ErrInvalidIdempotencyKey) {
			t.Errorf("TakeBatch(ttl -1s) = %v, want %v", r.Err, sdk.ErrInvalidIdempotencyKey)
		}
	}
	if len(b.reqs) != 0 {
		t.Errorf("a negative TTL reached the backend: %d requests", len(b.reqs))
	}
	if _, err := lim.Peek(ctx, p, neg); err != nil {
		t.Errorf("Peek(ttl -1s) = %v, want nil (peeks ignore the key and its TTL)", err)
	}
}

// TestAttemptIdempotencyTTLMemory: on the memory backend a key with a 2s
// TTL is replayed within it and forgotten once it lapses, while a key
// with the policy's TTL (10m) is still replayed.
func TestAttemptIdempotencyTTLMemory(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p := mustPolicy(t, "p", sdk.FixedWindow("f", 100, 10*time.Minute).By("user"))
	s := sdk.Subject{"user": "u"}
	short := sdk.Attempt{Subject: s, IdempotencyKey: "short", IdempotencyTTL: 2 * time.Second}
	long := sdk.Attempt{Subject: s, IdempotencyKey: "long"}
	for _, a := range []sdk.Attempt{short, long} {
		if d, err := lim.Take(ctx, p, a); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("Take(%s) = %+v, %v, want allowed, not replayed", a.IdempotencyKey, d, err)
		}
	}
	c.Advance(1999 * time.Millisecond)
	if d, err := lim.Take(ctx, p, short); err != nil || !d.Replayed {
		t.Errorf("Take(short) 1.999s later = %+v, %v, want replayed", d, err)
	}
	c.Advance(time.Millisecond)
	if d, err := lim.Take(ctx, p, short); err != nil || d.Replayed || !d.Allowed {
		t.Errorf("Take(short) 2s later = %+v, %v, want decided afresh", d, err)
	}
	if d, err := lim.Take(ctx, p, long); err != nil || !d.Replayed {
		t.Errorf("Take(long) 2s later = %+v, %v, want replayed (the policy's 10m)", d, err)
	}
	if got := used(t, lim, p, s)["f"]; got != 3 {
		t.Errorf("used = %d, want 3 (short twice, long once)", got)
	}
	c.Advance(10*time.Minute - 2*time.Second)
	if d, err := lim.Take(ctx, p, long); err != nil || d.Replayed {
		t.Errorf("Take(long) after the policy's IdempotencyTTL = %+v, %v, want decided afresh", d, err)
	}
}
