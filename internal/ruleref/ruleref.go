// Package ruleref is the tests' reference model of freqcap's rules: a
// rule evaluated exactly on the log of the units admitted under it, with
// none of a backend's state, so that simulations (sdk's transition
// simulation, policyfile's change property test) can hold every backend
// to what the rule means. It is written out here from docs/DESIGN.md's
// arithmetic, not taken from the backends' code.
package ruleref

import (
	"sort"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Unit is N units admitted at one instant.
type Unit struct {
	At time.Time
	N  int64
}

// Since returns the units of lg at or after from (lg is by time).
func Since(lg []Unit, from time.Time) []Unit {
	i := sort.Search(len(lg), func(i int) bool { return !lg[i].At.Before(from) })
	return lg[i:]
}

// Trim drops the units before from, copying the rest once more than half
// of lg is dropped (so that a long simulation's log does not grow).
func Trim(lg []Unit, from time.Time) []Unit {
	i := sort.Search(len(lg), func(i int) bool { return !lg[i].At.Before(from) })
	if i > len(lg)/2 {
		return append([]Unit(nil), lg[i:]...)
	}
	return lg
}

// AsLog returns r as a sliding log when it is a sliding window whose
// limit is at most driver.LogLine (every backend evaluates it so), else r.
func AsLog(r sdk.Rule) sdk.Rule {
	if r.Algorithm == driver.SlidingWindow && r.Limit <= driver.LogLine {
		r.Algorithm = driver.SlidingLog
	}
	return r
}

// Decide evaluates rule r exactly on the units of lg at or after start,
// at now, for cost. It returns the units r counts before the attempt and
// whether it admits cost.
func Decide(r sdk.Rule, lg []Unit, start, now time.Time, cost int64) (used int64, ok bool) {
	r = AsLog(r)
	units := Since(lg, start)
	count := func(in func(time.Time) bool) int64 {
		var n int64
		for _, u := range units {
			if !u.At.After(now) && in(u.At) {
				n += u.N
			}
		}
		return n
	}
	switch r.Algorithm {
	case driver.FixedWindow:
		var from, to time.Time
		if r.Calendar != driver.NoCalendar {
			// The local unit around now, as time.Date puts its boundaries
			// (the zones the simulations use have no change at them).
			l := now.In(r.Location)
			y, m, d := l.Date()
			switch r.Calendar {
			case driver.Hour:
				from, to = time.Date(y, m, d, l.Hour(), 0, 0, 0, r.Location), time.Date(y, m, d, l.Hour()+1, 0, 0, 0, r.Location)
			case driver.Day:
				from, to = time.Date(y, m, d, 0, 0, 0, 0, r.Location), time.Date(y, m, d+1, 0, 0, 0, 0, r.Location)
			case driver.Week: // ISO: from Monday
				back := (int(l.Weekday()) + 6) % 7
				from, to = time.Date(y, m, d-back, 0, 0, 0, 0, r.Location), time.Date(y, m, d-back+7, 0, 0, 0, 0, r.Location)
			case driver.Month:
				from, to = time.Date(y, m, 1, 0, 0, 0, 0, r.Location), time.Date(y, m+1, 1, 0, 0, 0, 0, r.Location)
			}
		} else {
			w := int64(r.Window)
			from = time.Unix(0, now.UnixNano()/w*w)
			to = from.Add(r.Window)
		}
		used = count(func(t time.Time) bool { return !t.Before(from) && t.Before(to) })
		return used, used+cost <= r.Limit
	case driver.SlidingWindow:
		size := int64((r.Window / time.Duration(r.SubWindows)).Truncate(time.Millisecond))
		back := (int64(r.Window) + size - 1) / size
		oldest := now.UnixNano()/size - back
		used = count(func(t time.Time) bool { return t.UnixNano()/size >= oldest })
		return used, used+cost <= r.Limit
	case driver.SlidingLog:
		from := now.Add(-r.Window)
		used = count(func(t time.Time) bool { return t.After(from) })
		return used, used+cost <= r.Limit
	}
	// GCRA: replay the theoretical arrival time over the units.
	tt := max((r.Window / time.Duration(r.Limit)).Truncate(time.Microsecond), time.Microsecond)
	tol := tt * time.Duration(r.Burst+1)
	var tat time.Time
	for _, u := range units {
		if u.At.After(now) {
			break
		}
		tat = later(tat, u.At).Add(tt * time.Duration(u.N))
	}
	ttl := max(tat.Sub(now), 0)
	rem := min(max(int64((tol-ttl)/tt), 0), r.Burst+1)
	if tol-ttl < 0 {
		rem = 0
	}
	used = r.Burst + 1 - rem
	next := later(tat, now).Add(tt * time.Duration(cost))
	return used, !next.Add(-tol).After(now)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
