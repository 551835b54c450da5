package sdk_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// idemBackend is a fullBackend: it records the idempotency keys sent.
type idemBackend struct{ fullBackend }

func TestIdempotencyRequest(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, "push",
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.Daily("daily", 50, time.UTC).By("user"),
		sdk.GCRA("burst", 30, 2*time.Hour, 14).By("user"))
	if got := p.IdempotencyTTL(); got != 24*time.Hour {
		t.Errorf("IdempotencyTTL() = %v, want 24h (the longest window)", got)
	}
	b := &idemBackend{}
	lim := sdk.New(b, sdk.WithPrefix("app"))
	s := sdk.Subject{"user": "u:1"}
	tests := []struct {
		name    string
		key     string
		wantKey string
		wantErr error
	}{
		{"no key", "", "", nil},
		{"escaped", "send 7:{x}", "app:{u%3A1}:push:!i:send%207%3A%7Bx%7D", nil},
		{"longest", strings.Repeat("k", sdk.MaxIdempotencyKeyLen), "app:{u%3A1}:push:!i:" + strings.Repeat("k", sdk.MaxIdempotencyKeyLen), nil},
		{"too long", strings.Repeat("k", sdk.MaxIdempotencyKeyLen+1), "", sdk.ErrInvalidIdempotencyKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b.reqs = nil
			_, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, IdempotencyKey: tc.key})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Take(key %q) = %v, want %v", tc.key, err, tc.wantErr)
			}
			if err != nil {
				if strings.Contains(err.Error(), tc.key) {
					t.Errorf("Take error %q contains the key", err)
				}
				return
			}
			req := b.last(t)
			wantTTL := 24 * time.Hour
			if tc.key == "" {
				wantTTL = 0
			}
			if req.IdempotencyKey != tc.wantKey || req.IdempotencyTTL != wantTTL || req.Cost != 1 {
				t.Errorf("request = {IdempotencyKey %q, IdempotencyTTL %v, Cost %d}, want {%q, %v, 1}", req.IdempotencyKey, req.IdempotencyTTL, req.Cost, tc.wantKey, wantTTL)
			}
		})
	}
	t.Run("cost", func(t *testing.T) {
		if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: -1}); !errors.Is(err, sdk.ErrInvalidCost) {
			t.Errorf("Take(cost -1) = %v, want %v", err, sdk.ErrInvalidCost)
		}
		if _, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: 3}); err != nil || b.last(t).Cost != 3 {
			t.Errorf("Take(cost 3) = %v, sent cost %d, want 3", err, b.last(t).Cost)
		}
	})
}

func TestIdempotentTakeMemory(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p := mustPolicy(t, "p", sdk.FixedWindow("f", 3, time.Minute).By("user"), sdk.SlidingLog("l", 10, 10*time.Minute).By("user"))
	s := sdk.Subject{"user": "u"}
	a := sdk.Attempt{Subject: s, Cost: 2, IdempotencyKey: "campaign-7"}

	first, err := lim.Take(ctx, p, a)
	if err != nil || !first.Allowed || first.Replayed {
		t.Fatalf("Take(a) = %+v, %v, want allowed, not replayed", first, err)
	}
	c.Advance(time.Second)
	again, err := lim.Take(ctx, p, a) // e.g. after a timeout
	if err != nil || !again.Replayed {
		t.Fatalf("Take(a) again = %+v, %v, want replayed", again, err)
	}
	again.Replayed = false
	if !reflect.DeepEqual(again, first) {
		t.Errorf("Take(a) again = %+v, want the first decision %+v", again, first)
	}
	if got := used(t, lim, p, s); got["f"] != 2 || got["l"] != 2 {
		t.Errorf("used after the replay = %v, want f 2, l 2", got)
	}
	// A denied attempt is replayed as denied, even once it would fit.
	b := sdk.Attempt{Subject: s, Cost: 2, IdempotencyKey: "campaign-8"}
	d, err := lim.Take(ctx, p, b)
	if err != nil || d.Allowed || d.Replayed {
		t.Fatalf("Take(b) = %+v, %v, want denied", d, err)
	}
	c.Advance(time.Minute) // a new fixed window
	if d, err := lim.Take(ctx, p, b); err != nil || d.Allowed || !d.Replayed {
		t.Errorf("Take(b) again in a new window = %+v, %v, want the first denial replayed", d, err)
	}
	// After IdempotencyTTL (10m, the longest window) the key is forgotten.
	c.Advance(p.IdempotencyTTL())
	if d, err := lim.Take(ctx, p, a); err != nil || d.Replayed || !d.Allowed {
		t.Errorf("Take(a) after IdempotencyTTL = %+v, %v, want decided afresh", d, err)
	}
}

func TestIdempotentReserveMemory(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p := mustPolicy(t, "ads", sdk.FixedWindow("daily", 3, 24*time.Hour).By("user"))
	s := sdk.Subject{"user": "u"}
	a := sdk.Attempt{Subject: s, Cost: 2, IdempotencyKey: "imp-1"}
	d1, r1, err := lim.Reserve(ctx, p, a, time.Minute)
	if err != nil || !d1.Allowed || r1 == nil {
		t.Fatalf("Reserve(a) = %+v, %v, %v, want allowed", d1, r1, err)
	}
	d2, r2, err := lim.Reserve(ctx, p, a, time.Minute)
	if err != nil || !d2.Replayed || r2 == nil || r2.ID() != r1.ID() {
		t.Fatalf("Reserve(a) again = %+v, %v, %v, want replayed with hold %s", d2, r2, err, r1.ID())
	}
	if got := used(t, lim, p, s)["daily"]; got != 2 {
		t.Errorf("used after the replay = %d, want 2 (no second hold)", got)
	}
	if err := r2.Commit(ctx); err != nil {
		t.Errorf("Commit of the replayed reservation = %v, want nil", err)
	}
	if err := r1.Cancel(ctx); !errors.Is(err, sdk.ErrReservationNotFound) {
		t.Errorf("Cancel after Commit = %v, want %v (one hold)", err, sdk.ErrReservationNotFound)
	}

	// A key used by one kind of operation is refused by the other.
	if _, err := lim.Take(ctx, p, a); !errors.Is(err, sdk.ErrInvalidIdempotencyKey) {
		t.Errorf("Take with a reservation's key = %v, want %v", err, sdk.ErrInvalidIdempotencyKey)
	}
	b := sdk.Attempt{Subject: s, IdempotencyKey: "take-1"}
	if _, err := lim.Take(ctx, p, b); err != nil {
		t.Fatalf("Take(b) = %v", err)
	}
	if _, res, err := lim.Reserve(ctx, p, b, time.Minute); !errors.Is(err, sdk.ErrInvalidIdempotencyKey) || res != nil {
		t.Errorf("Reserve with a take's key = %v, %v, want %v", res, err, sdk.ErrInvalidIdempotencyKey)
	}
}

// TestIdempotentBatchMemory: a retried batch replays every keyed attempt.
func TestIdempotentBatchMemory(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p := mustPolicy(t, "push", sdk.FixedWindow("daily", 1, 24*time.Hour).By("user"))
	var as []sdk.Attempt
	for _, u := range []string{"a", "b", "a"} {
		as = append(as, sdk.Attempt{Subject: sdk.Subject{"user": u}, IdempotencyKey: "msg-" + u})
	}
	first := lim.TakeBatch(ctx, p, as)
	retry := lim.TakeBatch(ctx, p, as)
	wantReplayed := [][]bool{{false, false, true}, {true, true, true}}
	for k, rs := range [][]sdk.BatchResult{first, retry} {
		for i, r := range rs {
			if r.Err != nil || !r.Decision.Allowed || r.Decision.Replayed != wantReplayed[k][i] {
				t.Errorf("batch %d entry %d = %+v, %v, want allowed, replayed %t", k, i, r.Decision, r.Err, wantReplayed[k][i])
			}
		}
	}
	for _, u := range []string{"a", "b"} {
		if got := used(t, lim, p, sdk.Subject{"user": u})["daily"]; got != 1 {
			t.Errorf("used(%s) = %d, want 1", u, got)
		}
	}
}

// TestZeroCostMeansOne: every operation reads Attempt.Cost 0 as 1.
func TestZeroCostMeansOne(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	lim := newMemLimiter(t, c)
	p, err := sdk.NewPolicy("zero", []sdk.Rule{sdk.FixedWindow("f", 4, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	a := sdk.Attempt{Subject: sdk.Subject{"user": "u"}}
	used := func(d sdk.Decision) int64 { return d.Rules[0].Used }
	if d, err := lim.Take(ctx, p, a); err != nil || used(d) != 1 {
		t.Fatalf("Take(cost 0) = used %d, %v, want 1, nil", used(d), err)
	}
	if d, err := lim.Peek(ctx, p, a); err != nil || !d.Allowed || used(d) != 1 {
		t.Fatalf("Peek(cost 0) = %+v, %v, want allowed with used 1 (nothing consumed)", d, err)
	}
	d, res, err := lim.Reserve(ctx, p, a, time.Minute)
	if err != nil || used(d) != 2 {
		t.Fatalf("Reserve(cost 0) = used %d, %v, want 2, nil", used(d), err)
	}
	if err := res.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Wait(ctx, p, a); err != nil || used(d) != 3 {
		t.Fatalf("Wait(cost 0) = used %d, %v, want 3, nil", used(d), err)
	}
	for _, r := range lim.TakeBatch(ctx, p, []sdk.Attempt{a, a}) {
		if r.Err != nil {
			t.Fatalf("TakeBatch(cost 0) error: %v", r.Err)
		}
	}
	if d, _ := lim.Peek(ctx, p, a); d.Allowed || used(d) != 4 {
		t.Fatalf("after 5 attempts of cost 0 on a limit of 4: Peek = %+v, want denied with used 4", d)
	}
}
