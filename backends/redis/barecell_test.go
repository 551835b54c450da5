package redis

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// bareReport is a report of a server without scripting that has TairHash
// and redis-cell: sliding windows on bare TairHash, GCRA on bare
// CL.THROTTLE.
func bareReport() *capability.Report {
	return &capability.Report{
		Scripting: capability.Count{Of: 1},
		Choices: []capability.Choice{
			{Algorithm: driver.SlidingWindow, Strategy: capability.TairHashBare},
			{Algorithm: driver.GCRA, Strategy: capability.CellBare},
		},
		NonAtomic: true,
	}
}

// serverError is an error reply of the server (goredis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// getReply is GET's reply as the snapshot pipeline gives it: v, or err.
func getReply(v string, err error) *goredis.Cmd {
	c := goredis.NewCmd(context.Background(), "get", "k")
	if err != nil {
		c.SetErr(err)
	} else {
		c.SetVal(v)
	}
	return c
}

// TestBareCellEval: a CL.THROTTLE rule is evaluated on its TAT (GET) as
// redis-cell decides: limit = burst+1, tolerance (burst+1)·T, admitted iff
// max(TAT, now) + c·T − tol <= now; reset and retry rounded up to µs.
// It needs no server; TestBareCell runs it against redis-cell.
func TestBareCellEval(t *testing.T) {
	r := driver.Rule{Name: "g", Algorithm: driver.GCRA, Limit: 10, Window: time.Minute, Burst: 4} // T = 6s, limit 5
	const now = int64(1_795_000_000_000_000)                                                      // µs
	tat := func(d time.Duration) string {
		return strconv.FormatInt(time.UnixMicro(now).Add(d).UnixNano(), 10)
	}
	s := int64(time.Second / time.Microsecond)
	tests := []struct {
		name string
		get  *goredis.Cmd
		cost int64
		res  []int64 // flags, used, reset µs, retry µs
	}{
		{"no key", getReply("", goredis.Nil), 5, []int64{1, 0, 0, 0}},
		{"no key, cost above the limit", getReply("", goredis.Nil), 6, []int64{2, 0, 0, 0}},
		{"two used, three fit", getReply(tat(12*time.Second), nil), 3, []int64{1, 2, 12 * s, 0}},
		{"two used, four do not", getReply(tat(12*time.Second), nil), 4, []int64{0, 2, 12 * s, 6 * s}},
		{"a TAT in the past", getReply(tat(-time.Hour), nil), 5, []int64{1, 0, 0, 0}},
		{"ns rounded up", getReply(tat(12*time.Second+1), nil), 4, []int64{0, 3, 12*s + 1, 6*s + 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bareRule{r: &r, cell: true}
			if err := br.evalCell(tc.get, now, tc.cost); err != nil {
				t.Fatalf("evalCell = %v", err)
			}
			if !slices.Equal(br.res, tc.res) {
				t.Errorf("evalCell(cost %d) = %v, want %v", tc.cost, br.res, tc.res)
			}
		})
	}
	for _, v := range []string{"", "abc", "-5", "+5", " 5", "5.0", "99999999999999999999", "9223372036854775808", "1795215617870091344\n"} {
		br := bareRule{r: &r, cell: true}
		err := br.evalCell(getReply(v, nil), now, 1)
		if err == nil || !strings.Contains(err.Error(), "freqcap: rule g: the GCRA state key holds a value CL.THROTTLE did not write") {
			t.Errorf("evalCell(%q) = %v, want take.lua's refusal", v, err)
		}
	}
	wt := getReply("", serverError("WRONGTYPE Operation against a key holding the wrong kind of value"))
	if err := (&bareRule{r: &r, cell: true}).evalCell(wt, now, 1); err == nil || !strings.Contains(err.Error(), "freqcap: rule g: the GCRA state key is not a string key (WRONGTYPE)") {
		t.Errorf("evalCell(WRONGTYPE) = %v, want take.lua's refusal", err)
	}
}

// TestBareCellRules: in bare mode a GCRA rule runs on CL.THROTTLE with the
// lua+redis-cell strategy's key and arguments (cellArgs), and a rule
// CL.THROTTLE cannot express exactly is refused with an error that says
// why (no other strategy can take it), never naming the subject.
func TestBareCellRules(t *testing.T) {
	s := newSubject(t, "barecellrules")
	rep := bareReport()
	ok := s.gcra("g", 10, time.Minute, 4)
	br, err := newBareRule(&ok, rep)
	if err != nil || !br.cell || br.key != ok.Key+suffixCell || br.count != 1 || br.period != 6 {
		t.Errorf("newBareRule(10/min) = {cell %v key %q count %d period %d}, %v; want CL.THROTTLE on <key>%s, 1 per 6 s", br.cell, br.key, br.count, br.period, err, suffixCell)
	}
	for _, tc := range []struct {
		r    driver.Rule
		want string
	}{
		{s.gcra("g", 3, time.Second, 0), "is not a whole number of microseconds"},
		{s.gcra("g", 1, 9007200001*time.Microsecond, 0), "needs a CL.THROTTLE period beyond 2^53 ns"},
		{s.gcra("g", 1, time.Second, 10_000_000), "exceeds 2^53 ns"},
	} {
		_, err := newBareRule(&tc.r, rep)
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "CL.THROTTLE, which cannot express this rule exactly") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("newBareRule(%v/%d burst %d) = %v, want errors.ErrUnsupported saying CL.THROTTLE cannot express it (%q)", tc.r.Window, tc.r.Limit, tc.r.Burst, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), driver.HashTag(s.base)) {
			t.Errorf("error %q leaks the subject", err)
		}
	}
	// Without redis-cell GCRA stays unavailable.
	rep.Choices[1] = capability.Choice{Algorithm: driver.GCRA, Strategy: capability.Unavailable, Reason: "no redis-cell"}
	if _, err := newBareRule(&ok, rep); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("newBareRule without redis-cell = %v, want errors.ErrUnsupported", err)
	}
}

// bareCellBackend returns a backend on the redis-cell server of
// FREQCAP_TEST_CELL as a client without scripting sees it (bareClient),
// its client, and its report, which must choose bare CL.THROTTLE for GCRA.
func bareCellBackend(t *testing.T) (*Backend, *goredis.Client, *capability.Report) {
	t.Helper()
	c := bareClient(t, moduleAddr(t, "FREQCAP_TEST_CELL"))
	b := New(c, nil)
	return b, c, wantStrategy(t, b, driver.GCRA, capability.CellBare)
}

// bareStep is one operation of a sequence compared with the memory
// backend.
type bareStep struct {
	op   op
	cost int64
}

// TestBareCellMatchesMemory: on a server without scripting, GCRA rules on
// bare CL.THROTTLE decide sequences of takes (costs above 1 and above the
// limit, several rules, a shadow rule), peeks and inspections exactly as
// the memory backend does at the same instant (each Result.Now): allowed,
// cost too high, used, remaining, limit. Their ResetAfter and RetryAfter
// come from CL.THROTTLE's TAT, set on its own clock, which reads after
// the snapshot's TIME: never shorter than the memory backend's, and at
// most the time between the two longer. The emission intervals are
// seconds to minutes, so the milliseconds a sequence takes move no
// decision.
func TestBareCellMatchesMemory(t *testing.T) {
	b, _, rep := bareCellBackend(t)
	if !rep.NonAtomic {
		t.Errorf("report NonAtomic = false, want true:\n%s", rep)
	}
	take1, peek1 := bareStep{opTake, 1}, bareStep{opPeek, 1}
	var allowed, denied, tooHigh int // the sequences' outcomes, so that none is vacuous
	for _, tc := range []struct {
		name  string
		rules func(s subject) []driver.Rule
		steps []bareStep
	}{
		{"burst 4, costs 1 to 6", func(s subject) []driver.Rule { return []driver.Rule{s.gcra("g", 10, time.Hour, 4)} },
			[]bareStep{take1, {opTake, 2}, peek1, {opTake, 3}, take1, {opTake, 6}, {opInspect, 0}, {opPeek, 2}, take1, take1}},
		{"burst 0", func(s subject) []driver.Rule { return []driver.Rule{s.gcra("g", 2, time.Minute, 0)} },
			[]bareStep{take1, take1, {opTake, 2}, peek1}},
		{"T 1s, burst 9", func(s subject) []driver.Rule { return []driver.Rule{s.gcra("g", 3600, time.Hour, 9)} },
			[]bareStep{{opTake, 4}, {opTake, 4}, {opTake, 4}, {opTake, 2}, {opTake, 11}, peek1}},
		{"two rules, all or nothing", func(s subject) []driver.Rule {
			return []driver.Rule{s.gcra("a", 10, time.Hour, 4), s.gcra("b", 2, time.Hour, 1)}
		}, []bareStep{take1, take1, take1, {opTake, 2}, peek1, {opTake, 6}, {opInspect, 0}}},
		{"a shadow rule", func(s subject) []driver.Rule {
			sh := s.gcra("sh", 2, time.Hour, 1)
			sh.Shadow = true
			return []driver.Rule{s.gcra("a", 10, time.Hour, 4), sh}
		}, []bareStep{take1, take1, take1, {opTake, 2}, take1, take1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "barecellmem")
			rules := tc.rules(s)
			clock := fakeclock.New(time.Time{})
			mem := memory.New(&memory.Options{Clock: clock})
			for k, st := range tc.steps {
				req := s.request(st.op, st.cost, rules...)
				got := take(t, b, req)
				clock.Set(got.Now)
				want, err := memDo(context.Background(), mem, st.op, req.Request)
				if err != nil {
					t.Fatalf("memory %v: %v", st.op, err)
				}
				compareBareCell(t, k, st, got, want)
				switch {
				case want.Allowed:
					allowed++
				case slices.ContainsFunc(want.Rules, func(r driver.RuleResult) bool { return r.CostTooHigh }):
					tooHigh++
				default:
					denied++
				}
			}
		})
	}
	if allowed < 10 || denied < 5 || tooHigh < 3 {
		t.Errorf("the sequences gave %d allowed, %d denied, %d cost too high: want at least 10, 5, 3", allowed, denied, tooHigh)
	}
	t.Logf("%d allowed, %d denied, %d cost too high, each as the memory backend decided", allowed, denied, tooHigh)
}

// compareBareCell fails unless got (bare CL.THROTTLE) is want (memory, at
// got.Now) as TestBareCellMatchesMemory says.
func compareBareCell(t *testing.T, k int, st bareStep, got, want driver.Result) {
	t.Helper()
	const slack = 250 * time.Millisecond
	if got.Allowed != want.Allowed || !got.NonAtomic {
		t.Errorf("step %d (%v cost %d): Allowed %v NonAtomic %v, want %v, true", k, st.op, st.cost, got.Allowed, got.NonAtomic, want.Allowed)
	}
	for i, g := range got.Rules {
		w := want.Rules[i]
		same := g.Allowed == w.Allowed && g.CostTooHigh == w.CostTooHigh && g.Used == w.Used &&
			g.Remaining == w.Remaining && g.Limit == w.Limit && g.Strategy == capability.CellBare.String()
		for _, d := range [][2]time.Duration{{g.ResetAfter, w.ResetAfter}, {g.RetryAfter, w.RetryAfter}} {
			same = same && d[0] >= d[1] && d[0] <= d[1]+slack
		}
		if !same {
			t.Errorf("step %d (%v cost %d) rule %d: bare = %s (%s), memory at the same instant = %s", k, st.op, st.cost, i, resultLine(g), g.Strategy, resultLine(w))
		}
	}
}

// TestBareCellPeekWritesNothing: a peek or an inspection reads the TAT and
// never calls CL.THROTTLE: on a fresh key it creates none (not even the
// 0 ms key a CL.THROTTLE … 0 peek leaves), and on a used key it leaves
// the TAT and its TTL as they were. A take writes the TAT with a TTL.
func TestBareCellPeekWritesNothing(t *testing.T) {
	ctx := context.Background()
	b, c, _ := bareCellBackend(t)
	s := newSubject(t, "barecellpeek")
	g := s.gcra("g", 10, time.Hour, 4)
	key := g.Key + suffixCell
	for _, o := range []op{opPeek, opInspect} {
		if res := take(t, b, s.request(o, 1, g)); !res.Allowed && o == opPeek {
			t.Errorf("%v on a fresh key = denied, want allowed", o)
		}
		if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS after a %v on a fresh key = %d, %v; want 0", o, n, err)
		}
	}
	take(t, b, s.request(opTake, 2, g))
	before, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET after a take: %v", err)
	}
	if pttl, _ := c.PTTL(ctx, key).Result(); pttl <= 0 {
		t.Errorf("PTTL after a take = %v, want > 0", pttl)
	}
	for _, o := range []op{opPeek, opInspect, opPeek} {
		if res := take(t, b, s.request(o, 1, g)); res.Rules[0].Used != 2 {
			t.Errorf("%v after a take of 2: used %d, want 2", o, res.Rules[0].Used)
		}
	}
	if after, _ := c.Get(ctx, key).Result(); after != before {
		t.Errorf("the TAT changed on peeks: %s -> %s", before, after)
	}
}

// bareMixedBackend is bareCellBackend on a server that has TairHash too
// (FREQCAP_TEST_CELL, else FREQCAP_TEST_TAIRHASH, whichever loads both
// modules), or skips loudly.
func bareMixedBackend(t *testing.T) (*Backend, *goredis.Client) {
	t.Helper()
	for _, env := range []string{"FREQCAP_TEST_CELL", "FREQCAP_TEST_TAIRHASH"} {
		addr := os.Getenv(env)
		if addr == "" {
			continue
		}
		c := bareClient(t, addr)
		b := New(c, nil)
		rep, err := b.Capabilities(context.Background())
		if err != nil {
			t.Fatalf("Capabilities() error: %v", err)
		}
		if rep.Choice(driver.SlidingWindow).Strategy == capability.TairHashBare && rep.Choice(driver.GCRA).Strategy == capability.CellBare {
			return b, c
		}
	}
	t.Skip("SKIPPED: neither FREQCAP_TEST_CELL nor FREQCAP_TEST_TAIRHASH names a server with both TairHash and redis-cell: requests mixing bare TairHash and CL.THROTTLE rules are NOT tested")
	return nil, nil
}

// consumeAfter runs a bare take of req in its steps, calling between the
// snapshot (which must admit) and the consumption; it returns whether the
// consumption admitted and the rules' states.
func consumeAfter(t *testing.T, b *Backend, req request, between func()) (bool, []bareRule) {
	t.Helper()
	ctx := context.Background()
	rep, err := b.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bq, err := newBareReq(opTake, req.Request, rep)
	if err != nil {
		t.Fatal(err)
	}
	kvs, now, _, err := b.bareSnapshot(ctx, bq)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := bq.evalAll(kvs, now); !ok || err != nil {
		t.Fatalf("the snapshot = %v, %v; want admitted", ok, err)
	}
	between()
	allowed, err := b.bareConsume(ctx, bq.rules, now, bq.c)
	if err != nil {
		t.Fatal(err)
	}
	return allowed, bq.rules
}

// TestBareCellConsumeRefused: the one case where bare CL.THROTTLE is not
// all-or-nothing. The snapshot admits two GCRA rules; another client fills
// the one with more headroom before the consumption; the other (less
// headroom: first) consumes, the filled one's CL.THROTTLE refuses, and
// the request is denied while the first rule keeps its unit
// (under-admission, never over-admission), reported as consumed; the
// refusing rule reports its state now, with a retry. Filling the rule with
// less headroom instead denies before anything is consumed.
func TestBareCellConsumeRefused(t *testing.T) {
	ctx := context.Background()
	b, c, _ := bareCellBackend(t)
	fill := func(r driver.Rule, n int64) func() {
		return func() {
			if err := c.Do(ctx, "cl.throttle", r.Key+suffixCell, r.Burst, 1, 360, n).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := newSubject(t, "barecellrefused")
	wide, narrow := s.gcra("wide", 10, time.Hour, 4), s.gcra("narrow", 10, time.Hour, 1)
	allowed, rules := consumeAfter(t, b, s.request(opTake, 1, wide, narrow), fill(wide, 5))
	if allowed || !slices.Equal(rules[1].res[:2], []int64{1, 1}) || rules[0].res[0] != 0 || rules[0].res[1] != 5 || rules[0].res[3] <= 0 {
		t.Errorf("consumption = %v, wide %v, narrow %v; want denied, narrow consumed (used 1), wide denied (used 5) with a retry", allowed, rules[0].res, rules[1].res)
	}
	res := take(t, b, s.request(opPeek, 1, wide, narrow))
	if res.Rules[0].Used != 5 || res.Rules[1].Used != 1 {
		t.Errorf("peek after: used %d, %d; want 5, 1 (narrow keeps its unit)", res.Rules[0].Used, res.Rules[1].Used)
	}

	s2 := newSubject(t, "barecellrefused2")
	wide, narrow = s2.gcra("wide", 10, time.Hour, 4), s2.gcra("narrow", 10, time.Hour, 1)
	if allowed, _ = consumeAfter(t, b, s2.request(opTake, 1, wide, narrow), fill(narrow, 2)); allowed {
		t.Errorf("consumption after narrow was filled = allowed, want denied")
	}
	if n, _ := c.Exists(ctx, wide.Key+suffixCell).Result(); n != 0 {
		t.Errorf("wide's key exists: it consumed before narrow, which had less headroom, refused")
	}
}

// TestThrottleOrder: enforced CL.THROTTLE rules consume by headroom, least
// first, shadow rules last; TairHash rules and rules that denied are not
// in the order.
func TestThrottleOrder(t *testing.T) {
	rule := func(burst int64, shadow bool) *driver.Rule {
		return &driver.Rule{Algorithm: driver.GCRA, Burst: burst, Shadow: shadow}
	}
	rules := []bareRule{
		{r: rule(9, false), cell: true, res: []int64{1, 2, 0, 0}}, // headroom 8
		{r: rule(1, true), cell: true, res: []int64{1, 1, 0, 0}},  // shadow, headroom 1
		{r: rule(4, false), cell: true, res: []int64{1, 0, 0, 0}}, // headroom 5
		{r: &driver.Rule{Algorithm: driver.SlidingWindow, Limit: 1}, res: []int64{1, 0, 0, 0}},
		{r: rule(2, false), cell: true, res: []int64{1, 1, 0, 0}}, // headroom 2
		{r: rule(0, true), cell: true, res: []int64{0, 1, 0, 1}},  // a shadow rule that denied
		{r: rule(9, false), cell: true, res: []int64{1, 1, 0, 0}}, // headroom 9
		{r: rule(6, true), cell: true, res: []int64{1, 0, 0, 0}},  // shadow, headroom 7
	}
	if got, want := throttleOrder(rules), []int{4, 2, 0, 6, 1, 7}; !slices.Equal(got, want) {
		t.Errorf("throttleOrder = %v, want %v", got, want)
	}
}

// TestBareCellMixed: one request with bare TairHash sliding windows and
// CL.THROTTLE rules. The TairHash rules consume first: when a CL.THROTTLE
// rule refuses they are given back (a GCRA rule consumed before it keeps
// its unit); when a TairHash rule fails, no CL.THROTTLE rule was called.
// Decisions otherwise are all-or-nothing, as the memory backend's.
func TestBareCellMixed(t *testing.T) {
	ctx := context.Background()
	b, c := bareMixedBackend(t)
	s := newSubject(t, "barecellmixed")
	sw, g1, g2 := s.sliding("s", 5, time.Hour, 10), s.gcra("g1", 10, time.Hour, 4), s.gcra("g2", 10, time.Hour, 1)
	check := func(what string, res driver.Result, allowed bool, used ...int64) {
		t.Helper()
		got := make([]int64, len(res.Rules))
		for i, r := range res.Rules {
			got[i] = r.Used
		}
		if res.Allowed != allowed || !res.NonAtomic || !slices.Equal(got, used) {
			t.Errorf("%s = allowed %v NonAtomic %v used %v; want %v, true, %v", what, res.Allowed, res.NonAtomic, got, allowed, used)
		}
		if len(res.Rules) == 3 && (res.Rules[0].Strategy != "tairhash-bare" || res.Rules[1].Strategy != "redis-cell-bare") {
			t.Errorf("%s: strategies %q, %q; want tairhash-bare, redis-cell-bare", what, res.Rules[0].Strategy, res.Rules[1].Strategy)
		}
	}
	check("take 1", take(t, b, s.request(opTake, 1, sw, g1, g2)), true, 1, 1, 1)
	check("take 2 (g2 denies)", take(t, b, s.request(opTake, 2, sw, g1, g2)), false, 1, 1, 1)
	check("peek", take(t, b, s.request(opPeek, 1, sw, g1, g2)), true, 1, 1, 1)

	// g1 (more headroom than g2) refuses at consumption: s is given back,
	// g2, which consumed first, keeps its unit.
	allowed, _ := consumeAfter(t, b, s.request(opTake, 1, sw, g1, g2), func() {
		if err := c.Do(ctx, "cl.throttle", g1.Key+suffixCell, 4, 1, 360, 4).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if allowed {
		t.Errorf("consumption after g1 was filled = allowed, want denied")
	}
	check("peek after g1 refused (g2 full)", take(t, b, s.request(opPeek, 1, sw, g2)), false, 1, 2)

	// A TairHash rule fails at consumption: no CL.THROTTLE is called.
	s2 := newSubject(t, "barecellmixed2")
	sw2, g3 := s2.sliding("s", 2, time.Hour, 10), s2.gcra("g3", 10, time.Hour, 4)
	allowed, _ = consumeAfter(t, b, s2.request(opTake, 1, sw2, g3), func() {
		take(t, b, s2.request(opTake, 2, sw2))
	})
	if allowed {
		t.Errorf("consumption after s was filled = allowed, want denied")
	}
	if n, _ := c.Exists(ctx, g3.Key+suffixCell).Result(); n != 0 {
		t.Errorf("g3's key exists: CL.THROTTLE ran although s refused first")
	}
}

// TestBareCellRace: 32 workers, 4 takes each, on two GCRA rules (q wide,
// p 20 per day): exactly 20 are admitted, and both count 20: p, with less
// headroom, always consumes first, so q never consumes for a request p
// then refuses. With a TairHash rule in front (a server with both
// modules), it is compensated to exactly 20.
func TestBareCellRace(t *testing.T) {
	b, _, _ := bareCellBackend(t)
	s := newSubject(t, "barecellrace")
	q, p := s.gcra("q", 1000, 24*time.Hour, 999), s.gcra("p", 20, 24*time.Hour, 19)
	if used := bareRace(t, b, s, q, p); used[0] != 20 || used[1] != 20 {
		t.Errorf("race: used q %d, p %d; want 20, 20", used[0], used[1])
	}
	t.Run("with TairHash", func(t *testing.T) {
		b, _ := bareMixedBackend(t)
		s := newSubject(t, "barecellrace2")
		used := bareRace(t, b, s, s.sliding("w", 1000, time.Hour, 10), s.gcra("p", 20, 24*time.Hour, 19))
		if used[0] != 20 || used[1] != 20 {
			t.Errorf("race: used w %d, p %d; want 20, 20 (w compensated)", used[0], used[1])
		}
	})
}

// bareRace runs 32 workers of 4 takes each on rules, checks that exactly
// 20 are admitted, and returns the rules' used counts after.
func bareRace(t *testing.T, b *Backend, s subject, rules ...driver.Rule) []int64 {
	t.Helper()
	ctx := context.Background()
	done := make(chan int, 32)
	for range 32 {
		go func() {
			n := 0
			for range 4 {
				if res, err := b.do(ctx, s.request(opTake, 1, rules...)); err == nil && res.Allowed {
					n++
				}
			}
			done <- n
		}()
	}
	admitted := 0
	for range 32 {
		admitted += <-done
	}
	if admitted != 20 {
		t.Errorf("race: %d admitted, want 20", admitted)
	}
	res := take(t, b, s.request(opPeek, 1, rules...))
	used := make([]int64, len(res.Rules))
	for i, r := range res.Rules {
		used[i] = r.Used
	}
	return used
}

// TestBareCellIdempotencyAndTrail: bare GCRA writes the idempotency record
// and the denial trail as bare mode does: a retry replays the first
// decision (consuming nothing), a denial is in the trail, an inspection
// returns it and consumes nothing.
func TestBareCellIdempotencyAndTrail(t *testing.T) {
	ctx := context.Background()
	b, c, _ := bareCellBackend(t)
	s := newSubject(t, "barecellidem")
	g := s.gcra("g", 1, time.Hour, 0)
	req := s.request(opTake, 1, g)
	req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:k1", time.Minute
	first := take(t, b, req)
	tat, _ := c.Get(ctx, g.Key+suffixCell).Result()
	again := take(t, b, req)
	if !first.Allowed || !again.Replayed || !again.Allowed || again.Rules[0].Used != 1 || again.Rules[0].Strategy != "redis-cell-bare" || !again.NonAtomic {
		t.Errorf("retry = %+v; want the first decision (allowed, used 1, redis-cell-bare, NonAtomic) replayed", again)
	}
	if v, _ := c.Get(ctx, g.Key+suffixCell).Result(); v != tat {
		t.Errorf("the retry changed the TAT: %s -> %s", tat, v)
	}
	denied := s.request(opTake, 1, g)
	denied.TrailValues = "content=x"
	if res := take(t, b, denied); res.Allowed || res.Rules[0].RetryAfter <= 0 {
		t.Errorf("second take = %+v, want denied with a retry", res.Rules[0])
	}
	res := take(t, b, s.request(opInspect, 0, g))
	if len(res.Trail) != 1 || res.Trail[0].Rule != "g" || res.Trail[0].Used != 1 || res.Trail[0].Cost != 1 || res.Trail[0].Values != "content=x" {
		t.Errorf("Inspect trail = %+v, want one denial by g (used 1, cost 1, the request's values)", res.Trail)
	}
	if v, _ := c.Get(ctx, g.Key+suffixCell).Result(); v != tat {
		t.Errorf("the denial or the inspection changed the TAT: %s -> %s", tat, v)
	}
}

// TestBareCellForeignState: a value CL.THROTTLE did not write on a GCRA
// rule's key (it would abort the server) is refused by every bare
// operation with take.lua's error, before any CL.THROTTLE call: the server
// answers PING after each, and nothing is written.
func TestBareCellForeignState(t *testing.T) {
	ctx := context.Background()
	b, c, _ := bareCellBackend(t)
	admin := goredis.NewClient(&goredis.Options{Addr: c.Options().Addr})
	t.Cleanup(func() { admin.Close() })
	for _, fs := range foreignStates {
		t.Run(fs.name, func(t *testing.T) {
			s := newSubject(t, "barecellforeign")
			r := s.gcra("g", 10, time.Minute, 4)
			key := r.Key + suffixCell
			fs.put(t, admin, key)
			before := dumpKey(t, admin, key)
			for o, req := range gcraOps(s, r) {
				_, err := b.do(ctx, req)
				if err := c.Ping(ctx).Err(); err != nil {
					t.Fatalf("%s: PING = %v: the server is gone", o, err)
				}
				if o == "reserve" {
					if !errors.Is(err, errors.ErrUnsupported) {
						t.Errorf("reserve: error = %v, want errors.ErrUnsupported", err)
					}
					continue
				}
				checkForeignErr(t, o, err, s, "g")
			}
			if after := dumpKey(t, admin, key); after != before {
				t.Errorf("the key changed on a refusal")
			}
			if n, _ := c.Exists(ctx, s.trail(), s.base+"!i:k").Result(); n != 0 {
				t.Errorf("%d of the trail and idempotency keys written on a refusal", n)
			}
		})
	}
}

// TestBareCellDescribe: the report, Describe and the errors say that GCRA
// runs on bare CL.THROTTLE, why, and what it cannot do: reservations,
// other algorithms, rules CL.THROTTLE cannot express; batches fall back to
// one Take per request.
func TestBareCellDescribe(t *testing.T) {
	ctx := context.Background()
	b, _, rep := bareCellBackend(t)
	reason := rep.Choice(driver.GCRA).Reason
	for _, want := range []string{"plain Lua GCRA cannot run", "CL.THROTTLE", "under-admission, never over-admission"} {
		if !strings.Contains(reason, want) {
			t.Errorf("GCRA reason %q, want it to say %q", reason, want)
		}
	}
	if !strings.Contains(rep.String(), "redis-cell-bare") {
		t.Errorf("report (freqcap detect) does not name redis-cell-bare:\n%s", rep)
	}
	d, err := b.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Strategies[driver.GCRA]; st.Name != "redis-cell-bare" || !strings.Contains(st.Reason, "state under <key>"+suffixCell) {
		t.Errorf("Describe: GCRA = %+v, want redis-cell-bare with its key", st)
	}
	if !slices.ContainsFunc(d.Notes, func(n string) bool { return strings.Contains(n, "GCRA rules run as bare CL.THROTTLE commands") }) {
		t.Errorf("Describe notes %q, want one saying GCRA rules run as bare CL.THROTTLE commands", d.Notes)
	}
	t.Logf("report:\n%s", rep)
	s := newSubject(t, "barecelldescribe")
	g := s.gcra("g", 10, time.Minute, 4)
	reserve := s.request(opReserve, 1, g)
	reserve.ReservationID, reserve.ReservationTTL = "h", time.Minute
	for name, req := range map[string]request{
		"reserve":          reserve,
		"fixed window":     s.request(opTake, 1, g, s.fixed("f", 10, time.Minute)),
		"inexpressible":    s.request(opTake, 1, s.gcra("g3", 3, time.Second, 0)),
		"policy store (2)": func() request { r := g; r.Epoch = 2; return s.request(opTake, 1, r) }(),
	} {
		if _, err := b.do(ctx, req); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: error = %v, want errors.ErrUnsupported", name, err)
		}
	}
	out := b.batch(ctx, []request{s.request(opTake, 5, g), s.request(opTake, 1, g)})
	for k, want := range []bool{true, false} {
		if out[k].Err != nil || out[k].Result.Allowed != want || !out[k].Result.NonAtomic {
			t.Errorf("TakeBatch[%d] = %+v, %v; want allowed %v, NonAtomic", k, out[k].Result, out[k].Err, want)
		}
	}
}
