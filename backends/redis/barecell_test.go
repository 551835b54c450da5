package redis

import (
	"context"
	"errors"
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
