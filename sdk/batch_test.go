package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// countingBackend is the memory backend counting the requests it gets, by
// each operation and by each batch.
type countingBackend struct {
	*memory.Backend
	mu      sync.Mutex
	takes   int
	batches []int // size of each TakeBatch call
}

func (c *countingBackend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.mu.Lock()
	c.takes++
	c.mu.Unlock()
	return c.Backend.Take(ctx, req)
}

func (c *countingBackend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.count()
	return c.Backend.Peek(ctx, req)
}

func (c *countingBackend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.count()
	return c.Backend.Reserve(ctx, req)
}

func (c *countingBackend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.count()
	return c.Backend.Inspect(ctx, req)
}

func (c *countingBackend) count() {
	c.mu.Lock()
	c.takes++
	c.mu.Unlock()
}

func (c *countingBackend) TakeBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	c.mu.Lock()
	c.batches = append(c.batches, len(reqs))
	c.mu.Unlock()
	return c.Backend.TakeBatch(ctx, reqs)
}

func (c *countingBackend) PeekBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	c.mu.Lock()
	c.batches = append(c.batches, len(reqs))
	c.mu.Unlock()
	return c.Backend.PeekBatch(ctx, reqs)
}

// calls returns the number of requests sent so far.
func (c *countingBackend) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.takes
	for _, b := range c.batches {
		n += b
	}
	return n
}

func newCounting(c *fakeclock.Clock) *countingBackend {
	return &countingBackend{Backend: memory.New(&memory.Options{Clock: c})}
}

// outcome summarizes a batch entry: "allowed 2", "denied 3", "error".
func outcome(r sdk.BatchResult) string {
	switch {
	case r.Err != nil:
		return "error"
	case r.Decision.Degraded:
		return "degraded"
	case r.Decision.Allowed:
		return fmt.Sprintf("allowed %d", r.Decision.Rules[0].Used)
	}
	return fmt.Sprintf("denied %d", r.Decision.Rules[0].Used)
}

func outcomes(rs []sdk.BatchResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = outcome(r)
	}
	return out
}

func TestTakeBatch(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, "push", sdk.FixedWindow("daily", 2, 24*time.Hour).By("user"))
	user := func(u string) sdk.Subject { return sdk.Subject{"user": u} }
	tests := []struct {
		name     string
		batcher  bool // the backend implements driver.Batcher
		attempts []sdk.Attempt
		want     []string
		wantErrs map[int]error
	}{
		{
			name:    "order and mixed outcomes",
			batcher: true,
			attempts: []sdk.Attempt{
				{Subject: user("a")}, {Subject: user("b"), Cost: 2}, {Subject: user("a")},
				{Subject: user("a")}, {Subject: user("b")}, {Subject: user("c"), Cost: 3},
			},
			want: []string{"allowed 1", "allowed 2", "allowed 2", "denied 2", "denied 2", "denied 0"},
		},
		{
			name:    "per-entry errors",
			batcher: true,
			attempts: []sdk.Attempt{
				{Subject: user("a")}, {Subject: sdk.Subject{"campaign": "x"}}, {Subject: user("a"), Cost: -1},
				{Subject: user("a"), IdempotencyKey: strings.Repeat("k", sdk.MaxIdempotencyKeyLen+1)}, {Subject: user("a")},
			},
			want:     []string{"allowed 1", "error", "error", "error", "allowed 2"},
			wantErrs: map[int]error{1: sdk.ErrInvalidSubject, 2: sdk.ErrInvalidCost, 3: sdk.ErrInvalidIdempotencyKey},
		},
		{
			name:    "fallback without Batcher",
			batcher: false,
			attempts: []sdk.Attempt{
				{Subject: user("a")}, {Subject: user("a")}, {Subject: user("a")}, {Subject: user("")},
			},
			want:     []string{"allowed 1", "allowed 2", "denied 2", "error"},
			wantErrs: map[int]error{3: sdk.ErrInvalidSubject},
		},
		{name: "empty", batcher: true, attempts: nil, want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			cb := newCounting(c)
			var b driver.Backend = cb
			if !tc.batcher {
				b = takeFunc(cb.Take) // hides TakeBatch
			}
			var events []sdk.Event
			lim := sdk.New(b, sdk.WithClock(c), sdk.WithObserver(func(e sdk.Event) { events = append(events, e) }))
			got := lim.TakeBatch(ctx, p, tc.attempts)
			if g := outcomes(got); !slices.Equal(g, tc.want) {
				t.Errorf("TakeBatch(…) = %q, want %q", g, tc.want)
			}
			for i, want := range tc.wantErrs {
				if !errors.Is(got[i].Err, want) {
					t.Errorf("TakeBatch(…)[%d].Err = %v, want %v", i, got[i].Err, want)
				}
			}
			decided := 0
			for _, r := range got {
				if r.Err == nil {
					decided++
				}
			}
			if tc.batcher {
				if decided > 0 && !slices.Equal(cb.batches, []int{decided}) || cb.takes != 0 {
					t.Errorf("backend got TakeBatch calls %v and %d Take calls, want one TakeBatch of %d", cb.batches, cb.takes, decided)
				}
			} else if cb.takes != decided || len(cb.batches) != 0 {
				t.Errorf("backend got %d Take calls and TakeBatch calls %v, want %d Take calls", cb.takes, cb.batches, decided)
			}
			if len(events) != decided {
				t.Errorf("observer got %d events, want %d (one per decided attempt)", len(events), decided)
			}
			for _, e := range events {
				if e.Op != "take" || e.Batch != len(tc.attempts) {
					t.Errorf("event = {Op: %q, Batch: %d}, want {Op: allow, Batch: %d}", e.Op, e.Batch, len(tc.attempts))
				}
			}
		})
	}
}

// failingBatcher answers TakeBatch with errs[i] for request i (nil: ask
// the memory backend).
type failingBatcher struct {
	*memory.Backend
	errs  []error
	short bool // answer one result too few
}

func (f *failingBatcher) TakeBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	out := f.Backend.TakeBatch(ctx, reqs)
	for i := range out {
		if i < len(f.errs) && f.errs[i] != nil {
			out[i] = driver.BatchResult{Err: f.errs[i]}
		}
	}
	if f.short {
		out = out[:len(out)-1]
	}
	return out
}

func TestTakeBatchFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("i/o timeout")
	s := []sdk.Attempt{{Subject: sdk.Subject{"user": "a"}}, {Subject: sdk.Subject{"user": "b"}}, {Subject: sdk.Subject{"user": "c"}}}
	tests := []struct {
		name     string
		failOpen bool
		errs     []error
		short    bool
		want     []string
	}{
		{"closed", false, []error{nil, boom, nil}, false, []string{"allowed 1", "error", "allowed 1"}},
		{"open", true, []error{nil, boom, nil}, false, []string{"allowed 1", "degraded", "allowed 1"}},
		{"short answer, closed", false, nil, true, []string{"error", "error", "error"}},
		{"short answer, open", true, nil, true, []string{"degraded", "degraded", "degraded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []sdk.PolicyOption
			if tc.failOpen {
				opts = append(opts, sdk.WithFailOpen())
			}
			p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 5, time.Minute).By("user")}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := newClock(t0)
			b := &failingBatcher{Backend: memory.New(&memory.Options{Clock: c}), errs: tc.errs, short: tc.short}
			got := sdk.New(b, sdk.WithClock(c)).TakeBatch(ctx, p, s)
			if g := outcomes(got); !slices.Equal(g, tc.want) {
				t.Errorf("TakeBatch(…) = %q, want %q", g, tc.want)
			}
			if !tc.short && !tc.failOpen && (!errors.Is(got[1].Err, boom) || !strings.HasPrefix(got[1].Err.Error(), "sdk: take batch: ")) {
				t.Errorf("TakeBatch(…)[1].Err = %v, want sdk: take batch: … wrapping %v", got[1].Err, boom)
			}
			if tc.failOpen && !tc.short && !errors.Is(got[1].Decision.Err, boom) {
				t.Errorf("TakeBatch(…)[1].Decision.Err = %v, want %v", got[1].Decision.Err, boom)
			}
		})
	}
	t.Run("nil policy", func(t *testing.T) {
		got := sdk.New(memory.New(nil)).TakeBatch(ctx, nil, s)
		for i, r := range got {
			if !errors.Is(r.Err, sdk.ErrInvalidPolicy) {
				t.Errorf("TakeBatch(nil policy)[%d].Err = %v, want %v", i, r.Err, sdk.ErrInvalidPolicy)
			}
		}
	})
	t.Run("nil backend", func(t *testing.T) {
		p := mustPolicy(t, "p", sdk.FixedWindow("f", 5, time.Minute).By("user"))
		for i, r := range sdk.New(nil).TakeBatch(ctx, p, s) {
			if r.Err == nil {
				t.Errorf("New(nil).TakeBatch(…)[%d].Err = nil, want an error", i)
			}
		}
	})
}

func TestPeekBatch(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	p := mustPolicy(t, "p", sdk.FixedWindow("f", 2, time.Minute).By("user"))
	lim := newMemLimiter(t, c)
	if d, err := lim.Take(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": "a"}, Cost: 2}); err != nil || !d.Allowed {
		t.Fatalf("Take(a, cost 2) = %+v, %v", d, err)
	}
	as := []sdk.Attempt{
		{Subject: sdk.Subject{"user": "a"}},
		{Subject: sdk.Subject{"user": "b"}, IdempotencyKey: "ignored"},
		{Subject: sdk.Subject{"user": "b"}, Cost: 2},
	}
	for range 2 {
		if g, want := outcomes(lim.PeekBatch(ctx, p, as)), []string{"denied 2", "allowed 0", "allowed 0"}; !slices.Equal(g, want) {
			t.Errorf("PeekBatch(…) = %q, want %q (peeks consume nothing)", g, want)
		}
	}
	// A backend without idempotency: a peek's key is ignored, not refused.
	f := &fakeBackend{}
	for _, r := range sdk.New(f).PeekBatch(ctx, p, as) {
		if r.Err != nil {
			t.Errorf("PeekBatch(…) on a backend without idempotency = %v, want no error", r.Err)
		}
	}
	if len(f.reqs) != len(as) {
		t.Fatalf("PeekBatch sent %d requests to the backend, want %d", len(f.reqs), len(as))
	}
	for _, req := range f.reqs {
		if req.IdempotencyKey != "" || req.op != "peek" {
			t.Errorf("PeekBatch sent %+v, want a peek without IdempotencyKey", req)
		}
	}
}
