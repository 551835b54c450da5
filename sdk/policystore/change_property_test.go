package policystore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/ruleref"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// TestChangeProperty: seeded random sequences of store versions of one
// rule, changing it by every kind a policy file can (limit, burst, GCRA
// rate, window, algorithm among fixed, sliding, log and GCRA, calendar
// day or hour and its zone, sub-windows, shadow on and off, headroom,
// rollback to an earlier version) and its policy's messaging settings
// (person, quiet_hours, classes: no part of the rule, they carry every
// count), with attempts of two people between the changes,
// on memory (a fake clock), Redis and Redis Cluster (the server's clock:
// windows of 250 ms to 1 s, waits polled on the server's TIME). Seed
// with FREQCAP_PROPERTY_SEED; each failure names its sequence's seed.
//
// The oracle. The old state can prove only what it holds: a longer new
// window cannot see units the old state has dropped, so "the new rule on
// the whole history" is not a promise any carry can keep. What is
// promised (docs/POLICIES.md, "Transitions") is that no one is admitted
// beyond what both the old and the new rule allow on what the state
// proves. The reference keeps each person's admitted units (at the
// decisions' own instants, Decision.At) and splits a rule's life into
// identities: a plan's "carries exactly" continues the identity under the
// new parameters (the same state, re-read), "carries conservatively"
// starts a new one. Per identity, the units it holds are its carry (u
// units at the person's first take under it: what the identity it
// replaced counts then, if that one is still enforced, placed at that
// take) plus every unit admitted since. Every admitted take must be
// admitted by (1) the current rule evaluated exactly on its identity's
// units and (2) each former rule the decision still enforces
// (RuleDecision.Before) on its own identity's units, shadow rules
// excepted. The reference's counts are lower bounds of the backend's
// (its states hold what the reference cannot see, e.g. seeds of seeds),
// so any take it denies and the backend admits is over-admission.
//
// And whenever a plan says "carries exactly", each person's used, peeked
// just before the apply under the old version and just after it under
// the new, is the same (up to either limit: a GCRA report clamps to its
// limit); under "carries conservatively" it is at least the old used up
// to the new limit (the new rule starts from the old count). The peeks
// are compared only when the old version's used is the same just after
// (nothing drained between them on a server's clock).
func TestChangeProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FREQCAP_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FREQCAP_PROPERTY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (FREQCAP_PROPERTY_SEED=%d reruns it)", seed, seed)
	t.Run("memory", func(t *testing.T) {
		var st propStats
		for i := range 150 {
			s := seed + uint64(i)
			clock := fakeclock.New(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
			b := memory.New(&memory.Options{Clock: clock})
			lim := sdk.New(b)
			env := propEnv{
				store:   policystore.New(b, policystore.WithClock(clock)),
				lim:     lim,
				advance: func(d time.Duration) { clock.Advance(d) },
			}
			runPropSeq(t, env, s, propKinds[i%len(propKinds)], &st)
		}
		st.check(t)
	})
	for _, cluster := range []bool{false, true} {
		name := map[bool]string{false: "redis", true: "cluster"}[cluster]
		t.Run(name, func(t *testing.T) {
			now := serverClock(t, cluster)
			var st propStats
			var wg sync.WaitGroup
			for i := range 16 {
				s := seed + 1000 + uint64(i)
				lim, store := redisPair(t, cluster, uniquePrefix(t))
				env := propEnv{
					store: store,
					lim:   lim,
					advance: func(d time.Duration) {
						until := now(t).Add(d)
						deadline := time.Now().Add(d + 10*time.Second)
						for now(t).Before(until) {
							if time.Now().After(deadline) {
								t.Errorf("seed %d: the server's clock did not pass %v in time", s, d)
								return
							}
							time.Sleep(5 * time.Millisecond) // polling the server's clock
						}
					},
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					runPropSeq(t, env, s, propKinds[i%len(propKinds)], &st)
				}()
			}
			wg.Wait()
			st.check(t)
		})
	}
}

// serverClock returns a function reading the server's TIME.
func serverClock(t *testing.T, cluster bool) func(testing.TB) time.Time {
	var c goredis.UniversalClient
	if cluster {
		c = goredis.NewClient(testserver.Patient(redis.NewClientOptions(redistest.Cluster(t)[0])).Simple())
	} else {
		c = goredis.NewClient(testserver.Patient(redis.NewClientOptions(redistest.Standalone(t))).Simple())
	}
	t.Cleanup(func() { c.Close() })
	return func(tb testing.TB) time.Time {
		now, err := c.Time(context.Background()).Result()
		if err != nil {
			tb.Errorf("TIME = %v", err)
			return time.Now()
		}
		return now
	}
}

type propEnv struct {
	store   *policystore.Store
	lim     *sdk.Limiter
	advance func(time.Duration)
}

// propStats adds up what the sequences exercised.
type propStats struct {
	mu                                      sync.Mutex
	seqs, takes, admitted, oldChecked       int
	exact, conservative, compared, rollback int
	kinds                                   map[string]int
}

func (st *propStats) add(f func(*propStats)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.kinds == nil {
		st.kinds = map[string]int{}
	}
	f(st)
}

func (st *propStats) check(t *testing.T) {
	t.Logf("%d sequences: %d takes, %d admitted, %d admissions held to a former rule; changes %v; %d carried exactly, %d conservatively, %d peeks compared",
		st.seqs, st.takes, st.admitted, st.oldChecked, st.kinds, st.exact, st.conservative, st.compared)
	if st.admitted == 0 || st.oldChecked == 0 || st.exact == 0 || st.conservative == 0 || st.compared == 0 || st.rollback == 0 {
		t.Errorf("the sequences must admit, hold admissions to former rules, carry exactly and conservatively, compare peeks and roll back: %+v", st)
	}
	for _, k := range propKinds {
		if st.kinds[k] == 0 && !t.Failed() {
			t.Errorf("no change of kind %q was made", k)
		}
	}
}

var propKinds = []string{"limit", "burst", "gcra rate", "window", "algorithm", "calendar", "zone", "sub-windows", "shadow", "headroom", "messaging", "rollback"}

// propIdentity is one identity of the rule (see TestChangeProperty).
type propIdentity struct {
	rule  sdk.Rule // its parameters now (a "carries exactly" change updates them)
	carry []propCarry
	own   [][]ruleref.Unit // per person, the units it counted since its carry
}

// propCarry is what an identity holds from its predecessor for a person:
// u units at at, set at the person's first take under it.
type propCarry struct {
	set bool
	u   int64
	at  time.Time
}

// units returns what identity id holds for person p: its carry, then
// the units it counted since (every admitted take while it was evaluated;
// a shadow rule's only where it would have admitted: it consumes only
// those).
func (id *propIdentity) units(p int) []ruleref.Unit {
	c := id.carry[p]
	out := []ruleref.Unit{}
	if c.u > 0 {
		out = append(out, ruleref.Unit{At: c.at, N: c.u})
	}
	return append(out, id.own[p]...)
}

const propUnit = 250 * time.Millisecond

// runPropSeq runs the sequence of seed, whose first change is of kind
// first (so that every kind is made whatever the seeds).
func runPropSeq(t *testing.T, env propEnv, seed uint64, first string, st *propStats) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 38))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	const people = 2
	subjects := []sdk.Subject{{"user": fmt.Sprint("a", seed)}, {"user": fmt.Sprint("b", seed)}}
	var ids []*propIdentity
	replaced := map[int64]*propIdentity{} // by the version that replaced it
	var sources []string                  // per version
	var sets []propSettings               // per version
	var set propSettings                  // the policy's messaging settings now
	var history []string
	newID := func(r sdk.Rule) *propIdentity {
		id := &propIdentity{rule: r, carry: make([]propCarry, people), own: make([][]ruleref.Unit, people)}
		ids = append(ids, id)
		return id
	}

	cur := propRule(rng)
	for i := 0; first != "rollback" && first != "messaging"; i++ {
		if _, ok := propChange(rand.New(rand.NewPCG(seed, 0)), cur, first); ok || i == 1000 {
			break
		}
		cur = propRule(rng)
	}
	var policy *sdk.Policy
	apply := func(src string, plan *policystore.Plan, kind string) {
		if plan == nil {
			var err error
			if plan, err = env.store.Plan(ctx, []byte(src)); err != nil {
				fail("Plan(%s) = %v\n%s", kind, err, src)
				return
			}
		}
		if len(plan.Diffs) != 1 || len(plan.Diffs[0].Rules) != 1 {
			fail("plan of %s: %+v", kind, plan.Diffs)
			return
		}
		pd, rd := plan.Diffs[0], plan.Diffs[0].Rules[0]
		var before []sdk.RuleDecision
		if policy != nil {
			for _, s := range subjects {
				before = append(before, propPeek(t, env.lim, policy, s))
			}
		}
		if _, err := env.store.Apply(ctx, plan, "t", kind); err != nil {
			fail("Apply(%s) = %v", kind, err)
			return
		}
		v, err := env.store.Version(ctx, 0)
		if err != nil {
			fail("Version = %v", err)
			return
		}
		ps, err := v.Policies()
		if err != nil {
			fail("Policies = %v", err)
			return
		}
		old := policy
		policy = ps[0]
		sources = append(sources, string(plan.Source))
		sets = append(sets, set)
		nr := policy.Rules()[0]
		history = append(history, fmt.Sprintf("v%d %s: %s %s (%v, %v)", v.Number, kind, propYAML(nr), set, rd.Kind, rd.Carry))
		switch {
		case old == nil:
			newID(nr)
		case rd.Carry == policystore.CarriesExactly:
			ids[len(ids)-1].rule = nr
			st.add(func(st *propStats) { st.exact++ })
		case rd.Carry == policystore.CarriesConservatively:
			replaced[v.Number] = ids[len(ids)-1]
			newID(nr)
			st.add(func(st *propStats) { st.conservative++ })
		default:
			fail("plan of %s: %v, %v: want a carry", kind, rd.Kind, rd.Carry)
		}
		if old == nil || rd.Kind == policystore.Unchanged && len(pd.Settings) == 0 {
			return
		}
		switch {
		case kind == "messaging" && (len(pd.Settings) != 1 || pd.Kind != policystore.Modified || rd.Kind != policystore.Unchanged || rd.Carry != policystore.CarriesExactly):
			fail("plan of a messaging setting: %v %q, rule %v %v %q: want one setting, the rule unchanged, carried exactly", pd.Kind, pd.Settings, rd.Kind, rd.Carry, rd.Fields)
		case kind == "headroom" && (len(rd.Fields) != 1 || !strings.HasPrefix(rd.Fields[0], "headroom ") || rd.Kind != policystore.Modified || rd.Carry != policystore.CarriesExactly):
			fail("plan of a headroom change: rule %v %v %q: want modified, carried exactly, headroom alone", rd.Kind, rd.Carry, rd.Fields)
		}
		st.add(func(st *propStats) { st.kinds[kind]++ })
		for i, s := range subjects {
			after := propPeek(t, env.lim, policy, s)
			again := propPeek(t, env.lim, old, s)
			b := before[i]
			if again.Used != b.Used {
				continue // time moved between the peeks: not comparable
			}
			st.add(func(st *propStats) { st.compared++ })
			floor := min(b.Used, after.Limit)
			switch {
			case rd.Carry == policystore.CarriesExactly && b.Used < b.Limit && b.Used < after.Limit && after.Used != b.Used:
				fail("%s %s: the plan says carries exactly, but person %d's used went %d/%d → %d/%d\n%s", kind, rd.Fields, i, b.Used, b.Limit, after.Used, after.Limit, strings.Join(history, "\n"))
			case after.Used < floor:
				fail("%s %s (%v): person %d's used went %d/%d → %d/%d, want at least %d\n%s", kind, rd.Fields, rd.Carry, i, b.Used, b.Limit, after.Used, after.Limit, floor, strings.Join(history, "\n"))
			}
		}
	}
	apply(propDoc(cur, set), nil, "initial")

	takes := func() {
		for range 4 + rng.IntN(5) {
			env.advance(time.Duration(rng.Int64N(int64(propUnit))))
			p := rng.IntN(people)
			cost := int64(1 + rng.IntN(2))
			d, err := env.lim.Take(ctx, policy, sdk.Attempt{Subject: subjects[p], Cost: cost})
			if err != nil {
				fail("Take = %v", err)
				return
			}
			now := d.At
			cur := ids[len(ids)-1]
			// The identities this decision evaluates, oldest first: the
			// former rules still enforced (by the version that replaced
			// them), then the current one.
			type link struct {
				id *propIdentity
				rd sdk.RuleDecision
			}
			var chain []link
			for _, r := range d.Rules {
				id, ok := cur, r.Before == 0
				if !ok {
					if id, ok = replaced[r.Before]; !ok {
						fail("decision names a former rule of version %d, which replaced none", r.Before)
						return
					}
				}
				chain = append(chain, link{id, r})
			}
			sort.SliceStable(chain, func(i, j int) bool { return slices.Index(ids, chain[i].id) < slices.Index(ids, chain[j].id) })
			if len(chain) == 0 || chain[len(chain)-1].id != cur {
				fail("decision %+v does not end with the current rule", d.Rules)
				return
			}
			for i, l := range chain {
				if l.id.carry[p].set {
					continue
				}
				// The person's first take under id: it starts from what
				// the identity before it in this decision counts.
				c := propCarry{set: true, at: now}
				if i > 0 {
					prev := chain[i-1].id
					c.u, _ = ruleref.Decide(prev.rule, prev.units(p), time.Time{}, now, 1)
				}
				l.id.carry[p] = c
			}
			st.add(func(st *propStats) { st.takes++ })
			if !d.Allowed {
				continue
			}
			for _, l := range chain {
				id := l.id
				if l.rd.Shadow {
					if l.rd.Allowed {
						id.own[p] = append(id.own[p], ruleref.Unit{At: now, N: cost})
					}
					continue
				}
				_, ok := ruleref.Decide(id.rule, id.units(p), time.Time{}, now, cost)
				id.own[p] = append(id.own[p], ruleref.Unit{At: now, N: cost})
				if !ok {
					what := "the current rule"
					if id != cur {
						what = "a former rule still enforced"
						st.add(func(st *propStats) { st.oldChecked++ })
					}
					fail("Take(cost %d) of person %d at %v = allowed, but %s (%s) on what its state proves denies it\n%s",
						cost, p, now.Format("15:04:05.000000"), what, propYAML(id.rule), strings.Join(history, "\n"))
				} else if id != cur {
					st.add(func(st *propStats) { st.oldChecked++ })
				}
			}
			st.add(func(st *propStats) { st.admitted++ })
		}
	}
	takes()
	for i := range 5 {
		if t.Failed() {
			return
		}
		kind := propKinds[rng.IntN(len(propKinds))]
		if i == 0 {
			kind = first
		}
		if kind == "rollback" && len(sources) == 1 {
			// Something to roll back: a change first.
			cur, _ = propChange(rng, cur, "shadow")
			apply(propDoc(cur, set), nil, "shadow")
			takes()
		}
		if kind == "rollback" {
			n := int64(1 + rng.IntN(len(sources)-1))
			plan, err := env.store.PlanRollback(ctx, n)
			if err != nil {
				fail("PlanRollback(%d) = %v", n, err)
				return
			}
			st.add(func(st *propStats) { st.rollback++ })
			set = sets[n-1]
			apply("", plan, "rollback")
			rules, _ := policyfile.Load(strings.NewReader(sources[n-1]))
			cur = rules[0].Rules()[0]
		} else if kind == "messaging" {
			set = set.change(rng)
			apply(propDoc(cur, set), nil, kind)
		} else {
			for {
				n, ok := propChange(rng, cur, kind)
				if ok {
					cur = n // not before: a kind that does not apply may return another rule
					break
				}
				kind = propKinds[rng.IntN(len(propKinds)-1)]
			}
			apply(propDoc(cur, set), nil, kind)
		}
		takes()
	}
	st.add(func(st *propStats) { st.seqs++ })
}

func propPeek(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject) sdk.RuleDecision {
	t.Helper()
	d, err := lim.Peek(context.Background(), p, sdk.Attempt{Subject: s, Cost: 1})
	if err != nil {
		t.Errorf("Peek = %v", err)
		return sdk.RuleDecision{}
	}
	for _, r := range d.Rules {
		if r.Before == 0 {
			return r
		}
	}
	t.Errorf("Peek = %+v: no current rule", d)
	return sdk.RuleDecision{}
}

var propZones = []string{"UTC", "Asia/Shanghai"}

// propRule returns a random rule r by user.
func propRule(rng *rand.Rand) sdk.Rule {
	r := sdk.Rule{Name: "r", Dimensions: []string{"user"}, Limit: int64(2 + rng.IntN(6)), Window: propWindow(rng)}
	switch rng.IntN(5) {
	case 0:
		r.Algorithm = driver.FixedWindow
	case 1:
		r.Algorithm, r.SubWindows = driver.SlidingWindow, 2+rng.IntN(5)
	case 2:
		r.Algorithm = driver.SlidingLog
	case 3:
		r.Algorithm, r.Burst = driver.GCRA, int64(rng.IntN(5))
	case 4:
		r = propCalendar(rng, r)
	}
	return r
}

func propWindow(rng *rand.Rand) time.Duration {
	return propUnit * time.Duration(1+rng.IntN(4))
}

func propCalendar(rng *rand.Rand, r sdk.Rule) sdk.Rule {
	loc, _ := time.LoadLocation(propZones[rng.IntN(len(propZones))])
	r.Algorithm, r.SubWindows, r.Burst, r.Location = driver.FixedWindow, 0, 0, loc
	r.Calendar = []driver.CalendarUnit{driver.Day, driver.Hour, driver.Week, driver.Month}[rng.IntN(4)]
	r.Window = r.Calendar.Nominal()
	return r
}

// propChange returns r changed by kind, or false when kind does not
// apply to r.
func propChange(rng *rand.Rand, r sdk.Rule, kind string) (sdk.Rule, bool) {
	gcra := r.Algorithm == driver.GCRA
	switch kind {
	case "limit", "gcra rate":
		if gcra != (kind == "gcra rate") {
			return r, false
		}
		l := r.Limit
		for l == r.Limit {
			l = int64(1 + rng.IntN(8))
		}
		r.Limit = l
		if len(r.Headroom) > 0 && r.Headroom[0].Keep >= l {
			r.Headroom = nil // a limit that leaves no room: the headroom goes too
		}
	case "burst":
		if !gcra {
			return r, false
		}
		b := r.Burst
		for b == r.Burst {
			b = int64(rng.IntN(6))
		}
		r.Burst = b
	case "window":
		if r.Calendar != driver.NoCalendar {
			return r, false
		}
		w := r.Window
		for w == r.Window {
			w = propWindow(rng)
		}
		r.Window = w
	case "algorithm":
		n := propRule(rng)
		if n.Algorithm == r.Algorithm || n.Calendar != driver.NoCalendar {
			return r, false
		}
		n.Limit, n.Shadow = r.Limit, r.Shadow
		if r.Calendar == driver.NoCalendar {
			n.Window = r.Window
		}
		r = n
	case "calendar":
		shadow := r.Shadow
		if r.Calendar != driver.NoCalendar {
			r = propRule(rng)
			r.Shadow = shadow
			return r, r.Calendar == driver.NoCalendar
		}
		r = propCalendar(rng, r)
	case "zone":
		if r.Calendar == driver.NoCalendar {
			return r, false
		}
		loc := r.Location.String()
		r.Location, _ = time.LoadLocation(propZones[(slices.Index(propZones, loc)+1)%len(propZones)])
	case "sub-windows":
		if r.Algorithm != driver.SlidingWindow {
			return r, false
		}
		n := r.SubWindows
		for n == r.SubWindows {
			n = 2 + rng.IntN(5)
		}
		r.SubWindows = n
	case "shadow":
		r.Shadow = !r.Shadow
	case "headroom":
		if gcra || r.Limit < 2 {
			return r, false
		}
		if len(r.Headroom) > 0 && rng.IntN(2) == 0 {
			r.Headroom = nil
			break
		}
		old := r.Headroom
		for slices.Equal(r.Headroom, old) {
			r.Headroom = []sdk.Headroom{{Priority: 1 + rng.IntN(sdk.MaxPriority), Keep: 1 + rng.Int64N(r.Limit-1)}}
		}
	default:
		return r, false
	}
	return r, true
}

var propAlgorithms = map[driver.Algorithm]string{
	driver.FixedWindow:   "fixed_window",
	driver.SlidingWindow: "sliding_window",
	driver.SlidingLog:    "sliding_log",
	driver.GCRA:          "gcra",
}

// propYAML writes r as a policy file's rule.
func propYAML(r sdk.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{name: r, algorithm: %s, limit: %d, by: [user]", propAlgorithms[r.Algorithm], r.Limit)
	if r.Calendar != driver.NoCalendar {
		fmt.Fprintf(&b, ", calendar: %s, timezone: %s", r.Calendar, r.Location)
	} else {
		fmt.Fprintf(&b, ", window: %v", r.Window)
	}
	if r.Algorithm == driver.SlidingWindow {
		fmt.Fprintf(&b, ", sub_windows: %d", r.SubWindows)
	}
	if r.Algorithm == driver.GCRA {
		fmt.Fprintf(&b, ", burst: %d", r.Burst)
	}
	if r.Shadow {
		b.WriteString(", shadow: true")
	}
	if len(r.Headroom) > 0 {
		fmt.Fprintf(&b, ", headroom: %s", policyfile.Headroom(r.Headroom))
	}
	b.WriteString("}")
	return b.String()
}

func propDoc(r sdk.Rule, set propSettings) string {
	return "policies:\n  - name: p\n" + set.yaml() + "    rules:\n      - " + propYAML(r) + "\n"
}

// propSettings are the policy's messaging settings, each an index in its
// choices (0: none).
type propSettings struct{ person, quiet, class int }

var (
	propPersons = []string{"", "user"}
	// Quiet hours of one minute a week, far from the sequences' instants
	// (a memory clock at 10:00 UTC; a server's clock could meet them, and
	// deny: the oracle bounds admissions only).
	propQuiets = []string{"",
		`{zone: UTC, periods: [{from: "03:00", to: "03:01", days: [sun]}]}`,
		`{zone: Asia/Shanghai, periods: [{from: "03:00", to: "03:01", days: [sun]}]}`,
		`{zone: UTC, periods: [{from: "03:00", to: "03:01", days: [sun, mon]}]}`}
	propClasses = []string{"",
		"{name: c, exempt: all, counted: true}",
		"{name: c, exempt: [r]}",
		"{name: c, quiet_hours: true}",
		"{name: c, exempt: all, quiet_hours: true}"}
)

// change returns s with one setting changed.
func (s propSettings) change(rng *rand.Rand) propSettings {
	for o := s; s == o; {
		switch rng.IntN(3) {
		case 0:
			s.person = rng.IntN(len(propPersons))
		case 1:
			s.quiet = rng.IntN(len(propQuiets))
		default:
			s.class = rng.IntN(len(propClasses))
		}
	}
	return s
}

// yaml writes s as a policy's keys.
func (s propSettings) yaml() string {
	var b strings.Builder
	if p := propPersons[s.person]; p != "" {
		fmt.Fprintf(&b, "    person: %s\n", p)
	}
	if q := propQuiets[s.quiet]; q != "" {
		fmt.Fprintf(&b, "    quiet_hours: %s\n", q)
	}
	if c := propClasses[s.class]; c != "" {
		fmt.Fprintf(&b, "    classes: [%s]\n", c)
	}
	return b.String()
}

func (s propSettings) String() string {
	return fmt.Sprintf("{person %q, quiet_hours %q, classes %q}", propPersons[s.person], propQuiets[s.quiet], propClasses[s.class])
}
