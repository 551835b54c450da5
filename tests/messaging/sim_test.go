package messaging_test

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// simSeed seeds the generator: the world, and so every decision, is the
// same on every run.
const simSeed = 37

// simPolicy is the simulated sender's policy: the seed policy's caps (15
// per minute, 50 per 24 h keeping 10 from promotions and 5 from priority
// 1, 2 of one content per 59 s), 3 per calendar day per campaign in the
// recipient's zone keeping the last from promotions, 100 per ISO week in
// that zone; quiet hours 21:00 to 08:00 there; one-time passwords exempt
// from every rule and counted, passing quiet hours; security notices
// exempt and not counted; alerts passing quiet hours. Its person
// dimension is "user": an attempt names an identity, decided for the
// person it is linked to. oracleRules mirror its rules.
func simPolicy() (*sdk.Policy, error) {
	return sdk.NewPolicy("sim37", []sdk.Rule{
		sdk.SlidingWindow("recv-1m", 15, time.Minute).By("user"),
		sdk.SlidingWindow("recv-24h", 50, 24*time.Hour).By("user").WithHeadroom(10, 1).WithHeadroom(5, 2),
		sdk.SlidingWindow("content-59s", 2, 59*time.Second).By("user", "content"),
		sdk.Daily("daily", 3, time.UTC).By("user", "campaign").WithHeadroom(1, 1),
		sdk.Weekly("weekly", 100, time.UTC).By("user"),
	},
		sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: 21 * time.Hour, To: 8 * time.Hour}),
		sdk.WithClass(
			sdk.Class{Name: classOTP, AllRules: true, Counted: true, QuietHours: true},
			sdk.Class{Name: classSecurity, AllRules: true},
			sdk.Class{Name: classAlert, QuietHours: true},
		),
		sdk.WithPerson("user"),
	)
}

// What an event of the run is.
type kind uint8

const (
	kTake       kind = iota // a generated attempt
	kRetry                  // a denied attempt deferred to its NextEligible (a Take)
	kPeekBefore             // a Peek of a denied attempt 1 ms before its NextEligible
	kPeekAt                 // a Peek of it at its NextEligible (when not retried)
)

var kindNames = [...]string{"take", "retry", "peek-1ms", "peek"}

// event is one step of a run, in order of (at, seq).
type event struct {
	at   time.Time
	seq  int
	kind kind
	a    attempt
	// from is the step of the denial whose NextEligible a check (kRetry,
	// kPeekBefore, kPeekAt) checks: it holds if the person consumed
	// nothing since.
	from int
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// record is what a run keeps of one decision, to compare runs.
type record struct {
	r        int // the recipient's index
	kind     kind
	at       time.Time
	person   string
	allowed  bool
	denied   []string
	exempted []string
	headroom bool
	quiet    time.Time
	next     time.Time
	used     []int64
}

func (r record) String() string {
	return fmt.Sprintf("%s %s at %s: allowed %v denied %v exempted %v headroom %v quiet %s next %s used %v",
		kindNames[r.kind], r.person, r.at.Format(time.RFC3339Nano), r.allowed, r.denied, r.exempted, r.headroom,
		r.quiet.Format(time.RFC3339Nano), r.next.Format(time.RFC3339Nano), r.used)
}

func (r record) equal(s record) bool {
	return r.r == s.r && r.kind == s.kind && r.at.Equal(s.at) && r.person == s.person && r.allowed == s.allowed &&
		slices.Equal(r.denied, s.denied) && slices.Equal(r.exempted, s.exempted) && r.headroom == s.headroom &&
		r.quiet.Equal(s.quiet) && r.next.Equal(s.next) && slices.Equal(r.used, s.used)
}

// tally is a run's figures.
type tally struct {
	attempts, allowed, denied int // generated attempts and retries (Takes)
	deniedBy                  map[string]int
	quietDenials              int
	quietPasses               int // otp and alerts sent in quiet hours
	exemptCounted             int // (attempt, rule) pairs an otp passed, counted
	exemptUncounted           int // (attempt, rule) pairs a security notice passed
	headroomDenials           int
	overLimit                 int // otp sends leaving some rule's count past its limit
	neChecks, nePassed        int // NextEligible checks valid (nothing consumed since)
	neSkipped                 int // checks the person's later sends made moot
	peeks                     int
	wall                      time.Duration
}

// add adds x's figures but the wall time to s's.
func (s *tally) add(x tally) {
	s.attempts += x.attempts
	s.allowed += x.allowed
	s.denied += x.denied
	for k, n := range x.deniedBy {
		s.deniedBy[k] += n
	}
	s.quietDenials += x.quietDenials
	s.quietPasses += x.quietPasses
	s.exemptCounted += x.exemptCounted
	s.exemptUncounted += x.exemptUncounted
	s.headroomDenials += x.headroomDenials
	s.overLimit += x.overLimit
	s.neChecks += x.neChecks
	s.nePassed += x.nePassed
	s.neSkipped += x.neSkipped
	s.peeks += x.peeks
}

func (s tally) String() string {
	reasons := make([]string, 0, len(s.deniedBy))
	for k, n := range s.deniedBy {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("takes %d (allowed %d, denied %d: %s; headroom %d), quiet denials %d, quiet passes %d, exempt counted %d (otp sends counted past a limit %d), exempt uncounted %d, peeks %d, next-eligible checks %d passed %d (skipped %d: a send of the person in between), wall %v",
		s.attempts, s.allowed, s.denied, strings.Join(reasons, ", "), s.headroomDenials, s.quietDenials, s.quietPasses,
		s.exemptCounted, s.overLimit, s.exemptUncounted, s.peeks, s.neChecks, s.nePassed, s.neSkipped, s.wall.Round(time.Millisecond))
}

// problems collects a run's failures, up to a few per kind.
type problems struct {
	t     *testing.T
	count map[string]int
}

func (p *problems) add(kind, format string, args ...any) {
	p.t.Helper()
	p.count[kind]++
	if p.count[kind] <= 5 {
		p.t.Errorf(kind+": "+format, args...)
	}
}

// setter sets the clock every decision of a backend reads.
type setter interface{ Set(time.Time) }

// link links every identity of w's recipients in part (nil: all) to its
// person, and stores the zones of those whose attempts give none, through
// lim's Admin, and checks what the backend then keeps of each person.
func link(t *testing.T, lim *sdk.Limiter, w world, part func(r int) bool) {
	t.Helper()
	ctx := context.Background()
	ad := lim.Admin()
	for r, rc := range w.recipients {
		if part != nil && !part(r) {
			continue
		}
		for _, id := range rc.ids {
			if _, err := ad.Link(ctx, id, rc.person, "sim37", "issue 37 simulation"); err != nil {
				t.Fatalf("Link(%s, %s): %v", id, rc.person, err)
			}
		}
		want := ""
		if rc.stored {
			want = rc.zone.String()
			if err := ad.SetPersonZone(ctx, rc.person, want, "sim37", "issue 37 simulation"); err != nil {
				t.Fatalf("SetPersonZone(%s, %s): %v", rc.person, want, err)
			}
		}
		got, err := ad.Person(ctx, rc.person)
		if err != nil || len(got.Links) != len(rc.ids) || got.Zone != want {
			t.Fatalf("Person(%s) = %d links, zone %q, %v; want %d, %q", rc.person, len(got.Links), got.Zone, err, len(rc.ids), want)
		}
	}
}

// simRun runs the attempts of w's recipients in part (nil: all) on lim,
// whose backend decides on clk, and checks every decision against the
// oracle and every NextEligible it can. It returns the records of the
// decisions, in order, and the figures. Recipients share no state: a
// part's records are those of a run of all filtered to it.
func simRun(t *testing.T, lim *sdk.Limiter, clk setter, w world, p *sdk.Policy, part func(r int) bool) ([]record, tally) {
	ctx := context.Background()
	start := time.Now()
	var (
		h     events
		recs  []record
		s     = tally{deniedBy: map[string]int{}}
		pr    = problems{t: t, count: map[string]int{}}
		o     = newOracle()
		last  = make([]int, len(w.recipients)) // per recipient: the last step that consumed
		seq   int
		steps int
	)
	push := func(e event) {
		seq++
		e.seq = seq
		heap.Push(&h, e)
	}
	for _, a := range w.attempts {
		if part != nil && !part(a.r) {
			continue
		}
		push(event{at: a.at, kind: kTake, a: a, from: -1})
	}
	for h.Len() > 0 {
		e := heap.Pop(&h).(event)
		steps++
		a := &e.a
		rc := &w.recipients[a.r]
		if e.kind == kPeekBefore || e.kind == kPeekAt {
			if last[a.r] > e.from {
				s.neSkipped++ // moot: the person consumed since the denial
				continue
			}
		}
		clk.Set(e.at)
		v := o.judge(rc, a, e.at)
		// The subject gives no person: the identity's link does, and the
		// person's stored zone when the attempt gives none.
		att := sdk.Attempt{
			Subject:  sdk.Subject{"campaign": a.campaign, "content": a.content},
			Class:    a.class,
			Priority: a.priority,
			Identity: rc.ids[a.id],
		}
		if !rc.stored {
			att.Zone = rc.zone
		}
		take := e.kind == kTake || e.kind == kRetry
		var (
			d   sdk.Decision
			err error
		)
		if take {
			d, err = lim.Take(ctx, p, att)
		} else {
			d, err = lim.Peek(ctx, p, att)
			s.peeks++
		}
		if err != nil {
			t.Fatalf("%s of %s at %v: %v", kindNames[e.kind], rc.person, e.at, err)
		}
		rec := record{r: a.r, kind: e.kind, at: d.At, person: rc.person, allowed: d.Allowed, denied: d.Denied,
			exempted: d.Exempted, headroom: d.Headroom, quiet: d.Quiet, next: d.NextEligible}
		for _, rd := range d.Rules {
			rec.used = append(rec.used, rd.Used)
		}
		recs = append(recs, rec)
		where := func() string {
			return fmt.Sprintf("%s of %s (%s, %s, class %q, priority %d, campaign %s, content %s) at %s (%s local)",
				kindNames[e.kind], rc.person, rc.ids[a.id], rc.zone, a.class, a.priority, a.campaign, a.content,
				e.at.Format(time.RFC3339Nano), e.at.In(rc.zone).Format("2006-01-02 15:04:05.000 MST"))
		}
		if !d.At.Equal(e.at) {
			pr.add("clock", "%s: decided at %v", where(), d.At)
		}
		all, counted, passQuiet := classOf(a.class)
		// The invariants: no send in quiet hours but those the class
		// passes, none over any cap, none denied that the oracle admits.
		switch {
		case d.Allowed && !v.allowed && v.quiet:
			pr.add("quiet", "%s: allowed in quiet hours", where())
		case d.Allowed && !v.allowed:
			pr.add("over cap", "%s: allowed, but the oracle finds %v full (used %v)", where(), v.denied, v.used)
		case !d.Allowed && v.allowed:
			pr.add("over-denial", "%s: denied %v (quiet %v), the oracle admits it (used %v)", where(), d.Denied, d.Quiet, v.used)
		}
		if d.Allowed && passQuiet && inQuiet(e.at, rc.zone) && take {
			s.quietPasses++
		}
		if !v.quiet {
			if !sameNames(d.Denied, v.denied) {
				pr.add("denied rules", "%s: Denied %v, the oracle's %v (used %v)", where(), d.Denied, v.denied, v.used)
			}
			if !sameNames(d.Exempted, v.exempted) {
				pr.add("exempted", "%s: Exempted %v, the oracle's %v (used %v)", where(), d.Exempted, v.exempted, v.used)
			}
			if d.Headroom != v.headroom {
				pr.add("headroom", "%s: Headroom %v, the oracle's %v (used %v)", where(), d.Headroom, v.headroom, v.used)
			}
		}
		// Denied for quiet hours or passing them, Quiet says when they
		// end (08:00 local); else it is zero.
		wantQuiet := time.Time{}
		if v.quiet || (d.Allowed && passQuiet && inQuiet(e.at, rc.zone)) {
			wantQuiet = quietEnd(e.at, rc.zone)
		}
		if !d.Quiet.Equal(wantQuiet) {
			pr.add("quiet", "%s: Quiet %v, want %v (08:00 local when denied for quiet hours or passing them, else zero)", where(), d.Quiet, wantQuiet)
		}
		consumed := take && d.Allowed && (!all || counted)
		for i := range oracleRules {
			want := v.used[i] + int64(b2i(consumed))
			if i >= len(d.Rules) || d.Rules[i].Used != want {
				pr.add("counts", "%s: rule %s used %v, the oracle counts %d", where(), oracleRules[i].name, rec.used, want)
				break
			}
		}
		if take && d.Allowed {
			o.apply(a, v, e.at)
		}
		if consumed {
			last[a.r] = steps
		}
		// The figures.
		if take {
			s.attempts++
			if d.Allowed {
				s.allowed++
				if all && counted {
					s.exemptCounted += len(d.Exempted)
					for _, rd := range d.Rules {
						if rd.Used > rd.Limit {
							s.overLimit++ // an otp counted past the limit
							break
						}
					}
				} else if all {
					s.exemptUncounted += len(d.Exempted)
				}
			} else {
				s.denied++
				if !d.Quiet.IsZero() {
					s.quietDenials++
					s.deniedBy["quiet"]++
				}
				for _, r := range d.Denied {
					s.deniedBy[r]++
				}
				if d.Headroom {
					s.headroomDenials++
				}
			}
		}
		// NextEligible: the check this event is, then the ones a denial
		// schedules.
		if e.from >= 0 {
			if last[a.r] > e.from {
				s.neSkipped++ // a deferred Take decided as any other
			} else {
				s.neChecks++
				want := e.kind != kPeekBefore
				if d.Allowed == want {
					s.nePassed++
				} else {
					pr.add("next eligible", "%s: allowed %v, want %v (denied %v, quiet %v, next %v)", where(), d.Allowed, want, d.Denied, d.Quiet, d.NextEligible)
				}
			}
		}
		if d.Allowed {
			if !d.NextEligible.IsZero() {
				pr.add("next eligible", "%s: allowed with NextEligible %v", where(), d.NextEligible)
			}
			continue
		}
		ne := d.NextEligible
		if !ne.After(e.at) {
			pr.add("next eligible", "%s: denied with NextEligible %v, not after the decision", where(), ne)
			continue
		}
		if e.kind == kPeekBefore || e.kind == kPeekAt {
			continue // a check's own denial schedules nothing
		}
		next := *a
		push(event{at: ne.Add(-time.Millisecond), kind: kPeekBefore, a: next, from: steps})
		if next.defers > 0 {
			next.defers--
			push(event{at: ne, kind: kRetry, a: next, from: steps})
		} else {
			push(event{at: ne, kind: kPeekAt, a: next, from: steps})
		}
	}
	s.wall = time.Since(start)
	return recs, s
}

// compareRuns reports where got's decisions differ from want's.
func compareRuns(t *testing.T, name string, want, got []record) {
	t.Helper()
	bad := 0
	for i := range min(len(want), len(got)) {
		if !want[i].equal(got[i]) {
			bad++
			if bad <= 5 {
				t.Errorf("decision %d on %s:\n got  %v\n want %v (memory)", i, name, got[i], want[i])
			}
		}
	}
	if len(want) != len(got) {
		t.Errorf("%s made %d decisions, memory %d", name, len(got), len(want))
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d decisions differ from memory's", name, bad, len(want))
	}
}

// TestSimulation is issue 37's simulation (package doc): on memory, Redis
// and a Redis Cluster, every decision matches the oracle (no send in quiet
// hours but those the class passes, none over a cap, none denied that the
// caps admit, the rules denied, exempted and held by headroom, every
// rule's count, counted exemptions counted), every NextEligible that
// nothing taken since can have moved is exact (a Peek 1 ms earlier is
// denied; a Peek, or the deferred Take, at it is allowed), and the three
// runs make the same decisions.
func TestSimulation(t *testing.T) {
	w, err := generate(simSeed, 200)
	if err != nil {
		t.Fatal(err)
	}
	p, err := simPolicy()
	if err != nil {
		t.Fatal(err)
	}
	// The memory run, the reference of the others, whatever -run selects.
	fc := fakeclock.New(simStart)
	mem := sdk.New(memory.New(&memory.Options{Clock: fc}))
	link(t, mem, w, nil)
	ref, s := simRun(t, mem, fc, w, p, nil)
	t.Logf("memory: %d recipients, %d generated attempts: %v", len(w.recipients), len(w.attempts), s)
	// The traffic reaches every case the checks are about.
	for _, r := range append([]string{"quiet"}, ruleNames()...) {
		if s.deniedBy[r] == 0 {
			t.Errorf("no attempt denied by %s: the simulation does not test it", r)
		}
	}
	for name, n := range map[string]int{"headroom denials": s.headroomDenials, "quiet passes": s.quietPasses,
		"counted exemptions": s.exemptCounted, "otp sends past a limit": s.overLimit,
		"uncounted exemptions": s.exemptUncounted, "next-eligible checks": s.neChecks} {
		if n == 0 {
			t.Errorf("no %s: the simulation does not test them", name)
		}
	}
	for _, mode := range []string{"redis", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			parts, s := simRedis(t, mode, w, p)
			s.wall = time.Since(start)
			t.Logf("%s (%d parts at once): %v", mode, simParts, s)
			for k, recs := range parts {
				want := slices.DeleteFunc(slices.Clone(ref), func(r record) bool { return r.r%simParts != k })
				compareRuns(t, fmt.Sprintf("%s part %d", mode, k), want, recs)
			}
		})
	}
}

// simParts is how many parts the Redis runs split the recipients into,
// each run on servers of its own (a clock of its own) at once: a run waits
// on its server's replies, and several make better use of a loaded
// machine.
const simParts = 4

// simRedis runs w on Redis (mode "redis") or a Redis Cluster ("cluster"),
// in simParts parts at once (part k: the recipients r with r%simParts ==
// k), and returns each part's records and the sums of their figures.
func simRedis(t *testing.T, mode string, w world, p *sdk.Policy) ([][]record, tally) {
	recs := make([][]record, simParts)
	tallies := make([]tally, simParts)
	ran := make([]bool, simParts) // false: the part skipped (no redis-server or cc)
	t.Run("parts", func(t *testing.T) {
		for k := range simParts {
			t.Run(fmt.Sprint(k), func(t *testing.T) {
				t.Parallel()
				clk := redistest.NewClock(t, simStart)
				ran[k] = true
				var c goredis.UniversalClient
				if mode == "redis" {
					c = goredis.NewClient(testserver.Patient(redis.NewClientOptions(clk.Server(t).Addr())).Simple())
				} else {
					c = goredis.NewClusterClient(testserver.Patient(redis.NewClientOptions(clk.Cluster(t)...)).Cluster())
				}
				t.Cleanup(func() { c.Close() })
				lim := sdk.New(redis.New(c, &redis.Options{Clock: clk}), sdk.WithClock(clk))
				part := func(r int) bool { return r%simParts == k }
				link(t, lim, w, part)
				recs[k], tallies[k] = simRun(t, lim, clk, w, p, part)
			})
		}
	})
	if !t.Failed() && slices.Contains(ran, false) {
		// NewClock skipped (FREQCAP_REQUIRE_SERVERS=1 fails instead): no
		// run to compare with memory's.
		t.Skipf("%s: a part skipped (see its message): nothing to compare", mode)
	}
	s := tally{deniedBy: map[string]int{}}
	for _, x := range tallies {
		s.add(x)
	}
	return recs, s
}

func ruleNames() []string {
	var out []string
	for _, r := range oracleRules {
		out = append(out, r.name)
	}
	return out
}
