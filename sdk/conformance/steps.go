package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// Most cases are tables of steps: (advance, operation, cost, want), read
// against a base instant (an aligned window boundary, or the backend's
// clock when the case starts). Expected durations are given as instants
// relative to that base, so the same table holds on a fake clock (where
// every step happens exactly at base+at) and on a real one (where each
// duration is measured from the step's own Decision.At).

// op is what a step does.
type op uint8

const (
	take op = iota
	peek
	reserve // keeps the reservation under step.id
	commit  // commits the reservation step.id
	cancel  // cancels the reservation step.id
	inspect
)

func (o op) String() string {
	return [...]string{"Take", "Peek", "Reserve", "Commit", "Cancel", "Inspect"}[o]
}

// step is one row of a table.
type step struct {
	// at: first advance the backend's clock to base+at (0: at once).
	at time.Duration
	// by: the step must be decided before base+by (0: no bound); a later
	// decision is a late step (on a real clock the case is retried, with
	// a log line).
	by time.Duration
	// fake: run this step only on a fake clock (an exact instant a real
	// clock cannot be stopped at).
	fake bool
	op   op
	cost int64    // 0 means 1
	only []string // the case's rules this step names, in case order (nil: all)
	id   string   // reserve, commit, cancel: the reservation's name
	ttl  time.Duration
	// zone: take, peek, reserve: the attempt's zone (sdk.Attempt.Zone;
	// nil: none).
	zone *time.Location
	// want: the expected verdict and, per rule named, the expected
	// decision (nil: only the verdict) or used counts (used).
	want verdict
}

// verdict is a step's expected outcome.
type verdict struct {
	allowed bool
	rules   []ruleAt // per rule named (nil: not checked)
	used    []int64  // per rule named, only Used (nil: not checked)
	err     error    // commit, cancel: errors.Is(err, want.err); nil: no error
}

// ruleAt is a rule's expected decision, its timings as instants relative
// to the table's base (0: a zero duration).
type ruleAt struct {
	ok          bool
	used, limit int64
	reset       time.Duration // ResetAfter = base+reset - At
	retry       time.Duration // RetryAfter = base+retry - At
	tooHigh     bool
}

// admits is a rule that admits, reset at base+reset.
func admits(used, limit int64, reset time.Duration) ruleAt {
	return ruleAt{ok: true, used: used, limit: limit, reset: reset}
}

// denies is a rule that denies until base+retry, reset at base+reset.
func denies(used, limit int64, reset, retry time.Duration) ruleAt {
	return ruleAt{used: used, limit: limit, reset: reset, retry: retry}
}

// never is a rule for which the cost can never fit.
func never(used, limit int64, reset time.Duration) ruleAt {
	return ruleAt{used: used, limit: limit, reset: reset, tooHigh: true}
}

func allowed(rules ...ruleAt) verdict { return verdict{allowed: true, rules: rules} }
func denied(rules ...ruleAt) verdict  { return verdict{rules: rules} }
func counts(ok bool, used ...int64) verdict {
	return verdict{allowed: ok, used: used}
}

// run plays steps against rules from base. It returns the decisions, one
// per step (the zero Decision for commits, cancels and skipped steps).
func (e *env) run(base time.Time, rules []sdk.Rule, steps []step) []sdk.Decision {
	e.t.Helper()
	out := make([]sdk.Decision, len(steps))
	held := map[string]*sdk.Reservation{}
	for i, s := range steps {
		if s.fake && e.fake == nil {
			continue
		}
		if s.at > 0 {
			e.advanceTo(base.Add(s.at))
		}
		rs := rules
		if s.only != nil {
			rs = nil
			for _, r := range rules {
				for _, n := range s.only {
					if r.Name == n {
						rs = append(rs, r)
					}
				}
			}
		}
		cost := max(s.cost, 1)
		label := fmt.Sprintf("step %d: %v(%s, cost %d) at base+%v", i+1, s.op, names(rs), cost, s.at)
		if s.zone != nil {
			label = fmt.Sprintf("step %d: %v(%s, cost %d, zone %s) at base+%v", i+1, s.op, names(rs), cost, s.zone, s.at)
		}
		a := sdk.Attempt{Subject: e.subject(), Cost: cost, Zone: s.zone}
		var d sdk.Decision
		switch s.op {
		case take:
			d = e.takeAttempt(a, rs...)
		case peek:
			d = e.peekAttempt(a, rs...)
		case inspect:
			d, _ = e.inspect(rs...)
		case reserve:
			var r *sdk.Reservation
			d, r = e.reserveAttempt(a, s.ttl, rs...)
			held[s.id] = r
			label = fmt.Sprintf("step %d: Reserve %s(%s, cost %d, ttl %v) at base+%v", i+1, s.id, names(rs), cost, s.ttl, s.at)
		case commit, cancel:
			label = fmt.Sprintf("step %d: %v %s at base+%v", i+1, s.op, s.id, s.at)
			r, ok := held[s.id]
			if !ok {
				e.t.Fatalf("%s: no such reservation in the table (a bug in the case)", label)
			}
			if r == nil {
				if s.want.err == nil {
					e.t.Errorf("%s: the reservation was denied, want it held", label)
				}
				continue // a denied Reserve returns no reservation
			}
			var err error
			if s.op == commit {
				err = r.Commit(bg())
			} else {
				err = r.Cancel(bg())
			}
			if (s.want.err == nil) != (err == nil) || (err != nil && !errors.Is(err, s.want.err)) {
				e.t.Errorf("%s = %v, want %v", label, err, s.want.err)
			}
			continue
		}
		if s.by > 0 {
			e.before(d, base.Add(s.by), label)
		}
		out[i] = d
		e.check(label, base, d, s.want)
	}
	return out
}

// check holds d to w.
func (e *env) check(label string, base time.Time, d sdk.Decision, w verdict) {
	e.t.Helper()
	if d.Allowed != w.allowed {
		e.t.Errorf("%s: Allowed = %t, want %t (rules %s)", label, d.Allowed, w.allowed, fmtRules(d.Rules))
	}
	for i, r := range w.rules {
		at := func(off time.Duration) time.Duration {
			if off == 0 {
				return 0
			}
			return base.Add(off).Sub(d.At)
		}
		wr := want(r.ok, r.used, r.limit, at(r.reset), at(r.retry))
		wr.CostTooHigh = r.tooHigh
		if g := d.Rules[i]; !sameRule(g, wr, e.tol) {
			e.t.Errorf("%s rule %s = %s, want %s", label, g.Rule, fmtRule(g), fmtRule(wr))
		}
	}
	for i, u := range w.used {
		if g := d.Rules[i]; g.Used != u {
			e.t.Errorf("%s rule %s = %s, want used %d", label, g.Rule, fmtRule(g), u)
		}
	}
	e.summary(label, d)
}
