package whatif_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// storages are the backends the sample is recorded to: memory (following
// the test's fake clock), a standalone Redis and a 3-master cluster
// (expiring by their own clock: the tests' traffic ends near the real
// time).
var storages = []struct {
	name string
	new  func(t *testing.T, c *fakeclock.Clock) driver.Backend
}{
	{"memory", func(t *testing.T, c *fakeclock.Clock) driver.Backend { return memory.New(&memory.Options{Clock: c}) }},
	{"redis", func(t *testing.T, _ *fakeclock.Clock) driver.Backend {
		o := testserver.Patient(redis.NewClientOptions(redistest.Standalone(t))).Simple()
		c := goredis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return redis.New(c, nil)
	}},
	{"cluster", func(t *testing.T, _ *fakeclock.Clock) driver.Backend {
		o := testserver.Patient(redis.NewClientOptions(redistest.Cluster(t)...)).Cluster()
		c := goredis.NewClusterClient(o)
		t.Cleanup(func() { c.Close() })
		return redis.New(c, nil)
	}},
}

// attempt is one attempt of the generated traffic.
type attempt struct {
	at      time.Time
	user    string
	content string
}

// traffic is seeded traffic over the span ending at end: users users,
// each making a heavy-tailed number of attempts (most a few, some
// hundreds) at uniform times, on one of 3 contents.
func traffic(seed uint64, users int, span time.Duration, end time.Time) []attempt {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []attempt
	for u := range users {
		k := 1 + int(math.Min(300, math.Exp(rng.NormFloat64()*1.1+1.2)))
		user := fmt.Sprintf("user-%d-%d", seed, u)
		for range k {
			at := end.Add(-span + time.Duration(rng.Int64N(int64(span))))
			out = append(out, attempt{at: at.Truncate(time.Millisecond), user: user, content: fmt.Sprint("c", rng.IntN(3))})
		}
	}
	slices.SortStableFunc(out, func(a, b attempt) int { return a.at.Compare(b.at) })
	return out
}

func policies(t *testing.T) (current, proposed *sdk.Policy) {
	t.Helper()
	cur, err := sdk.NewPolicy("msgs", []sdk.Rule{
		sdk.FixedWindow("hourly", 10, time.Hour).By("user"),
		sdk.FixedWindow("per-content", 4, time.Hour).By("user", "content"),
	}) // no hot-deny cache: a cached denial repeats the rule verdicts of the denial it caches

	if err != nil {
		t.Fatal(err)
	}
	prop, err := sdk.NewPolicy("msgs", []sdk.Rule{
		sdk.SlidingWindow("hourly", 6, time.Hour).By("user"), // a lower limit, another algorithm
		sdk.FixedWindow("per-content", 4, time.Hour).By("user", "content"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return cur, prop
}

// truth is what a version denied in a window: attempts and people, in
// total and per rule, counted on the service itself (raw subject values,
// no sample).
type truth struct {
	attempts, people  int64
	denied, deniedPpl [2]int64 // by version: current, proposed
	rule, rulePpl     [2][]int64
}

// run is one service running the current policy with a Recorder (sample
// 1 in n) on storage b, and beside it a service running the proposed
// policy on a memory backend of its own, both fed the same traffic; it
// returns per window what each denied, and the Reader.
func run(t *testing.T, b driver.Backend, c *fakeclock.Clock, prefix string, n int, tr []attempt, windows []time.Duration, end time.Time) ([]truth, *fleet.Reader) {
	t.Helper()
	ctx := context.Background()
	cur, prop := policies(t)
	rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, Now: c.Now, FlushEvery: -1, Sample: n})
	if err != nil {
		t.Fatal(err)
	}
	svc := sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c), sdk.WithObserver(rec.Observe))
	alt := sdk.New(memory.New(&memory.Options{Clock: c}), sdk.WithClock(c))
	truths := make([]truth, len(windows))
	type personSets struct {
		attempts map[string]bool
		denied   [2]map[string]bool
		rule     [2][]map[string]bool
	}
	sets := make([]personSets, len(windows))
	for i := range windows {
		sets[i].attempts = map[string]bool{}
		for v := range 2 {
			sets[i].denied[v] = map[string]bool{}
			sets[i].rule[v] = []map[string]bool{{}, {}}
			truths[i].rule[v] = make([]int64, 2)
			truths[i].rulePpl[v] = make([]int64, 2)
		}
	}
	lastFlush := c.Now()
	for _, a := range tr {
		c.Set(a.at)
		s := sdk.Subject{"user": a.user, "content": a.content}
		var ds [2]sdk.Decision
		for v, lim := range []*sdk.Limiter{svc, alt} {
			p := []*sdk.Policy{cur, prop}[v]
			d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s})
			if err != nil {
				t.Fatal(err)
			}
			ds[v] = d
		}
		for i, w := range windows {
			if a.at.Before(end.Add(-w)) {
				continue
			}
			tw, sw := &truths[i], &sets[i]
			tw.attempts++
			sw.attempts[a.user] = true
			for v, d := range ds {
				if !d.Allowed {
					tw.denied[v]++
					sw.denied[v][a.user] = true
				}
				for k, rd := range d.Rules {
					if !rd.Allowed {
						tw.rule[v][k]++
						sw.rule[v][k][a.user] = true
					}
				}
			}
		}
		if a.at.Sub(lastFlush) >= 5*time.Minute {
			if err := rec.Flush(ctx); err != nil {
				t.Fatalf("Flush = %v", err)
			}
			lastFlush = a.at
		}
	}
	c.Set(end)
	if err := rec.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if rec.Lost() != 0 {
		t.Fatalf("recorder lost %d", rec.Lost())
	}
	for i := range windows {
		truths[i].people = int64(len(sets[i].attempts))
		for v := range 2 {
			truths[i].deniedPpl[v] = int64(len(sets[i].denied[v]))
			for k := range 2 {
				truths[i].rulePpl[v][k] = int64(len(sets[i].rule[v][k]))
			}
		}
	}
	rd, err := fleet.NewReader(b, &fleet.Options{Prefix: prefix, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return truths, rd
}

// TestEstimateExact: with every subject sampled (N = 1), the estimate is
// an exact replay: the current version's replay denies exactly what the
// service denied (and what was recorded), the proposed one exactly what a
// service running it beside denied, in attempts and people, per rule and
// per window; the intervals are empty.
func TestEstimateExact(t *testing.T) {
	for _, sg := range storages {
		t.Run(sg.name, func(t *testing.T) {
			c := fakeclock.New(time.Now())
			b := sg.new(t, c)
			end := time.Now().Truncate(time.Millisecond) // Redis keys expire by the real clock
			windows := []time.Duration{time.Hour, 24 * time.Hour}
			tr := traffic(1, 300, 3*time.Hour, end)
			prefix := fmt.Sprintf("wi-exact-%s-%d", sg.name, time.Now().UnixNano())
			truths, rd := run(t, b, c, prefix, 1, tr, windows, end)
			cur, prop := policies(t)
			rep, err := whatif.Estimate(context.Background(), rd, []*sdk.Policy{cur}, []*sdk.Policy{prop}, windows...)
			if err != nil {
				t.Fatalf("Estimate = %v", err)
			}
			if len(rep.Policies) != 1 || rep.Policies[0].Sample != 1 || rep.Policies[0].Replayed != len(tr) {
				t.Fatalf("Estimate policies = %+v, want msgs: sample 1, %d replayed", rep.Policies, len(tr))
			}
			pr := rep.Policies[0]
			if pr.Full != 0 || pr.Overridden != 0 || pr.UnreplayableCurrent != 0 || pr.UnreplayableProposed != 0 {
				t.Errorf("Estimate = %d full, %d overridden, %d/%d unreplayable; want none", pr.Full, pr.Overridden, pr.UnreplayableCurrent, pr.UnreplayableProposed)
			}
			exact := func(name string, f whatif.Figure, want int64) {
				t.Helper()
				if f.Value != want || f.Low != want || f.High != want || f.Sampled != want {
					t.Errorf("%s = %+v, want exactly %d", name, f, want)
				}
			}
			for i, w := range pr.Windows {
				tw := truths[i]
				if tw.denied[1] <= tw.denied[0] || tw.denied[0] == 0 {
					t.Fatalf("window %v: traffic denied %d (current), %d (proposed): want some, more when proposed", w.Window, tw.denied[0], tw.denied[1])
				}
				exact(fmt.Sprint(w.Window, " attempts"), w.Attempts, tw.attempts)
				exact(fmt.Sprint(w.Window, " people"), w.People, tw.people)
				exact(fmt.Sprint(w.Window, " recorded denied"), w.Recorded.Denied, tw.denied[0])
				exact(fmt.Sprint(w.Window, " recorded people"), w.Recorded.People, tw.deniedPpl[0])
				exact(fmt.Sprint(w.Window, " added"), w.Added, tw.denied[1]-tw.denied[0])
				for v, out := range []whatif.Outcome{w.Current, w.Proposed} {
					exact(fmt.Sprint(w.Window, " version ", v, " denied"), out.Denied, tw.denied[v])
					exact(fmt.Sprint(w.Window, " version ", v, " people"), out.People, tw.deniedPpl[v])
					if len(out.Rules) != 2 {
						t.Fatalf("version %d rules = %+v, want 2", v, out.Rules)
					}
					for k, ro := range out.Rules {
						exact(fmt.Sprint(w.Window, " version ", v, " rule ", ro.Rule, " denied"), ro.Denied, tw.rule[v][k])
						exact(fmt.Sprint(w.Window, " version ", v, " rule ", ro.Rule, " people"), ro.People, tw.rulePpl[v][k])
					}
				}
			}
			if pr.Windows[0].Covered != time.Hour || pr.Windows[1].Covered > 3*time.Hour || pr.Windows[1].Covered < 2*time.Hour {
				t.Errorf("covered = %v, %v; want 1h, the 3h of traffic", pr.Windows[0].Covered, pr.Windows[1].Covered)
			}
			s := rep.String()
			for _, want := range []string{"policy msgs: 1 subject in 1 sampled", "last 1h0m0s:", "proposed: denies", "(added: ", "hourly denies", "note: ", "covers only the last"} {
				if !strings.Contains(s, want) {
					t.Errorf("String() = %q, want it to contain %q", s, want)
				}
			}
		})
	}
}

// TestEstimateBound: with 1 subject in N sampled, the estimates of the
// attempts, the people, and each version's denials (attempts and
// people) fall within their stated 95% intervals of the truth counted on
// the services, for most seeds and windows (at least 85% of the
// figures), and never beyond twice the interval's half-width.
func TestEstimateBound(t *testing.T) {
	type check struct {
		name   string
		f      whatif.Figure
		want   int64
		seed   uint64
		window time.Duration
	}
	cases := []struct {
		storage int
		seeds   []uint64
		n       int
	}{
		{0, []uint64{11, 12, 13, 14, 15, 16}, 16},
		{1, []uint64{21, 22}, 8},
	}
	for _, tc := range cases {
		sg := storages[tc.storage]
		t.Run(fmt.Sprintf("%s/N=%d", sg.name, tc.n), func(t *testing.T) {
			var checks []check
			for _, seed := range tc.seeds {
				c := fakeclock.New(time.Now())
				b := sg.new(t, c)
				// The same instant in the hour every run: the windows'
				// boundaries fall alike, so the figures (and which lie
				// within their intervals) are the same every run.
				end := time.Now().Truncate(time.Hour).Add(30 * time.Minute)
				windows := []time.Duration{time.Hour, 24 * time.Hour}
				tr := traffic(seed, 3000, 3*time.Hour, end)
				prefix := fmt.Sprintf("wi-bound-%s-%d-%d", sg.name, seed, time.Now().UnixNano())
				truths, rd := run(t, b, c, prefix, tc.n, tr, windows, end)
				cur, prop := policies(t)
				rep, err := whatif.Estimate(context.Background(), rd, []*sdk.Policy{cur}, []*sdk.Policy{prop}, windows...)
				if err != nil {
					t.Fatalf("Estimate = %v", err)
				}
				pr := rep.Policies[0]
				if pr.Sample != tc.n {
					t.Fatalf("sample = %d, want %d", pr.Sample, tc.n)
				}
				for i, w := range pr.Windows {
					tw := truths[i]
					add := func(name string, f whatif.Figure, want int64) {
						checks = append(checks, check{name: name, f: f, want: want, seed: seed, window: w.Window})
					}
					add("attempts", w.Attempts, tw.attempts)
					add("people", w.People, tw.people)
					add("current denied", w.Current.Denied, tw.denied[0])
					add("current people", w.Current.People, tw.deniedPpl[0])
					add("proposed denied", w.Proposed.Denied, tw.denied[1])
					add("proposed people", w.Proposed.People, tw.deniedPpl[1])
					add("added", w.Added, tw.denied[1]-tw.denied[0])
				}
			}
			inside := 0
			for _, ck := range checks {
				if ck.f.Low <= ck.want && ck.want <= ck.f.High {
					inside++
					continue
				}
				half := float64(ck.f.High-ck.f.Low) / 2
				t.Logf("seed %d, %v, %s: truth %d outside %s", ck.seed, ck.window, ck.name, ck.want, ck.f)
				if math.Abs(float64(ck.want-ck.f.Value)) > 2*half {
					t.Errorf("seed %d, %v, %s: truth %d beyond twice the interval of %s", ck.seed, ck.window, ck.name, ck.want, ck.f)
				}
			}
			if float64(inside) < 0.85*float64(len(checks)) {
				t.Errorf("%d of %d figures within their 95%% intervals, want at least 85%%", inside, len(checks))
			}
			t.Logf("%d of %d figures within their 95%% intervals", inside, len(checks))
		})
	}
}

// TestEstimateShadowAndOverrides: a proposed shadow rule denies nothing
// in the replay but reports what it would have denied; attempts decided
// by exempt and block overrides are left out of both versions' denials
// and counted as overridden.
func TestEstimateShadowAndOverrides(t *testing.T) {
	ctx := context.Background()
	c := fakeclock.New(time.Now().Truncate(time.Hour).Add(-2 * time.Hour))
	b := memory.New(&memory.Options{Clock: c})
	cur, err := sdk.NewPolicy("tried", []sdk.Rule{sdk.FixedWindow("cap", 5, 24*time.Hour).By("user")}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	prop, err := sdk.NewPolicy("tried", []sdk.Rule{
		sdk.FixedWindow("cap", 5, 24*time.Hour).By("user"),
		sdk.FixedWindow("trial", 3, 24*time.Hour).By("user").AsShadow(),
	}, sdk.WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1, Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(b, sdk.WithClock(c), sdk.WithObserver(rec.Observe))
	for _, o := range []struct {
		user string
		kind driver.OverrideKind
	}{{"vip", driver.Exempt}, {"abuser", driver.Block}} {
		if _, err := lim.Admin().SetOverride(ctx, cur, sdk.Subject{"user": o.user}, driver.Override{Kind: o.kind, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	// u0..u3: 7 attempts each (cap denies 2 each, trial would deny 4
	// each); vip 8 (exempt), abuser 2 (blocked).
	for _, u := range []string{"u0", "u1", "u2", "u3", "vip", "abuser"} {
		n := map[string]int{"vip": 8, "abuser": 2}[u]
		if n == 0 {
			n = 7
		}
		for range n {
			c.Advance(time.Second)
			if _, err := lim.Allow(ctx, cur, sdk.Subject{"user": u}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := whatif.Estimate(ctx, rd, []*sdk.Policy{cur}, []*sdk.Policy{prop})
	if err != nil {
		t.Fatalf("Estimate = %v", err)
	}
	pr := rep.Policies[0]
	if pr.Overridden != 10 || pr.Replayed != 38 {
		t.Errorf("Estimate = %d overridden of %d replayed, want 10 of 38", pr.Overridden, pr.Replayed)
	}
	for _, w := range pr.Windows { // the default windows: 1 h and 24 h
		if w.Recorded.Denied.Value != 10 || w.Current.Denied.Value != 8 || w.Proposed.Denied.Value != 8 || w.Proposed.People.Value != 4 {
			t.Errorf("%v: denied recorded %v, current %v, proposed %v (%v people); want 10 (2 blocked), 8, 8 (4)", w.Window, w.Recorded.Denied, w.Current.Denied, w.Proposed.Denied, w.Proposed.People)
		}
		if len(w.Proposed.Rules) != 2 || !w.Proposed.Rules[1].Shadow || w.Proposed.Rules[1].Denied.Value != 16 || w.Proposed.Rules[1].People.Value != 4 {
			t.Errorf("%v: proposed rules = %+v, want trial (shadow) would deny 16 attempts of 4 people", w.Window, w.Proposed.Rules)
		}
	}
	if s := rep.String(); !strings.Contains(s, "trial would deny (shadow) 16 attempts, 4 people") || !strings.Contains(s, "overrides") {
		t.Errorf("String() = %q, want trial's shadow denials and the overrides' note", s)
	}
}

// TestEstimateVersions: a proposed rule keyed by a dimension the
// attempts never gave cannot replay them (counted, noted); a policy only
// proposed has no traffic (noted); one only current denies nothing
// proposed; bad windows and repeated names are refused.
func TestEstimateVersions(t *testing.T) {
	ctx := context.Background()
	c := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: c})
	mk := func(name string, rules ...sdk.Rule) *sdk.Policy {
		t.Helper()
		p, err := sdk.NewPolicy(name, rules)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := mk("a", sdk.FixedWindow("r", 1, time.Hour).By("user"))
	gone := mk("gone", sdk.FixedWindow("r", 1, time.Hour).By("user"))
	aRegion := mk("a", sdk.FixedWindow("r", 1, time.Hour).By("user", "region"))
	fresh := mk("fresh", sdk.FixedWindow("r", 1, time.Hour).By("user"))
	rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1, Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(b, sdk.WithClock(c), sdk.WithObserver(rec.Observe))
	for _, p := range []*sdk.Policy{a, gone} {
		for range 3 {
			c.Advance(time.Second)
			if _, err := lim.Allow(ctx, p, sdk.Subject{"user": "u"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := whatif.Estimate(ctx, rd, []*sdk.Policy{a, gone}, []*sdk.Policy{aRegion, fresh}, time.Hour)
	if err != nil {
		t.Fatalf("Estimate = %v", err)
	}
	if len(rep.Policies) != 3 {
		t.Fatalf("Estimate policies = %+v, want a, fresh, gone", rep.Policies)
	}
	pa, pf, pg := rep.Policies[0], rep.Policies[1], rep.Policies[2]
	if pa.Policy != "a" || pa.UnreplayableProposed != 3 || pa.UnreplayableCurrent != 0 || pa.Windows[0].Current.Denied.Value != 2 || pa.Windows[0].Proposed.Denied.Value != 0 {
		t.Errorf("a = %+v, want 3 unreplayable proposed, current denying 2", pa)
	}
	if pf.Policy != "fresh" || pf.InCurrent || !pf.InProposed || pf.Replayed != 0 {
		t.Errorf("fresh = %+v, want only proposed, nothing replayed", pf)
	}
	if pg.Policy != "gone" || !pg.InCurrent || pg.InProposed || pg.Windows[0].Current.Denied.Value != 2 || pg.Windows[0].Proposed.Denied.Value != 0 {
		t.Errorf("gone = %+v, want only current, denying 2, proposed 0", pg)
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, want := range []string{"policy fresh: no sampled traffic", "could not be replayed"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q, want %q", notes, want)
		}
	}
	if s := rep.String(); !strings.Contains(s, "policy fresh (new)") || !strings.Contains(s, "policy gone (removed)") {
		t.Errorf("String() = %q, want fresh new and gone removed", s)
	}
	for _, tc := range []struct {
		name              string
		current, proposed []*sdk.Policy
		windows           []time.Duration
	}{
		{"window too long", []*sdk.Policy{a}, nil, []time.Duration{25 * time.Hour}},
		{"window zero", []*sdk.Policy{a}, nil, []time.Duration{0}},
		{"name twice", []*sdk.Policy{a, aRegion}, nil, nil},
		{"nil policy", nil, []*sdk.Policy{nil}, nil},
	} {
		if _, err := whatif.Estimate(ctx, rd, tc.current, tc.proposed, tc.windows...); err == nil {
			t.Errorf("Estimate(%s) = nil error, want one", tc.name)
		}
	}
}

// BenchmarkEstimate is the cost of an estimate per sampled attempt read
// and replayed through both versions (memory storage, 2 windows): b.N
// attempts of 1000 users over 3 hours.
func BenchmarkEstimate(b *testing.B) {
	ctx := context.Background()
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(end.Add(-3 * time.Hour))
	st := memory.New(&memory.Options{Clock: c})
	rec, err := fleet.NewRecorder(st, &fleet.Options{Now: c.Now, FlushEvery: -1, Sample: 1, SampleKeep: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	cur, err := sdk.NewPolicy("msgs", []sdk.Rule{sdk.FixedWindow("hourly", 10, time.Hour).By("user")})
	if err != nil {
		b.Fatal(err)
	}
	prop, err := sdk.NewPolicy("msgs", []sdk.Rule{sdk.SlidingWindow("hourly", 6, time.Hour).By("user")})
	if err != nil {
		b.Fatal(err)
	}
	step := 3 * time.Hour / time.Duration(b.N+1)
	for i := range b.N {
		c.Advance(step)
		d := sdk.Decision{Allowed: i%3 > 0, Policy: "msgs", At: c.Now(), Rules: []sdk.RuleDecision{{Rule: "hourly", Allowed: i%3 > 0}}}
		u := fmt.Sprint("u", i%1000)
		rec.Observe(sdk.Event{Policy: "msgs", PolicyRef: cur, Op: "take", Shard: u, Subject: sdk.Subject{"user": u}, Cost: 1, Decision: d})
		if i%10000 == 9999 {
			if err := rec.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rec.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	c.Set(end)
	rd, err := fleet.NewReader(st, &fleet.Options{Now: c.Now, SampleKeep: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	rep, err := whatif.Estimate(ctx, rd, []*sdk.Policy{cur}, []*sdk.Policy{prop})
	if err != nil {
		b.Fatal(err)
	}
	if got := rep.Policies[0].Replayed; got != b.N {
		b.Fatalf("replayed %d, want %d", got, b.N)
	}
}
