package sdk_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// newClock returns a settable clock for the memory backend and the
// Limiter.
func newClock(t time.Time) *fakeclock.Clock { return fakeclock.New(t) }

// t0 is the test epoch.
var t0 = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

func loadPolicies(t testing.TB) map[string]*sdk.Policy {
	t.Helper()
	ps, err := seed.Policies()
	if err != nil {
		t.Fatalf("seed.Policies() = %v", err)
	}
	m := map[string]*sdk.Policy{}
	for _, p := range ps {
		m[p.Name()] = p
	}
	return m
}

func newMemLimiter(t *testing.T, c *fakeclock.Clock) *sdk.Limiter {
	t.Helper()
	return sdk.New(memory.New(&memory.Options{Clock: c}))
}

// used returns each rule's Used from an Inspect of s.
func used(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject) map[string]int64 {
	t.Helper()
	ins, err := lim.Admin().Inspect(context.Background(), p, s)
	if err != nil {
		t.Fatalf("Inspect(…) = %v", err)
	}
	m := map[string]int64{}
	for _, r := range ins.Rules {
		m[r.Rule] = r.Used
	}
	return m
}

// TestSeedCaps checks the four caps of the messaging platform in
// docs/DESIGN.md, loaded from internal/seed/policies.yaml.
func TestSeedCaps(t *testing.T) {
	ctx := context.Background()
	push := loadPolicies(t)["push"]

	t.Run("recv-1m", func(t *testing.T) {
		c := newClock(t0)
		lim := newMemLimiter(t, c)
		for i := range 15 {
			s := sdk.Subject{"user": "A", "content": sdk.Fingerprint(fmt.Sprint("msg ", i))}
			d, err := lim.Allow(ctx, push, s)
			if err != nil || !d.Allowed {
				t.Fatalf("Allow(send %d) = %+v, %v, want allowed", i+1, d, err)
			}
			c.Advance(3 * time.Second) // 15 sends within 45 s
		}
		s := sdk.Subject{"user": "A", "content": sdk.Fingerprint("msg 16")}
		before := used(t, lim, push, s)
		d, err := lim.Allow(ctx, push, s)
		if err != nil || d.Allowed || !slices.Equal(d.Denied, []string{"recv-1m"}) {
			t.Fatalf("Allow(send 16) = %+v, %v, want denied by [recv-1m]", d, err)
		}
		if r := d.Rules[0]; r.Rule != "recv-1m" || r.Used != 15 || r.Limit != 15 || r.Remaining != 0 || r.RetryAfter <= 0 || r.RetryAfter > time.Minute {
			t.Errorf("Allow(send 16).Rules[0] = %+v, want recv-1m 15/15 with a retry within a minute", r)
		}
		if d.RetryAfter != d.Rules[0].RetryAfter {
			t.Errorf("Allow(send 16).RetryAfter = %v, want %v", d.RetryAfter, d.Rules[0].RetryAfter)
		}
		// The denial consumed nothing, anywhere.
		if after := used(t, lim, push, s); !maps.Equal(after, before) {
			t.Errorf("Inspect after denial = %v, want %v (unchanged)", after, before)
		}
		if after := used(t, lim, push, s); after["recv-24h"] != 15 {
			t.Errorf("recv-24h used = %d, want 15", after["recv-24h"])
		}
		// Another user is unaffected.
		if d, err := lim.Allow(ctx, push, sdk.Subject{"user": "B", "content": "x"}); err != nil || !d.Allowed {
			t.Errorf("Allow(user B) = %+v, %v, want allowed", d, err)
		}
		// Once the window has moved past the first sends, A may send again.
		c.Advance(d.RetryAfter)
		if d, err := lim.Allow(ctx, push, s); err != nil || !d.Allowed {
			t.Errorf("Allow(send 16 after RetryAfter) = %+v, %v, want allowed", d, err)
		}
		ins, err := lim.Admin().Inspect(ctx, push, sdk.Subject{"user": "A"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ins.Denials) != 1 || ins.Denials[0].Rule != "recv-1m" || ins.Denials[0].Used != 15 || ins.Denials[0].Limit != 15 {
			t.Errorf("Inspect(A).Denials = %+v, want one recv-1m denial at 15/15", ins.Denials)
		}
		if !slices.Equal(ins.Skipped, []string{"content-59s", "content-59m"}) {
			t.Errorf("Inspect(A).Skipped = %v, want [content-59s content-59m]", ins.Skipped)
		}
	})

	t.Run("content-59s", func(t *testing.T) {
		c := newClock(t0)
		lim := newMemLimiter(t, c)
		same := sdk.Subject{"user": "A", "content": sdk.Fingerprint("Your parcel has arrived")}
		for i := range 2 {
			d, err := lim.Allow(ctx, push, same)
			if err != nil || !d.Allowed {
				t.Fatalf("Allow(same content, send %d) = %+v, %v, want allowed", i+1, d, err)
			}
			c.Advance(10 * time.Second)
		}
		before := used(t, lim, push, same)
		d, err := lim.Allow(ctx, push, same)
		if err != nil || d.Allowed || !slices.Equal(d.Denied, []string{"content-59s"}) {
			t.Fatalf("Allow(same content, send 3) = %+v, %v, want denied by [content-59s]", d, err)
		}
		if after := used(t, lim, push, same); !maps.Equal(after, before) {
			t.Errorf("Inspect after denial = %v, want %v (unchanged)", after, before)
		}
		want := map[string]int64{"recv-1m": 2, "recv-24h": 2, "content-59s": 2, "content-59m": 2}
		if !maps.Equal(before, want) {
			t.Errorf("Inspect = %v, want %v", before, want)
		}
		// Peek agrees and consumes nothing either.
		pd, err := lim.Peek(ctx, push, sdk.Attempt{Subject: same})
		if err != nil || pd.Allowed || pd.Rules[2].Used != 2 {
			t.Errorf("Peek(same content) = %+v, %v, want denied at 2/2", pd, err)
		}
		other := sdk.Subject{"user": "A", "content": sdk.Fingerprint("Your code is 1234")}
		if d, err := lim.Allow(ctx, push, other); err != nil || !d.Allowed {
			t.Errorf("Allow(other content) = %+v, %v, want allowed", d, err)
		}
		if got := used(t, lim, push, same)["recv-1m"]; got != 3 {
			t.Errorf("recv-1m used = %d, want 3", got)
		}
	})
}
