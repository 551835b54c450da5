package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

// decidingScript returns the SHA1 of the script that decides req on b:
// its fast script, or take.lua.
func decidingScript(t *testing.T, b *Backend, req request) string {
	t.Helper()
	return goredis.NewScript(decidingSource(t, b, req)).Hash()
}

// decidingSource returns the source of the script that decides req on b.
func decidingSource(t *testing.T, b *Backend, req request) string {
	t.Helper()
	rep, err := b.report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := b.fastAttempt(req.op, req.Request, rep); ok {
		return a.s.src
	}
	return lua.Take
}

// scriptCounter is a go-redis hook counting the EVALSHA and EVAL commands
// a client sends one by one (n), and keeping the argument count of the
// last of them (args, if not nil).
type scriptCounter struct{ n, args *atomic.Int64 }

func (h scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
			if h.args != nil {
				h.args.Store(int64(len(cmd.Args())))
			}
		}
		return next(ctx, cmd)
	}
}
func (h scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// fastPolicies are the rule sets TestFastMatchesTake runs, on subject s:
// windows of an hour or more, so that two decisions a few hundred µs
// apart see the same windows and cells.
func fastPolicies(s subject) map[string][]driver.Rule {
	in := func(g string, rs ...driver.Rule) []driver.Rule {
		for i := range rs {
			rs[i].Group = s.base + g
		}
		return rs
	}
	return map[string][]driver.Rule{
		"fixed-1": {s.fixed("f", 4, time.Hour)},
		"fixed-4": in("u", s.fixed("a", 2, time.Hour), s.fixed("b", 4, 2*time.Hour), s.fixed("c", 6, 24*time.Hour), s.fixed("d", 9, 48*time.Hour)),
		"gcra-2":  in("u", s.gcra("a", 5, time.Hour, 2), s.gcra("b", 20, 24*time.Hour, 0)),
		"sliding": append(in("u", s.sliding("a", 3, time.Hour, 6), s.sliding("b", 7, 24*time.Hour, 10), s.sliding("c", 9, 48*time.Hour, 4)),
			in("uc", s.sliding("d", 2, 2*time.Hour, 10))...),
		"mixed": append(in("u", s.fixed("a", 1, time.Hour), s.sliding("b", 6, 3*time.Hour, 10)),
			in("uc", s.gcra("c", 4, time.Hour, 1), s.fixed("d", 8, 24*time.Hour))...),
		"log-4": in("u", s.log("a", 3, time.Hour), s.log("b", 5, 2*time.Hour), s.log("c", 7, 24*time.Hour), s.log("d", 9, 48*time.Hour)),
		// Calendar windows (their boundaries an argument of the script) in
		// two zones beside an epoch-aligned window.
		"calendar": in("u", driver.Rule{Name: "day", Key: s.key("day"), Algorithm: driver.FixedWindow, Limit: 7, Window: 24 * time.Hour, Calendar: driver.Day, Location: newYork},
			s.fixed("b", 4, time.Hour),
			driver.Rule{Name: "hour", Key: s.key("hour"), Algorithm: driver.FixedWindow, Limit: 5, Window: time.Hour, Calendar: driver.Hour, Location: time.UTC}),
		// A dimension set's log beside its packed value (two keys), and a
		// log of its own.
		"logs-mixed": append(in("u", s.fixed("a", 4, time.Hour), s.log("b", 6, 3*time.Hour), s.sliding("c", 8, 24*time.Hour, 10)),
			in("uc", s.log("d", 3, time.Hour), s.log("e", 5, 2*time.Hour))...),
		// Sets nested in the subject's root (its key ends in '='), the
		// seed policy's shape, and two nested sets, the first rule's
		// before the root's.
		"nested": append(in("=", s.log("a", 6, time.Hour), s.log("b", 9, 24*time.Hour)),
			in("=c:x", s.log("c", 2, time.Hour), s.log("d", 4, 2*time.Hour))...),
		"nested-2": append(append(in("=c:x", s.gcra("a", 3, time.Hour, 1)),
			in("=", s.fixed("b", 8, time.Hour), s.sliding("c", 9, 24*time.Hour, 10))...),
			in("=h:y", s.fixed("d", 5, 2*time.Hour), s.log("e", 4, time.Hour))...),
	}
}

// newYork is a zone with DST for calendar rules.
var newYork = func() *time.Location {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	return loc
}()

// TestFastMatchesTake runs the same random takes and peeks through fast
// scripts (subject A), through take.lua alone (B) and alternating between
// the two on one subject (C), and wants the same decisions, counts and
// denial trails: the fast script is take.lua specialised, and each reads
// what the other wrote. The values hold a rule of an older policy version
// (kept until it expires) and a live reservation's hold marker in one
// run (shared=true), so the writes that keep other entries run too, and
// none in the other, where values are rewritten in place or whole.
func TestFastMatchesTake(t *testing.T) {
	fast, _ := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	for name := range fastPolicies(newSubject(t, "x")) {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", name, shared), func(t *testing.T) {
				subs := []subject{newSubject(t, "a"), newSubject(t, "b"), newSubject(t, "c")}
				rules := make([][]driver.Rule, 3)
				var setBegan, setEnded [3]time.Time // each subject's setup
				for i, s := range subs {
					rules[i] = fastPolicies(s)[name]
					if !shared {
						continue
					}
					setBegan[i] = time.Now()
					// An older version of the policy's rule in the first dimension
					// set, then a reservation (take.lua) holding a unit.
					old := driver.Rule{Name: "old", Key: s.key("old"), Group: rules[i][0].Group, Algorithm: driver.FixedWindow, Limit: 100, Window: time.Hour}
					take(t, slow, s.request(opTake, 1, old))
					if root := s.base + "="; slices.ContainsFunc(rules[i], func(r driver.Rule) bool { return r.Group == root }) {
						// Another nested set's section in the root's value.
						old.Group = root
						other := driver.Rule{Name: "other", Key: s.key("other", "z"), Group: root + "c:z", Algorithm: driver.FixedWindow, Limit: 100, Window: time.Hour}
						take(t, slow, s.request(opTake, 1, old, other))
					}
					hold := s.request(opReserve, 1, rules[i]...)
					hold.ReservationID, hold.ReservationTTL = "h", time.Hour
					if res := take(t, slow, hold); !res.Allowed {
						t.Fatalf("reserve denied: %+v", res)
					}
					setEnded[i] = time.Now()
				}
				req := subs[0].request(opTake, 1, rules[0]...)
				if decidingScript(t, fast, req) == takeScript.Hash() {
					t.Fatalf("policy %s: no fast script", name)
				}
				// The widest gap so far between two subjects' matching calls: a
				// GCRA time or a log entry may date from any earlier call,
				// the setup's included.
				var most [3]time.Duration
				if shared {
					for _, i := range []int{0, 2} {
						most[i] = apart(setBegan[:], setEnded[:], i, 1)
					}
				}
				for step := range 40 {
					o, cost := opTake, int64(1+rnd.IntN(3))
					if rnd.IntN(5) == 0 {
						o = opPeek
					}
					var got [3]driver.Result
					var began, ended [3]time.Time
					for i, s := range subs {
						b := slow
						if i == 0 || (i == 2 && step%2 == 0) {
							b = fast
						}
						r := s.request(o, cost, rules[i]...)
						r.TrailValues = "v=" + strconv.Itoa(step)
						began[i] = time.Now()
						res, err := b.do(ctx, r)
						ended[i] = time.Now()
						if err != nil {
							t.Fatalf("step %d: %v subject %d: %v", step, o, i, err)
						}
						got[i] = res
					}
					for _, i := range []int{0, 2} {
						most[i] = max(most[i], apart(began[:], ended[:], i, 1))
						sameResult(t, fmt.Sprintf("step %d (%v, cost %d): subject %d", step, o, cost, i), got[i], got[1], most[i])
					}
				}
				trails := make([][]string, 3)
				for i, s := range subs {
					tr, err := fast.c.LRange(ctx, s.trail(), 0, -1).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range tr {
						f := strings.Split(e, "|")
						f[0], f[6] = "", "" // the time, retry-after
						trails[i] = append(trails[i], strings.Join(f, "|"))
					}
				}
				if !slices.Equal(trails[0], trails[1]) || !slices.Equal(trails[2], trails[1]) {
					t.Errorf("trails differ:\nfast        %q\ntake.lua    %q\nalternating %q", trails[0], trails[1], trails[2])
				}
				if len(trails[1]) == 0 {
					t.Errorf("no denial in 40 steps: the policy does not test denials")
				}
			})
		}
	}
}

// TestFastShortForm: a lone fast attempt goes in the short ARGV
// (args.go: the attempt's head alone), with and without a trail and a reservations key,
// and decides, counts and writes the trail as take.lua does.
func TestFastShortForm(t *testing.T) {
	fast, c := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	var n, args atomic.Int64
	c.AddHook(scriptCounter{&n, &args})
	ctx := context.Background()
	for _, tc := range []struct{ trail, holds bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		trail := tc.trail
		t.Run(fmt.Sprintf("trail=%v/holds=%v", tc.trail, tc.holds), func(t *testing.T) {
			subs := []subject{newSubject(t, "a"), newSubject(t, "b")}
			for step := range 4 {
				var got [2]driver.Result
				var began, ended [2]time.Time
				o := opTake
				if step == 1 {
					o = opPeek
				}
				for i, s := range subs {
					b := []*Backend{fast, slow}[i]
					f, g := s.fixed("f", 2, time.Hour), s.fixed("g", 5, 2*time.Hour)
					f.Group, g.Group = s.base+"u", s.base+"u" // one dimension set
					r := s.request(o, 1, f, g)
					if !tc.holds {
						r.ReservationKey = ""
					}
					if !trail {
						r.TrailKey = ""
					}
					r.TrailValues = "v=" + strconv.Itoa(step)
					began[i] = time.Now()
					res, err := b.do(ctx, r)
					ended[i] = time.Now()
					if err != nil {
						t.Fatalf("step %d: subject %d: %v", step, i, err)
					}
					got[i] = res
					if i == 0 {
						// EVALSHA, SHA, key count, the keys (dimension set, a take's trail,
						// reservations), then the head alone.
						want := int64(3 + 1 + 1)
						if trail && o == opTake {
							want++
						}
						if tc.holds {
							want++
						}
						if got := args.Load(); got != want {
							t.Fatalf("step %d: the fast EVALSHA has %d arguments, want %d (the short form)", step, got, want)
						}
					}
				}
				sameResult(t, fmt.Sprintf("step %d", step), got[0], got[1], apart(began[:], ended[:], 0, 1))
				if wantAllowed := step < 3; got[0].Allowed != wantAllowed {
					t.Fatalf("step %d: allowed %v, want %v", step, got[0].Allowed, wantAllowed)
				}
			}
			var trails [2][]string
			for i, s := range subs {
				tr, err := c.LRange(ctx, s.trail(), 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range tr {
					f := strings.Split(e, "|")
					f[0], f[6] = "", ""
					trails[i] = append(trails[i], strings.Join(f, "|"))
				}
			}
			if !slices.Equal(trails[0], trails[1]) {
				t.Errorf("trails differ: fast %q, take.lua %q", trails[0], trails[1])
			}
			if want := map[bool]int{true: 1, false: 0}[trail]; len(trails[0]) != want {
				t.Errorf("trail holds %d entries, want %d", len(trails[0]), want)
			}
		})
	}
}

// apart bounds how far apart in time calls i and j decided: from the
// start of the one to the end of the other, whichever is longer (each
// script reads the server's TIME somewhere inside its call).
func apart(began, ended []time.Time, i, j int) time.Duration {
	return max(ended[i].Sub(began[j]), ended[j].Sub(began[i]))
}

// sameResult compares two decisions taken at most apart from each other:
// equal in everything but the reset and retry times, which may differ by
// at most apart (plus a millisecond, the scripts' rounding). On an idle
// machine apart is a few hundred µs; under load it grows with the calls,
// never beyond the time that really passed between them.
func sameResult(t *testing.T, what string, a, b driver.Result, apart time.Duration) {
	t.Helper()
	if a.Allowed != b.Allowed || a.Replayed != b.Replayed || len(a.Rules) != len(b.Rules) {
		t.Fatalf("%s: allowed %v replayed %v rules %d, want %v %v %d", what, a.Allowed, a.Replayed, len(a.Rules), b.Allowed, b.Replayed, len(b.Rules))
	}
	near := func(x, y time.Duration) bool { return (x - y).Abs() <= apart+time.Millisecond }
	for i := range a.Rules {
		x, y := a.Rules[i], b.Rules[i]
		if x.Allowed != y.Allowed || x.Used != y.Used || x.Limit != y.Limit || x.Remaining != y.Remaining ||
			x.Strategy != y.Strategy || !near(x.ResetAfter, y.ResetAfter) || x.CostTooHigh != y.CostTooHigh || !near(x.RetryAfter, y.RetryAfter) {
			t.Fatalf("%s: rule %d = %+v, want %+v (decided at most %v apart)", what, i, x, y, apart)
		}
	}
}

// TestFastLapseAndForeign: a fast script gives a lapsed reservation's
// units back and refuses a value freqcap did not write as take.lua does,
// in its one EVALSHA.
func TestFastLapseAndForeign(t *testing.T) {
	srv := redistest.NewServer(t)
	c := goredis.NewClient(NewClientOptions(srv.Addr()).Simple())
	defer c.Close()
	var n atomic.Int64
	c.AddHook(scriptCounter{n: &n})
	b := New(c, &Options{Detect: capability.Config{ForcePlainLua: true}})
	ctx := context.Background()
	// Packed values and a log; a log alone, whose only hold marker is
	// the sorted set's.
	for _, tc := range []struct {
		name  string
		rules func(s subject) []driver.Rule
	}{
		{"packed+log", func(s subject) []driver.Rule {
			return []driver.Rule{s.fixed("f", 3, time.Hour), s.sliding("s", 3, time.Hour, 10), s.log("l", 3, time.Hour)}
		}},
		{"log", func(s subject) []driver.Rule {
			return []driver.Rule{s.log("l", 3, time.Hour), s.log("m", 5, 2*time.Hour)}
		}},
	} {
		s := newSubject(t, "back-"+tc.name)
		rules := tc.rules(s)
		take(t, b, s.request(opPeek, 1, rules...)) // loads the fast script
		hold := s.request(opReserve, 2, rules...)
		hold.ReservationID, hold.ReservationTTL = "h", time.Millisecond
		held := take(t, b, hold)
		if !held.Allowed {
			t.Fatalf("%s: reserve denied: %+v", tc.name, held)
		}
		// From the instant the reservation was made (its script's TIME),
		// not from before the call: a loaded call may take longer than the
		// margin.
		eventually(t, 5*time.Second, "the reservation's lapse on the server clock", func() bool {
			return serverNow(t, c).Sub(held.Now) > 5*time.Millisecond
		})
		n.Store(0)
		res := take(t, b, s.request(opTake, 3, rules...))
		if !res.Allowed || slices.ContainsFunc(res.Rules, func(r driver.RuleResult) bool { return r.Used != 3 }) {
			t.Errorf("%s: take 3 after the lapse = %+v, want admitted, 3 used by each rule (the 2 held given back)", tc.name, res)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("%s: %d scripts for a decision after a lapse, want 1", tc.name, got)
		}
		n.Store(0)
		if res := take(t, b, s.request(opTake, 1, rules...)); res.Allowed {
			t.Errorf("%s: take 1 more = allowed, want denied", tc.name)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("%s: %d scripts for a plain decision, want 1", tc.name, got)
		}
	}

	// A value freqcap did not write: take.lua's error, nothing written.
	other := newSubject(t, "foreign")
	rs := []driver.Rule{other.fixed("f", 3, time.Hour)}
	if err := c.Set(ctx, rs[0].Key, "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	take(t, b, newSubject(t, "warm").request(opPeek, 1, newSubject(t, "warm").fixed("f", 3, time.Hour))) // loads its fast script
	n.Store(0)
	_, err := b.do(ctx, other.request(opTake, 1, rs...))
	if err == nil || !strings.Contains(err.Error(), "holds a value freqcap did not write") {
		t.Errorf("take on a foreign value = %v, want take.lua's refusal", err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d scripts for a foreign value, want 1", got)
	}
	b.noFast = true
	_, errSlow := b.do(ctx, other.request(opTake, 1, rs...))
	if errSlow == nil || err.Error() != errSlow.Error() {
		t.Errorf("take on a foreign value = %v, take.lua's = %v; want the same", err, errSlow)
	}
	if v, _ := c.Get(ctx, rs[0].Key).Result(); v != "hello" {
		t.Errorf("foreign value = %q after the refusal, want it untouched", v)
	}

	// A log key that is not a sorted set: take.lua's refusal too.
	b.noFast = false
	lo := newSubject(t, "wrongtype")
	lr := []driver.Rule{lo.log("l", 3, time.Hour)}
	rep, err := b.report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fa, ok := b.fastAttempt(opTake, lo.request(opTake, 1, lr...).Request, rep)
	if !ok {
		t.Fatal("no fast script for a sliding log")
	}
	if err := c.Set(ctx, fa.keys[0], "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	warm := newSubject(t, "warmlog")
	take(t, b, warm.request(opPeek, 1, warm.log("l", 3, time.Hour))) // loads its fast script
	n.Store(0)
	_, err = b.do(ctx, lo.request(opTake, 1, lr...))
	if err == nil || !strings.Contains(err.Error(), "rule l: its state key holds a value freqcap did not write") {
		t.Errorf("take on a log key holding a string = %v, want take.lua's refusal", err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d scripts for a log key of another type, want 1", got)
	}
	b.noFast = true
	_, errSlow = b.do(ctx, lo.request(opTake, 1, lr...))
	if errSlow == nil || err.Error() != errSlow.Error() {
		t.Errorf("take on a log key holding a string = %v, take.lua's = %v; want the same", err, errSlow)
	}
	if v, _ := c.Get(ctx, fa.keys[0]).Result(); v != "hello" {
		t.Errorf("log key = %q after the refusal, want it untouched", v)
	}
}

// TestFastScriptsLoad: the largest fast scripts (lua.FastMax rules, in one
// dimension set, each in its own, or nested: one on a root and each
// other in a set of its own nested in it, or in a root of no rule, the
// sets at most lua.FastMax with the root as fastKeyOf builds them;
// reading overrides or not) compile on the server: Lua's limit of 200
// locals per function holds. lua.FastWith refuses the nested shapes of
// rules with many locals (sliding windows, logs) that would pass it
// (internal/lua's TestMainLocals), and the backend decides those with
// take.lua (TestFastTooManyLocals).
func TestFastScriptsLoad(t *testing.T) {
	_, c := standalone(t)
	for _, code := range []string{"f", "s", "g", "l"} {
		for _, spread := range []string{"one set", "a set each", "nested in a root", "nested in a root of no rule"} {
			rules := make([]lua.FastRule, lua.FastMax)
			for i := range rules {
				rules[i] = lua.FastRule{Code: code, Name: fmt.Sprintf("r%d", i), Limit: 10, P1: 1000000, P2: 100000, Tag: fmt.Sprintf("t%03d", i), Key: 1}
				switch spread {
				case "a set each":
					rules[i].Key = i + 1
				case "nested in a root": // the root's rule first, 5 nested sets
					rules[i].Key = i + 1
					if i > 0 {
						rules[i].Root = 1
					}
				case "nested in a root of no rule": // 5 nested sets, the root the 6th key
					rules[i].Key, rules[i].Root = min(i+1, lua.FastMax-1), lua.FastMax
				}
			}
			for _, o := range []lua.FastOptions{{}, {Overrides: true}, {Overrides: true, HFE: true}} {
				src, err := lua.FastWith(rules, o)
				if err != nil && strings.HasPrefix(spread, "nested") && (code == "s" || code == "l") {
					continue // too many locals: take.lua's
				}
				if err != nil {
					t.Fatalf("Fast(%d %q rules, %s): %v", len(rules), code, spread, err)
				}
				if err := c.ScriptLoad(context.Background(), src).Err(); err != nil {
					t.Errorf("SCRIPT LOAD of %d %q rules (%s; %+v): %v", len(rules), code, spread, o, err)
				}
			}
		}
	}
	if _, err := lua.Fast(make([]lua.FastRule, lua.FastMax+1)); err == nil {
		t.Errorf("Fast(%d rules) = nil error, want one", lua.FastMax+1)
	}
}

// TestFastTooManyLocals: rules whose fast script would need more locals
// than Lua allows (lua.MaxLocals: six sliding windows, one on the root and
// five in sets nested in it) are decided by take.lua, single and in a
// batch, and correctly (a version before the check sent the script,
// which the server refused to compile: every such decision failed).
func TestFastTooManyLocals(t *testing.T) {
	b, _ := plainStandalone(t)
	s := newSubject(t, "locals")
	rules := []driver.Rule{s.sliding("a", 3, time.Hour, 10)}
	rules[0].Group = s.base + "="
	for i, d := range []string{"c", "d", "e", "f", "g"} {
		r := s.sliding(string(rune('b'+i)), 2, time.Hour, 10)
		r.Key, r.Group = s.key(r.Name, d), s.base+"="+d+":x"
		rules = append(rules, r)
	}
	req := s.request(opTake, 1, rules...)
	if decidingScript(t, b, req) != takeScript.Hash() {
		t.Fatal("a fast script decides six nested sliding windows: want take.lua (too many locals)")
	}
	for i, want := range []bool{true, true, false} {
		if res := take(t, b, req); res.Allowed != want {
			t.Fatalf("take %d: allowed %v, want %v", i, res.Allowed, want)
		}
	}
	for i, o := range b.batch(context.Background(), []request{req, req}) {
		if o.Err != nil || o.Result.Allowed {
			t.Fatalf("batch[%d] = %+v, %v; want a denial", i, o.Result, o.Err)
		}
	}
}

// TestBatchMixedScriptsFirstUse: a batch mixing take.lua (idempotent
// takes) and a fast script on one subject, on a server that has run the
// fast script but never take.lua, is carried out whole, in order: the
// backend loads both scripts first, so take.lua does not meet NOSCRIPT
// while the fast script runs. (The cluster's scripts are flushed first.)
func TestBatchMixedScriptsFirstUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(t *testing.T) *Backend
	}{
		{"standalone", func(t *testing.T) *Backend {
			c := goredis.NewClient(NewClientOptions(redistest.NewServer(t).Addr()).Simple())
			t.Cleanup(func() { c.Close() })
			return New(c, nil)
		}},
		{"cluster", func(t *testing.T) *Backend {
			b, c := cluster(t)
			if err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *goredis.Client) error {
				return m.ScriptFlush(ctx).Err()
			}); err != nil {
				t.Fatal(err)
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b(t)
			s := newSubject(t, "mixed")
			f := s.fixed("f", 10, time.Hour)
			var reqs []request
			for i := range 6 {
				r := s.request(opTake, 1, f)
				if i%2 == 0 {
					r.IdempotencyKey, r.IdempotencyTTL = s.base+"idem"+strconv.Itoa(i), time.Hour
				}
				reqs = append(reqs, r)
			}
			if decidingScript(t, b, reqs[1]) == takeScript.Hash() || decidingScript(t, b, reqs[0]) != takeScript.Hash() {
				t.Fatal("the batch does not mix take.lua and a fast script")
			}
			// A single decision first: the server has the fast script, not
			// take.lua.
			other := newSubject(t, "other")
			take(t, b, other.request(opPeek, 1, other.fixed("f", 10, time.Hour)))
			out := b.batch(context.Background(), reqs)
			for i, o := range out {
				if o.Err != nil {
					t.Fatalf("TakeBatch(…)[%d].Err = %v, want a decision", i, o.Err)
				}
				checkRule(t, fmt.Sprintf("TakeBatch(…)[%d]", i), o.Result.Rules[0], true, int64(i+1), 10)
			}
		})
	}
}

// commandCounter is a go-redis hook counting the commands of one name
// sent one by one (SCRIPT EXISTS: "script").
type commandCounter struct {
	name string
	n    *atomic.Int64
}

func (h commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == h.name && len(cmd.Args()) > 1 && cmd.Args()[1] == "exists" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestBatchMixedScriptsChecked: a batch mixing scripts asks the server for
// them (SCRIPT EXISTS) only until it has found them all, and again after
// the backend met NOSCRIPT (here: SCRIPT FLUSH, then a single decision
// that reloads the fast script alone), so that batch is carried out whole.
func TestBatchMixedScriptsChecked(t *testing.T) {
	c := goredis.NewClient(NewClientOptions(redistest.NewServer(t).Addr()).Simple())
	defer c.Close()
	var exists atomic.Int64
	c.AddHook(commandCounter{name: "script", n: &exists})
	b := New(c, nil)
	ctx := context.Background()
	s := newSubject(t, "checked")
	f := s.fixed("f", 1000, time.Hour)
	used := int64(0)
	mixed := func(what string) {
		t.Helper()
		var reqs []request
		for i := range 4 {
			r := s.request(opTake, 1, f)
			if i%2 == 0 {
				r.IdempotencyKey, r.IdempotencyTTL = s.base+what+strconv.Itoa(i), time.Hour
			}
			reqs = append(reqs, r)
		}
		for i, o := range b.batch(ctx, reqs) {
			used++
			if o.Err != nil {
				t.Fatalf("%s: TakeBatch(…)[%d].Err = %v, want a decision", what, i, o.Err)
			}
			checkRule(t, fmt.Sprintf("%s: TakeBatch(…)[%d]", what, i), o.Result.Rules[0], true, used, 1000)
		}
	}
	mixed("first")
	if n := exists.Swap(0); n != 1 {
		t.Errorf("first mixed batch: %d SCRIPT EXISTS, want 1", n)
	}
	mixed("second")
	if n := exists.Swap(0); n != 0 {
		t.Errorf("second mixed batch: %d SCRIPT EXISTS, want 0 (both scripts found already)", n)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	used++
	checkRule(t, "single take after SCRIPT FLUSH", take(t, b, s.request(opTake, 1, f)).Rules[0], true, used, 1000)
	mixed("after flush")
	if n := exists.Swap(0); n != 1 {
		t.Errorf("mixed batch after NOSCRIPT: %d SCRIPT EXISTS, want 1", n)
	}
}
