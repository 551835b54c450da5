package messaging_test

import (
	"fmt"
	"slices"
	"time"
)

// The oracle is the test's own model of the policy (simPolicy): its own
// counts per window and its own reading of the local clock, sharing no
// code with freqcap, against which every decision is checked.

// oracleRule is one rule of simPolicy as the oracle counts it.
type oracleRule struct {
	name  string
	limit int64
	// keep returns the units the rule keeps from priority p (headroom).
	keep func(p int) int64
	// window is a sliding window's length; calendar rules have none, and
	// key names their window instead.
	window time.Duration
	// key is the counter an attempt by rc at at counts in.
	key func(rc *recipient, a *attempt, at time.Time) string
}

// oracleRules mirror simPolicy's rules, in its order.
var oracleRules = []oracleRule{
	{name: "recv-1m", limit: 15, keep: noKeep, window: time.Minute,
		key: func(rc *recipient, _ *attempt, _ time.Time) string { return rc.person }},
	{name: "recv-24h", limit: 50, window: 24 * time.Hour,
		keep: func(p int) int64 {
			switch {
			case p < 1:
				return 10
			case p < 2:
				return 5
			}
			return 0
		},
		key: func(rc *recipient, _ *attempt, _ time.Time) string { return rc.person }},
	{name: "content-59s", limit: 2, keep: noKeep, window: 59 * time.Second,
		key: func(rc *recipient, a *attempt, _ time.Time) string { return rc.person + "|" + a.content }},
	{name: "daily", limit: 3,
		keep: func(p int) int64 { return int64(b2i(p < 1)) },
		key: func(rc *recipient, a *attempt, at time.Time) string {
			// The local date: the day window is every instant whose
			// wall clock in the zone reads that date.
			return rc.person + "|" + a.campaign + "|" + at.In(rc.zone).Format("2006-01-02")
		}},
	{name: "weekly", limit: 100, keep: noKeep,
		key: func(rc *recipient, _ *attempt, at time.Time) string {
			y, w := at.In(rc.zone).ISOWeek()
			return fmt.Sprintf("%s|%d-W%02d", rc.person, y, w)
		}},
}

func noKeep(int) int64 { return 0 }

// inQuiet reports whether at is within quiet hours, 21:00 to 08:00 by the
// wall clock of loc.
func inQuiet(at time.Time, loc *time.Location) bool {
	h, _, _ := at.In(loc).Clock()
	return h >= 21 || h < 8
}

// quietEnd returns when the quiet hours holding at end: the first instant
// after it whose local clock reads 08:00 (no zone of the simulation skips
// or repeats 08:00).
func quietEnd(at time.Time, loc *time.Location) time.Time {
	l := at.In(loc)
	y, m, d := l.Date()
	if l.Hour() >= 8 {
		d++
	}
	return time.Date(y, m, d, 8, 0, 0, 0, loc)
}

// oracle holds the units counted per rule and key: a sliding rule's as
// their instants, a calendar rule's as a count.
type oracle struct {
	times  []map[string][]time.Time // per rule (sliding)
	counts []map[string]int64       // per rule (calendar)
}

func newOracle() *oracle {
	o := &oracle{}
	for range oracleRules {
		o.times = append(o.times, map[string][]time.Time{})
		o.counts = append(o.counts, map[string]int64{})
	}
	return o
}

// used returns rule i's count for key at at: units within (at-window, at]
// for a sliding rule, the window's count for a calendar rule.
func (o *oracle) used(i int, key string, at time.Time) int64 {
	r := oracleRules[i]
	if r.window == 0 {
		return o.counts[i][key]
	}
	ts := o.times[i][key]
	from := at.Add(-r.window)
	k := 0
	for k < len(ts) && !ts[k].After(from) {
		k++
	}
	o.times[i][key] = ts[k:] // those out of the window never count again
	return int64(len(ts) - k)
}

func (o *oracle) add(i int, key string, at time.Time) {
	if oracleRules[i].window == 0 {
		o.counts[i][key]++
		return
	}
	o.times[i][key] = append(o.times[i][key], at)
}

// verdict is what the oracle expects of an attempt.
type verdict struct {
	allowed  bool
	quiet    bool     // denied for quiet hours
	exempted []string // rules that would deny but the class exempts
	headroom bool     // some rule denies only for its headroom
	denied   []string // enforced rules that deny
	used     []int64  // per rule, before the attempt
	keys     []string
}

// classOf returns how class exempts: from every rule (all), counted, and
// from quiet hours.
func classOf(class string) (all, counted, quiet bool) {
	switch class {
	case classOTP:
		return true, true, true
	case classSecurity:
		return true, false, false
	case classAlert:
		return false, false, true
	}
	return false, false, false
}

// judge returns the oracle's verdict on a (cost 1) at at.
func (o *oracle) judge(rc *recipient, a *attempt, at time.Time) verdict {
	all, _, passQuiet := classOf(a.class)
	v := verdict{allowed: true}
	for i, r := range oracleRules {
		key := r.key(rc, a, at)
		u := o.used(i, key, at)
		v.keys, v.used = append(v.keys, key), append(v.used, u)
		if u+1 <= r.limit-r.keep(a.priority) {
			continue
		}
		if all {
			v.exempted = append(v.exempted, r.name)
			continue
		}
		v.allowed = false
		v.denied = append(v.denied, r.name)
		if u+1 <= r.limit {
			v.headroom = true
		}
	}
	if inQuiet(at, rc.zone) && !passQuiet {
		v.allowed, v.quiet = false, true
	}
	return v
}

// apply counts an attempt the oracle judged v and the backend allowed.
func (o *oracle) apply(a *attempt, v verdict, at time.Time) {
	all, counted, _ := classOf(a.class)
	if all && !counted {
		return
	}
	for i := range oracleRules {
		o.add(i, v.keys[i], at)
	}
}

// sameNames reports whether two lists of rule names hold the same names.
func sameNames(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
