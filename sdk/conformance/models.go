package conformance

import (
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Small reference models for the cases whose expectations depend on the
// exact instants of earlier calls (real clocks): fed each call's
// Result.Now, they give the answer docs/DESIGN.md prescribes.

// logModel is a SlidingLog: one instant per unit.
type logModel struct {
	limit int64
	w     time.Duration
	ts    []time.Time // oldest first
}

func (m *logModel) live(now time.Time) []time.Time {
	from := now.Add(-m.w)
	for i, t := range m.ts {
		if t.After(from) {
			return m.ts[i:]
		}
	}
	return nil
}

// step returns the result of cost at now, consuming when consume and
// admitted.
func (m *logModel) step(now time.Time, cost int64, consume bool) sdk.RuleDecision {
	live := m.live(now)
	used := int64(len(live))
	var res sdk.RuleDecision
	switch {
	case cost > m.limit:
		res = tooHigh(used, m.limit, 0)
	case used+cost > m.limit:
		need := used + cost - m.limit
		res = want(false, used, m.limit, 0, live[need-1].Add(m.w).Sub(now))
	default:
		res = want(true, used, m.limit, 0, 0)
		if consume {
			for range cost {
				m.ts = append(m.ts, now)
			}
			live = m.live(now)
			res.Used += cost
			res.Remaining -= cost
		}
	}
	if len(live) > 0 {
		res.ResetAfter = live[len(live)-1].Add(m.w).Sub(now)
	}
	return res
}

// gcraModel is redis-cell's GCRA.
type gcraModel struct {
	t, tol time.Duration
	limit  int64 // Burst+1
	tat    time.Time
}

func newGCRAModel(r sdk.Rule) *gcraModel {
	t, tol, limit := driver.Rule{Algorithm: driver.GCRA, Limit: r.Limit, Window: r.Window, Burst: r.Burst}.GCRAParams()
	return &gcraModel{t: t, tol: tol, limit: limit}
}

// report gives Remaining = floor((tol-ttl)/T) in exact integers.
func (m *gcraModel) report(tat, now time.Time) (used int64, ttl time.Duration) {
	if tat.After(now) {
		ttl = tat.Sub(now)
	}
	a, b := int64(m.tol-ttl), int64(m.t)
	rem := a / b
	if a%b != 0 && a < 0 {
		rem--
	}
	rem = min(max(rem, 0), m.limit)
	return m.limit - rem, ttl
}

func (m *gcraModel) step(now time.Time, cost int64, consume bool) sdk.RuleDecision {
	if cost > m.limit {
		used, ttl := m.report(m.tat, now)
		return tooHigh(used, m.limit, ttl)
	}
	base := m.tat
	if base.Before(now) {
		base = now
	}
	next := base.Add(m.t * time.Duration(cost))
	if d := next.Add(-m.tol).Sub(now); d > 0 {
		used, ttl := m.report(m.tat, now)
		return want(false, used, m.limit, ttl, d)
	}
	tat := m.tat
	if consume {
		tat, m.tat = next, next
	}
	used, ttl := m.report(tat, now)
	return want(true, used, m.limit, ttl, 0)
}

// model is a reference model of one rule: step returns what the rule
// must report for a request of cost at now, and records it if consume and
// the request is admitted.
type model interface {
	step(now time.Time, cost int64, consume bool) sdk.RuleDecision
}

// checker returns a check that holds a single-rule result to m's answer
// for the instant the backend reported (d.At).
func (e *env) checker(m model) func(label string, d sdk.Decision, cost int64, consume bool) {
	return func(label string, d sdk.Decision, cost int64, consume bool) {
		e.t.Helper()
		wr := m.step(d.At, cost, consume)
		e.expect(label, d, wr.Allowed, wr)
	}
}
