package ratelimitheaders_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
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
