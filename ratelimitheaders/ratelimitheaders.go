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
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
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
	h.Set("RateLimit-Policy", policyValue(p, d))
	setRateLimit(h, d)
}

// policyValue is RateLimit-Policy's value for d under p.
func policyValue(p *sdk.Policy, d sdk.Decision) string {
	cfg := map[string]sdk.Rule{}
	for _, r := range p.Rules() {
		cfg[r.Name] = r
	}
	items := make([]string, 0, len(d.Rules))
	for _, rd := range d.Rules {
		items = append(items, fmt.Sprintf("%q;q=%d;w=%d", rd.Rule, rd.Limit, Seconds(QuotaWindow(cfg[rd.Rule]))))
	}
	return strings.Join(items, ", ")
}

// Cache sets the same headers as Set, remembering each policy's last
// RateLimit-Policy value: the next decision under the policy with the
// same rules and limits, in the same order, reuses it instead of
// formatting it again. The zero Cache is ready; it is safe for concurrent
// use. A server answering many decisions under few policies keeps one.
type Cache struct{ m sync.Map } // *sdk.Policy → *cachedPolicy

var policyKey = http.CanonicalHeaderKey("RateLimit-Policy")

type cachedPolicy struct {
	rules  []string
	limits []int64
	value  string
}

func (c *cachedPolicy) fits(d sdk.Decision) bool {
	if len(c.rules) != len(d.Rules) {
		return false
	}
	for i, rd := range d.Rules {
		if c.rules[i] != rd.Rule || c.limits[i] != rd.Limit {
			return false
		}
	}
	return true
}

// Set is Set with p's RateLimit-Policy value remembered.
func (c *Cache) Set(h http.Header, p *sdk.Policy, d sdk.Decision) {
	if len(d.Rules) == 0 {
		return
	}
	v, ok := c.m.Load(p)
	if !ok || !v.(*cachedPolicy).fits(d) {
		cp := &cachedPolicy{rules: make([]string, len(d.Rules)), limits: make([]int64, len(d.Rules)), value: policyValue(p, d)}
		for i, rd := range d.Rules {
			cp.rules[i], cp.limits[i] = rd.Rule, rd.Limit
		}
		c.m.Store(p, cp)
		v = cp
	}
	h[policyKey] = []string{v.(*cachedPolicy).value}
	setRateLimit(h, d)
}

// setRateLimit sets RateLimit for d (which has rule states).
func setRateLimit(h http.Header, d sdk.Decision) {
	best := Governing(d)
	rd := d.Rules[best]
	t := rd.ResetAfter
	if !rd.Allowed {
		t = rd.RetryAfter
	}
	b := strconv.AppendQuote(make([]byte, 0, 32+len(rd.Rule)), rd.Rule) // as %q
	b = append(b, ";r="...)
	// Within [0, Limit] whatever a backend reported: never a negative or
	// wrapped figure.
	b = strconv.AppendInt(b, min(max(rd.Remaining, 0), max(rd.Limit, 0)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Seconds(t), 10)
	h.Set("RateLimit", string(b))
}

// Governing is the index in d.Rules of the rule RateLimit reports, the
// most restrictive one: when d denies, the denying rule with the longest
// wait; when it allows, the rule with the fewest units remaining (of
// those, the one resetting last). -1 when d has no rule states (a
// degraded decision). Rules that cannot deny this attempt (shadow rules,
// rules its message class is exempt from) govern only when no other rule
// can.
func Governing(d sdk.Decision) int {
	if i := governing(d, true); i >= 0 {
		return i
	}
	return governing(d, false)
}

// governing is Governing over the enforced rules only (enforced) or all.
func governing(d sdk.Decision, enforced bool) int {
	best := -1
	for i, rd := range d.Rules {
		if enforced && (rd.Shadow || rd.Exempt != driver.NotExempt) {
			continue
		}
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
	if r.Algorithm == driver.GCRA && r.Limit > 0 {
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
