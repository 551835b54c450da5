package sdk_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/ruleref"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestTransitionSimulation plays 3 days of seeded random traffic of many
// users on a fake clock against a policy whose one rule changes every 6
// hours through every kind of change (window, sub-windows, algorithm in
// every direction the conformance cases test, epoch-fixed to daily, time
// zone), each later policy carrying the whole history as WithChange (as
// sdk/policystore derives it). An independent reference model keeps the
// exact admission log of each user and holds every decision to it:
//
//   - old rule: every predecessor still in reach, evaluated exactly on the
//     units admitted since it came into force, must admit every attempt
//     the limiter admits, and an attempt it denies must be denied (a
//     person capped before the change stays capped while the old rule
//     caps them);
//   - new rule: the current rule, evaluated exactly on what the old state
//     proves (the newest predecessor's count at the user's first admission
//     after the change, placed there) plus every unit admitted since, must
//     admit every attempt the limiter admits (no one admitted past the new
//     limit because of the change).
//
// The reference counts are lower bounds of the limiter's (its states also
// hold carried units), so any admission the reference refuses is a
// violation. Figures (attempts, admitted, violations) are logged with -v.
func TestTransitionSimulation(t *testing.T) {
	const (
		users  = 120
		period = 6 * time.Hour
		days   = 3
	)
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	by := func(r sdk.Rule) sdk.Rule { return r.By("user") }
	// One rule per version, each change a kind of its own.
	versions := []sdk.Rule{
		by(sdk.FixedWindow("r", 12, time.Hour)),                        // v1
		by(sdk.FixedWindow("r", 15, 2*time.Hour)),                      // window change
		by(sdk.SlidingWindow("r", 15, 2*time.Hour).WithSubWindows(10)), // fixed -> sliding
		by(sdk.SlidingWindow("r", 15, 2*time.Hour).WithSubWindows(4)),  // sub-windows change
		by(sdk.SlidingLog("r", 10, time.Hour)),                         // sliding -> log
		by(sdk.GCRA("r", 10, time.Hour, 4)),                            // log -> gcra
		by(sdk.FixedWindow("r", 12, time.Hour)),                        // gcra -> fixed
		by(sdk.Daily("r", 60, sh)),                                     // epoch-fixed -> daily
		by(sdk.Daily("r", 60, ny)),                                     // zone change
		by(sdk.SlidingWindow("r", 20, 3*time.Hour).WithSubWindows(6)),  // daily -> sliding
		by(sdk.GCRA("r", 20, 2*time.Hour, 9)),                          // sliding -> gcra
		by(sdk.SlidingLog("r", 15, 90*time.Minute)),                    // gcra -> log
	}
	if len(versions)*int(period) != days*24*int(time.Hour) {
		t.Fatalf("%d versions of %v do not cover %d days", len(versions), period, days)
	}
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * period) } // version k+1 starts
	policies := make([]*sdk.Policy, len(versions))
	for k := range versions {
		versions[k].Epoch = int64(k + 1)
		var changes []sdk.Change
		for j := 1; j <= k; j++ {
			changes = append(changes, sdk.Change{From: versions[j-1], At: at(j), Version: int64(j + 1)})
		}
		p, err := sdk.NewPolicy("sim", []sdk.Rule{versions[k]}, sdk.WithChange("r", changes...))
		if err != nil {
			t.Fatalf("NewPolicy(version %d) = %v", k+1, err)
		}
		policies[k] = p
		versions[k] = p.Rules()[0] // normalized (calendar windows, cells)
	}

	// Seeded traffic: per user, attempts with exponential gaps (a fifth
	// of the users heavy), costs mostly 1.
	rng := rand.New(rand.NewPCG(26, 2026))
	type attempt struct {
		at   time.Time
		user int
		cost int64
	}
	var attempts []attempt
	end := at(len(versions))
	for u := range users {
		mean := 6 * time.Minute
		if u%5 == 0 {
			mean = 90 * time.Second
		}
		for tt := t0.Add(time.Duration(rng.Int64N(int64(mean)))); tt.Before(end); tt = tt.Add(time.Duration(rng.ExpFloat64()*float64(mean)) + time.Millisecond) {
			cost := int64(1)
			if rng.IntN(10) == 0 {
				cost = 1 + rng.Int64N(3)
			}
			attempts = append(attempts, attempt{at: tt.Round(time.Millisecond), user: u, cost: cost})
		}
	}
	sort.SliceStable(attempts, func(i, j int) bool { return attempts[i].at.Before(attempts[j].at) })

	clock := fakeclock.New(t0)
	lim := sdk.New(memory.New(&memory.Options{Clock: clock}))
	ctx := context.Background()
	logs := make([][]ruleref.Unit, users)
	type carry struct {
		set bool
		u   int64
		at  time.Time
	}
	carried := make([][]carry, users)
	for u := range carried {
		carried[u] = make([]carry, len(versions))
	}
	var admitted, denied, oldDenied, violations, capsHeld int
	subjects := make([]sdk.Subject, users)
	for u := range subjects {
		subjects[u] = sdk.Subject{"user": "sim-user-" + string(rune('A'+u%26)) + string(rune('a'+u/26))}
	}
	for _, a := range attempts {
		clock.Set(a.at)
		k := int(a.at.Sub(t0) / period)
		// The predecessors in reach, oldest first, as the reference sees them.
		var preds []int
		for j := 1; j <= k; j++ {
			if at(j).Add(reachOf(versions[j-1])).After(a.at) {
				preds = append(preds, j-1)
			}
		}
		d, err := lim.Take(ctx, policies[k], sdk.Attempt{Subject: subjects[a.user], Cost: a.cost})
		if err != nil {
			t.Fatalf("Take at %v = %v", a.at, err)
		}
		if len(d.Rules) != len(preds)+1 {
			t.Fatalf("Take at %v (version %d) = %d rules, want %d (predecessors in reach %v)", a.at, k+1, len(d.Rules), len(preds)+1, preds)
		}
		for i, j := range preds {
			if d.Rules[i].Before != int64(j+2) {
				t.Fatalf("Take at %v: rule %d Before = %d, want %d", a.at, i, d.Rules[i].Before, j+2)
			}
		}
		lg := logs[a.user]
		oldOK := true
		for _, j := range preds {
			_, ok := ruleref.Decide(versions[j], lg, at(j), a.at, a.cost)
			oldOK = oldOK && ok
		}
		if !oldOK {
			oldDenied++
			if d.Allowed {
				violations++
				t.Errorf("Take at %v (version %d) for user %d = allowed, but an old rule in reach caps them", a.at, k+1, a.user)
			} else {
				capsHeld++
			}
		}
		c := &carried[a.user][k]
		if !c.set {
			// The user's first attempt since the change: the new rule
			// starts from what the newest predecessor in reach counts.
			c.set, c.at = true, a.at
			if len(preds) > 0 {
				j := preds[len(preds)-1]
				c.u, _ = ruleref.Decide(versions[j], lg, at(j), a.at, 1)
			}
		}
		if !d.Allowed {
			denied++
			continue
		}
		admitted++
		units := lg
		if c.u > 0 {
			units = append([]ruleref.Unit{{At: c.at, N: c.u}}, ruleref.Since(lg, c.at)...)
		}
		if _, ok := ruleref.Decide(versions[k], units, at(k), a.at, a.cost); !ok {
			violations++
			t.Errorf("Take at %v (version %d) for user %d = allowed, but the new rule (with %d carried at %v) denies it", a.at, k+1, a.user, c.u, c.at)
		}
		logs[a.user] = append(ruleref.Trim(lg, a.at.Add(-30*time.Hour)), ruleref.Unit{At: a.at, N: a.cost})
	}
	t.Logf("transition simulation: %d users, %d versions (a change every %v over %d days): %d attempts, %d admitted, %d denied; %d attempts while an old rule capped the user, %d of them denied; violations %d",
		users, len(versions), period, days, len(attempts), admitted, denied, oldDenied, capsHeld, violations)
	if violations != 0 || capsHeld != oldDenied {
		t.Errorf("violations = %d (capped by an old rule and denied: %d of %d), want 0", violations, capsHeld, oldDenied)
	}
	if admitted == 0 || denied == 0 || oldDenied == 0 {
		t.Errorf("admitted %d, denied %d, capped by an old rule %d: the traffic must exercise all three", admitted, denied, oldDenied)
	}
}

// reachOf is the reference's reach of a rule: how long after a change its
// state can prove anything (written out here, not taken from the driver).
func reachOf(r sdk.Rule) time.Duration {
	r = ruleref.AsLog(r)
	switch r.Algorithm {
	case driver.FixedWindow:
		if r.Calendar != driver.NoCalendar {
			return r.Window + time.Hour
		}
		return r.Window
	case driver.SlidingWindow:
		size := (r.Window / time.Duration(r.SubWindows)).Truncate(time.Millisecond)
		back := (r.Window + size - 1) / size
		return (back + 1) * size
	case driver.GCRA:
		return (r.Window / time.Duration(r.Limit)).Truncate(time.Microsecond) * time.Duration(r.Burst+1)
	}
	return r.Window
}
