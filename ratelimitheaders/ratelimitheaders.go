// Package ratelimitheaders writes a decision as HTTP headers: RateLimit and
// RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers) and Retry-After.
// The console's JSON API and freqcap serve's HTTP answers use it, so both
// say the same thing about the same decision.
package ratelimitheaders

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// Set sets RateLimit-Policy and RateLimit for d, a decision under p.
// RateLimit-Policy lists every rule of the decision as a quota policy
// ("recv-1m";q=15;w=60), and RateLimit gives the most restrictive one
// ("recv-1m";r=3;t=12): when denied, the denying rule with the longest
// wait (t is its retry-after); when allowed, the rule with the fewest
// units remaining (t is its reset time). Seconds are rounded up. A
// degraded decision has no rule states and gets no headers.
func Set(h http.Header, p *sdk.Policy, d sdk.Decision) {
	if len(d.Rules) == 0 {
		return
	}
	cfg := map[string]sdk.Rule{}
	for _, r := range p.Rules() {
		cfg[r.Name] = r
	}
	items := make([]string, 0, len(d.Rules))
	for _, rd := range d.Rules {
		items = append(items, fmt.Sprintf("%q;q=%d;w=%d", rd.Rule, rd.Limit, Seconds(QuotaWindow(cfg[rd.Rule]))))
	}
	h.Set("RateLimit-Policy", strings.Join(items, ", "))

	best := Governing(d)
	rd := d.Rules[best]
	t := rd.ResetAfter
	if !rd.Allowed {
		t = rd.RetryAfter
	}
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", rd.Rule, rd.Remaining, Seconds(t)))
}

// Governing is the index in d.Rules of the rule RateLimit reports, the
// most restrictive one: when d denies, the denying rule with the longest
// wait; when it allows, the rule with the fewest units remaining (of
// those, the one resetting last). -1 when d has no rule states (a
// degraded decision).
func Governing(d sdk.Decision) int {
	best := -1
	for i, rd := range d.Rules {
		if best < 0 {
			best = i
			continue
		}
		b := d.Rules[best]
		if !d.Allowed {
			// Prefer denying rules, then the longest wait.
			if rd.Allowed != b.Allowed {
				if !rd.Allowed {
					best = i
				}
				continue
			}
			if rd.RetryAfter > b.RetryAfter {
				best = i
			}
			continue
		}
		if rd.Remaining < b.Remaining || (rd.Remaining == b.Remaining && rd.ResetAfter > b.ResetAfter) {
			best = i
		}
	}
	return best
}

// SetRetryAfter sets Retry-After (whole seconds, rounded up) when d
// denies and a retry can pass: not when it is allowed, nor when some rule
// can never admit the cost (CostTooHigh: no retry can pass).
func SetRetryAfter(h http.Header, d sdk.Decision) {
	if d.Allowed || d.CostTooHigh || d.RetryAfter <= 0 {
		return
	}
	h.Set("Retry-After", strconv.FormatInt(Seconds(d.RetryAfter), 10))
}

// QuotaWindow is the time a rule's reported limit refills over, as
// RateLimit-Policy's w states it: the rule's window; for GCRA, whose
// reported limit is Burst+1, the time Burst+1 units take to accrue at
// Limit per Window.
func QuotaWindow(r sdk.Rule) time.Duration {
	if r.Algorithm == sdk.AlgorithmGCRA && r.Limit > 0 {
		return time.Duration(float64(r.Window) / float64(r.Limit) * float64(r.Burst+1))
	}
	return r.Window
}

// Seconds is d in whole seconds, rounded up (0 for d <= 0).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}
