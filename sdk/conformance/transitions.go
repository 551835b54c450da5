package conformance

import (
	"fmt"
	"slices"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The transition cases: one per kind of change of a rule's identity
// (sdk.WithChange). Each runs the same story on two subjects against an
// old rule of limit 5 and a new rule of limit 4 (Epoch 2) named alike:
//
//   - before the change, A takes 3 and B takes 5 (capped);
//   - right after it, B is still denied (the old rule, evaluated as the
//     new one's predecessor, still caps: Rules[0].Before = 2), A is
//     admitted once (the old rule at 4/5, the new one seeded with A's 3
//     units: 4/4) and then denied by the new rule (no attempt admitted past
//     the new limit because of the change), Denied naming the rule once;
//   - halfway into the old state's hold (fake clock only), B is still
//     denied by the old rule;
//   - after the old rule's reach (driver.Rule.Reach), the predecessor is
//     no longer evaluated, and A gets what the new rule, holding the
//     carried units, says.
type transition struct {
	old, new func(e *env) sdk.Rule
	// align: the instant the story starts at (an aligned boundary of both
	// rules' windows), from the backend's clock now.
	align func(e *env) time.Time
	// hold: how long after the change the old rule still caps B (the old
	// state's units all date from the start).
	hold func(e *env) time.Duration
	// after: A's verdict just after the old rule's reach (nil: the case
	// cannot wait that long on a real clock: the steps are skipped there).
	after func(e *env) *bool
	// afterB: B's then, when it differs from A's (nil: the same).
	afterB func(e *env) *bool
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// w is the unit window of the transition cases: a minute on a fake clock,
// a second on a real one (longer on a retry after a late step: env.slow).
func (e *env) w() time.Duration { return e.pick(time.Minute, e.slow*time.Second) }

// alignW aligns the story to a boundary of 2w (so of w and of its cells
// too), a little after it.
func alignW(e *env) time.Time {
	w := e.w()
	return e.alignTo(2*w, e.pick(time.Millisecond, 5*time.Millisecond))
}

var transitions = []struct {
	name string
	tr   transition
}{
	{"WindowChange", transition{
		old:   func(e *env) sdk.Rule { return e.fixed("r", 5, e.w()) },
		new:   func(e *env) sdk.Rule { return e.fixed("r", 4, 2*e.w()) },
		align: alignW,
		hold:  func(e *env) time.Duration { return e.w() / 2 },
		after: func(e *env) *bool { return no() }, // the 2w window still holds A's 4
	}},
	{"SubWindowsChange", transition{
		old:   func(e *env) sdk.Rule { return e.sliding("r", 5, 2*e.w(), 10) },
		new:   func(e *env) sdk.Rule { return e.sliding("r", 4, 2*e.w(), 4) },
		align: alignW,
		hold:  func(e *env) time.Duration { return e.w() },
		// limits this small (driver.LogLine) make both exact logs, whatever
		// their cells: A's units leave at 2w, the old rule's reach
		after: func(e *env) *bool { return yes() },
	}},
	{"FixedToSliding", transition{
		old:   func(e *env) sdk.Rule { return e.fixed("r", 5, e.w()) },
		new:   func(e *env) sdk.Rule { return e.sliding("r", 4, 2*e.w(), 10) },
		align: alignW,
		hold:  func(e *env) time.Duration { return e.w() / 2 },
		after: func(e *env) *bool { return no() }, // A's cell leaves at 2.2w
	}},
	{"SlidingToLog", transition{
		old:   func(e *env) sdk.Rule { return e.sliding("r", 5, e.w(), 10) },
		new:   func(e *env) sdk.Rule { return e.log("r", 4, 2*e.w()) },
		align: alignW,
		hold:  func(e *env) time.Duration { return e.w() / 2 },
		after: func(e *env) *bool { return no() }, // A's entries leave at 2w
	}},
	{"LogToGCRA", transition{
		old:   func(e *env) sdk.Rule { return e.log("r", 5, e.w()) },
		new:   func(e *env) sdk.Rule { return e.gcra("r", 4, 2*e.w(), 3) },
		align: alignW,
		hold:  func(e *env) time.Duration { return e.w() / 2 },
		// T = w/2: at 1.1w the bucket has drained two units: A is admitted
		after: func(e *env) *bool { return yes() },
	}},
	{"GCRAToFixed", transition{
		old:   func(e *env) sdk.Rule { return e.gcra("r", 5, e.w(), 4) },
		new:   func(e *env) sdk.Rule { return e.fixed("r", 4, 2*e.w()) },
		align: alignW,
		// B's bucket is full until one emission interval (w/5) has passed
		hold:  func(e *env) time.Duration { return e.w() / 10 },
		after: func(e *env) *bool { return no() },
	}},
	{"EpochFixedToDaily", transition{
		old: func(e *env) sdk.Rule { return e.fixed("r", 5, e.pick(24*time.Hour, time.Second)) },
		new: func(e *env) sdk.Rule { return e.calendar("r", 4, driver.Day, mustZone(e, "Asia/Shanghai")) },
		align: func(e *env) time.Time {
			// A UTC midnight (08:00 in Shanghai) on a fake clock; on a
			// real one a second, with room before Shanghai's midnight.
			e.ensureRoomIn(mustZone(e, "Asia/Shanghai"), time.Minute)
			return e.alignTo(e.pick(24*time.Hour, time.Second), e.pick(time.Millisecond, 5*time.Millisecond))
		},
		hold: func(e *env) time.Duration { return e.pick(12*time.Hour, 500*time.Millisecond) },
		// fake: 24h later it is another day in Shanghai: A starts afresh;
		// real: a second later, the same day, A's 4 still count
		after: func(e *env) *bool {
			if e.fake != nil {
				return yes()
			}
			return no()
		},
	}},
	{"ZoneChange", transition{
		old: func(e *env) sdk.Rule { return e.calendar("r", 5, driver.Day, mustZone(e, "America/New_York")) },
		new: func(e *env) sdk.Rule { return e.calendar("r", 4, driver.Day, mustZone(e, "Asia/Shanghai")) },
		align: func(e *env) time.Time {
			ny, sh := mustZone(e, "America/New_York"), mustZone(e, "Asia/Shanghai")
			if e.fake != nil {
				// New York's midnight (05:00 UTC, 13:00 in Shanghai).
				now := e.now().In(ny)
				mid := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, ny)
				return e.advanceTo(mid.Add(time.Millisecond))
			}
			e.ensureRoomIn(ny, time.Minute)
			e.ensureRoomIn(sh, time.Minute)
			return e.now()
		},
		hold: func(e *env) time.Duration { return e.pick(12*time.Hour, 500*time.Millisecond) },
		// 25h later it is another day in Shanghai too: A starts afresh
		after: func(e *env) *bool {
			if e.fake != nil {
				return yes()
			}
			return nil
		},
		// B's attempt while the old rule held (12h on: already the next
		// day in Shanghai, still the same in New York) carried its 5
		// units into that Shanghai day: B is still capped
		afterB: func(e *env) *bool { return no() },
	}},
}

func mustZone(e *env, name string) *time.Location {
	e.t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		e.t.Fatalf("LoadLocation(%q) = %v", name, err)
	}
	return loc
}

// ensureRoomIn makes sure the backend's clock is at least room before the
// next midnight in loc, waiting for that midnight if not.
func (e *env) ensureRoomIn(loc *time.Location, room time.Duration) {
	e.t.Helper()
	now := e.now().In(loc)
	mid := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
	if mid.Sub(now) < room {
		e.advanceTo(mid)
	}
}

// policyWith is policy "p" of rules with the test's trail settings and
// opts.
func (e *env) policyWith(opts []sdk.PolicyOption, rules ...sdk.Rule) *sdk.Policy {
	e.t.Helper()
	p, err := sdk.NewPolicy("p", rules, append([]sdk.PolicyOption{sdk.WithTrail(e.trailMax, e.trailTTL)}, opts...)...)
	if err != nil {
		e.t.Fatalf("NewPolicy(p) = %v", err)
	}
	return p
}

// takeP takes cost for the subject sub ("" : the test's) under p.
func (e *env) takeP(label string, p *sdk.Policy, sub string, cost int64) sdk.Decision {
	e.t.Helper()
	s := e.subject()
	if sub != "" {
		s = e.subject(sub)
	}
	d, err := e.lim.Take(bg(), p, sdk.Attempt{Subject: s, Cost: cost})
	if err != nil {
		e.t.Fatalf("%s = error %v, want a decision", label, err)
	}
	if d.At.IsZero() || d.Degraded {
		e.t.Fatalf("%s: At %v, Degraded %t, want the backend's clock and a real decision", label, d.At, d.Degraded)
	}
	return d
}

// befores returns the Before of each rule decision of d.
func befores(d sdk.Decision) []int64 {
	out := make([]int64, len(d.Rules))
	for i, r := range d.Rules {
		out[i] = r.Before
	}
	return out
}

func runTransition(tr transition) func(e *env) {
	return func(e *env) {
		oldR, newR := tr.old(e), tr.new(e)
		newR.Epoch = 2
		reach := driverReach(oldR)
		t0 := tr.align(e)
		// Every step of the story's first part must come before the old
		// state drains or its window ends: within a tenth of w.
		quick := t0.Add(e.w() / 10)
		oldP := e.policy(oldR)
		d := e.takeP("Take(old, cost 3) for A", oldP, "a", 3)
		e.before(d, quick, "Take(old) for A")
		if !d.Allowed {
			e.t.Fatalf("Take(old, cost 3) for A = denied %s, want allowed", fmtRules(d.Rules))
		}
		if d = e.takeP("Take(old, cost 5) for B", oldP, "b", 5); !d.Allowed {
			e.t.Fatalf("Take(old, cost 5) for B = denied %s, want allowed", fmtRules(d.Rules))
		}
		if d = e.takeP("Take(old) for capped B", oldP, "b", 1); d.Allowed {
			e.t.Fatalf("Take(old) for capped B = allowed %s, want denied", fmtRules(d.Rules))
		}
		at := d.At
		newP := e.policyWith([]sdk.PolicyOption{sdk.WithChange("r", sdk.Change{From: oldR, At: at, Version: 2})}, newR)

		// B, capped before the change, stays capped by the old rule.
		d = e.takeP("Take(new) for B right after the change", newP, "b", 1)
		e.before(d, quick, "Take(new) for B")
		if d.Allowed || !slices.Equal(befores(d), []int64{2, 0}) || d.Rules[0].Allowed || d.Rules[0].Used != 5 ||
			!slices.Equal(d.Denied, []string{"r"}) {
			e.t.Errorf("Take(new) for B right after the change = allowed %t, denied %v, rules %s (before %v), want denied by the old rule at 5/5 (before [2 0]), Denied [r]",
				d.Allowed, d.Denied, fmtRules(d.Rules), befores(d))
		}
		// The new rule, seeded with B's 5 units (more than its limit of 4:
		// all count), denies too.
		if len(d.Rules) == 2 && (d.Rules[1].Allowed || d.Rules[1].Used < 4) {
			e.t.Errorf("Take(new) for B right after the change: new rule = %s, want it seeded with B's units (used >= 4) and denying", fmtRule(d.Rules[1]))
		}
		// A: the old rule at 4/5, the new one seeded with A's 3 units.
		d = e.takeP("Take(new) for A right after the change", newP, "a", 1)
		e.before(d, quick, "Take(new) for A")
		if !d.Allowed || len(d.Rules) != 2 || d.Rules[0].Used != 4 || d.Rules[1].Used != 4 || d.Rules[1].Limit != 4 {
			e.t.Errorf("Take(new) for A right after the change = allowed %t, rules %s, want allowed with the old rule at 4/5 and the new one at 4/4 (3 carried)",
				d.Allowed, fmtRules(d.Rules))
		}
		d = e.takeP("Take(new) for A at the new limit", newP, "a", 1)
		e.before(d, quick, "Take(new) for A at the new limit")
		if d.Allowed || len(d.Rules) != 2 || !d.Rules[0].Allowed || d.Rules[1].Allowed || !slices.Equal(d.Denied, []string{"r"}) {
			e.t.Errorf("Take(new) for A at the new limit = allowed %t, denied %v, rules %s, want denied by the new rule alone (4/4), Denied [r]",
				d.Allowed, d.Denied, fmtRules(d.Rules))
		}

		if e.fake != nil {
			e.advanceTo(at.Add(tr.hold(e)))
			d = e.takeP("Take(new) for B while the old rule holds", newP, "b", 1)
			if d.Allowed || len(d.Rules) != 2 || d.Rules[0].Allowed {
				e.t.Errorf("Take(new) for B %v after the change = allowed %t, rules %s, want denied by the old rule",
					tr.hold(e), d.Allowed, fmtRules(d.Rules))
			}
			e.advanceTo(at.Add(reach - time.Millisecond))
			d = e.peekP(newP, "a")
			if len(d.Rules) != 2 {
				e.t.Errorf("Peek(new) 1ms before the old rule's reach (%v) = %d rules, want 2 (still evaluated)", reach, len(d.Rules))
			}
		}
		after := tr.after(e)
		if after == nil {
			return
		}
		margin := e.w() / 10
		e.advanceTo(at.Add(reach + margin))
		// B, capped throughout, got the new rule seeded by its first
		// (denied) attempt after the change: the new rule caps B as A.
		d = e.takeP("Take(new) for B after the old rule's reach", newP, "b", 1)
		e.before(d, at.Add(reach+2*margin), "Take(new) for B after the old rule's reach")
		afterB := after
		if tr.afterB != nil && e.fake != nil {
			afterB = tr.afterB(e)
		}
		if len(d.Rules) != 1 || d.Allowed != *afterB {
			e.t.Errorf("Take(new) for B after the old rule's reach = allowed %t, rules %s, want the new rule alone, allowed %t",
				d.Allowed, fmtRules(d.Rules), *afterB)
		}
		d = e.takeP("Take(new) for A after the old rule's reach", newP, "a", 1)
		e.before(d, at.Add(reach+2*margin), "Take(new) for A after the old rule's reach")
		if len(d.Rules) != 1 || d.Rules[0].Before != 0 {
			e.t.Errorf("Take(new) for A after the old rule's reach (%v) = rules %s (before %v), want the new rule alone", reach, fmtRules(d.Rules), befores(d))
		}
		if d.Allowed != *after {
			e.t.Errorf("Take(new) for A after the old rule's reach = allowed %t, rules %s, want %t", d.Allowed, fmtRules(d.Rules), *after)
		}
	}
}

// peekP peeks a cost of 1 for the subject sub ("": the test's) under p.
func (e *env) peekP(p *sdk.Policy, sub string) sdk.Decision {
	e.t.Helper()
	s := e.subject()
	if sub != "" {
		s = e.subject(sub)
	}
	d, err := e.lim.Peek(bg(), p, sdk.Attempt{Subject: s})
	if err != nil {
		e.t.Fatalf("Peek(%s) = %v", sub, err)
	}
	return d
}

// driverReach is the reach of an sdk rule (normalized by a policy).
func driverReach(r sdk.Rule) time.Duration {
	p, err := sdk.NewPolicy("reach", []sdk.Rule{r})
	if err != nil {
		panic(fmt.Sprintf("conformance: rule %q: %v", r.Name, err))
	}
	n := p.Rules()[0]
	return driver.Rule{
		Algorithm: n.Algorithm, Limit: n.Limit, Window: n.Window, SubWindows: n.SubWindows,
		Burst: n.Burst, Calendar: n.Calendar, Location: n.Location,
	}.Reach()
}

func transitionCases() []testCase {
	var out []testCase
	for _, t := range transitions {
		out = append(out, testCase{name: t.name, needs: peeker, run: runTransition(t.tr)})
	}
	return out
}
