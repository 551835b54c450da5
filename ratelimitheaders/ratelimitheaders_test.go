package ratelimitheaders_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestHeaders(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.GCRA("burst", 30, time.Minute, 14).By("user"),
		sdk.FixedWindow("hourly", 3, time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clk}))
	ctx := context.Background()
	s := sdk.Subject{"user": "u1"}
	steps := []struct {
		name                       string
		cost                       int64
		rateLimit, retryAfter      string
		wantAllowed, wantCostTooHi bool
	}{
		{"allowed", 1, `"hourly";r=2;t=3600`, "", true, false},
		{"allowed again", 2, `"hourly";r=0;t=3600`, "", true, false},
		{"denied", 1, `"hourly";r=0;t=3600`, "3600", false, false},
		{"cost too high", 20, `"burst";r=12;t=0`, "", false, true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: st.cost})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != st.wantAllowed || d.CostTooHigh != st.wantCostTooHi {
				t.Fatalf("Take = allowed %v cost too high %v, want %v %v", d.Allowed, d.CostTooHigh, st.wantAllowed, st.wantCostTooHi)
			}
			h := http.Header{}
			ratelimitheaders.Set(h, p, d)
			ratelimitheaders.SetRetryAfter(h, d)
			if got, want := h.Get("RateLimit-Policy"), `"burst";q=15;w=30, "hourly";q=3;w=3600`; got != want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, want)
			}
			if got := h.Get("RateLimit"); got != st.rateLimit {
				t.Errorf("RateLimit = %q, want %q", got, st.rateLimit)
			}
			if got := h.Get("Retry-After"); got != st.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, st.retryAfter)
			}
		})
	}
	// A degraded decision carries no rule states: no headers.
	h := http.Header{}
	ratelimitheaders.Set(h, p, sdk.Decision{Allowed: true, Degraded: true})
	if len(h) != 0 {
		t.Errorf("headers of a degraded decision = %v, want none", h)
	}
}

// TestCache: Cache.Set writes what Set writes, whatever rules each
// decision carries (a changed rule set or limit is formatted again, two
// policies do not share a value), and allocates less doing it.
func TestCache(t *testing.T) {
	p1, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.GCRA("burst", 30, time.Minute, 14).By("user"),
		sdk.FixedWindow("hourly", 3, time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sdk.NewPolicy("push", []sdk.Rule{
		sdk.FixedWindow("burst", 7, time.Second).By("user"),
		sdk.SlidingWindow("hourly", 9, 2*time.Hour).By("user"),
	})
	if err != nil {
		t.Fatal(err)
	}
	rd := func(rule string, limit, remaining int64, allowed bool) sdk.RuleDecision {
		return sdk.RuleDecision{Rule: rule, Allowed: allowed, Limit: limit, Used: limit - remaining, Remaining: remaining, ResetAfter: 90 * time.Second, RetryAfter: 5 * time.Second}
	}
	both := sdk.Decision{Allowed: true, Rules: []sdk.RuleDecision{rd("burst", 15, 3, true), rd("hourly", 3, 2, true)}}
	steps := []struct {
		p *sdk.Policy
		d sdk.Decision
	}{
		{p1, both},
		{p1, both},
		{p1, sdk.Decision{Allowed: false, Rules: []sdk.RuleDecision{rd("hourly", 3, 0, false)}}},                         // fewer rules
		{p1, sdk.Decision{Allowed: true, Rules: []sdk.RuleDecision{rd("burst", 16, 3, true), rd("hourly", 3, 2, true)}}}, // another limit
		{p2, both}, // same rules and limits, another policy: its own windows
		{p1, sdk.Decision{Allowed: true, Rules: []sdk.RuleDecision{rd("hourly", 3, 2, true), rd("burst", 15, 3, true)}}}, // another order
		{p1, both},
		{p1, sdk.Decision{Allowed: true, Degraded: true}},
	}
	var c ratelimitheaders.Cache
	for i, st := range steps {
		want, got := http.Header{}, http.Header{}
		ratelimitheaders.Set(want, st.p, st.d)
		c.Set(got, st.p, st.d)
		for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
			if got.Get(k) != want.Get(k) {
				t.Errorf("step %d: %s = %q through the Cache, %q from Set", i, k, got.Get(k), want.Get(k))
			}
		}
		if len(got) != len(want) {
			t.Errorf("step %d: headers %v through the Cache, %v from Set", i, got, want)
		}
	}
	h := http.Header{}
	set := testing.AllocsPerRun(100, func() { ratelimitheaders.Set(h, p1, both) })
	cached := testing.AllocsPerRun(100, func() { c.Set(h, p1, both) })
	if cached >= set {
		t.Errorf("allocations per call: %v through the Cache, %v from Set; want fewer", cached, set)
	}
	t.Logf("allocations per call: %v through the Cache, %v from Set", cached, set)
}

// TestHeadersSaturated: a counted exempt drives a rule far past its
// limit (takes of MaxLimit, until Used saturates at MaxUsed): RateLimit
// says r=0, never a negative or wrapped figure; and whatever a backend
// reports, r stays within [0, Limit].
func TestHeadersSaturated(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("hourly", 3, time.Hour).By("user")}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clk}))
	ctx := context.Background()
	s := sdk.Subject{"user": "u1"}
	if _, err := lim.Admin().SetOverride(ctx, p, s, driver.Override{Kind: driver.Exempt, Counted: true}); err != nil {
		t.Fatal(err)
	}
	var d sdk.Decision
	for range 40 { // 40 × 2^50 > 2^55, where the Redis reply used to wrap
		if d, err = lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: driver.MaxLimit}); err != nil {
			t.Fatal(err)
		}
	}
	if u := d.Rules[0].Used; u != driver.MaxUsed {
		t.Errorf("Used = %d, want MaxUsed %d", u, int64(driver.MaxUsed))
	}
	h := http.Header{}
	ratelimitheaders.Set(h, p, d)
	if got, want := h.Get("RateLimit"), `"hourly";r=0;`; !strings.HasPrefix(got, want) {
		t.Errorf("RateLimit = %q, want %q…", got, want)
	}
	for _, rem := range []int64{-5, 1 << 55} {
		d.Rules[0].Remaining = rem
		ratelimitheaders.Set(h, p, d)
		if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"hourly";r=0;`) && !strings.HasPrefix(got, `"hourly";r=3;`) {
			t.Errorf("RateLimit of Remaining %d = %q, want r within [0, 3]", rem, got)
		}
	}
}
