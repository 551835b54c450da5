package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// The GCRA sweep: from an empty state, burst+2 takes of 1 back to back,
// for every rate count/period (counts 1..13, periods 1..6 s) and burst
// 0..3, compared call by call between take.lua, the memory backend and
// (where a server has it) redis-cell's CL.THROTTLE.
//
// Timing. The takes of one rule go in one pipeline (TakeBatch: same hash
// tag, so in order), and the memory backend is asked at exactly the
// instants take.lua read from TIME (each Result.Now, µs): the two are
// compared at identical instants, so no amount of time between the calls
// can make them disagree. The closed form (take k of burst+1 admitted
// with used k, then a denial) and CL.THROTTLE, whose own clock cannot be
// set, hold only while the takes span less than one emission interval T
// (≥ 1 s/13 ≈ 77 ms here; a pipeline spans well under 1 ms): a rule whose
// calls spanned T/2 or more is run again on fresh keys (at most 3 times)
// instead of being judged.

const sweepTries = 3

type sweepCase struct {
	count  int64
	period time.Duration
	burst  int64
}

func (sc sweepCase) String() string {
	return fmt.Sprintf("%d per %v burst %d", sc.count, sc.period, sc.burst)
}

func sweepCases() []sweepCase {
	var cs []sweepCase
	for count := int64(1); count <= 13; count++ {
		for p := 1; p <= 6; p++ {
			for burst := int64(0); burst <= 3; burst++ {
				cs = append(cs, sweepCase{count, time.Duration(p) * time.Second, burst})
			}
		}
	}
	return cs
}

// sweepWant is the closed form of take k (1-based) of 1 from an empty
// state, all within one emission interval: burst+1 admitted, then denied.
func sweepWant(sc sweepCase, k int64) (allowed bool, used, remaining int64) {
	limit := sc.burst + 1
	if k <= limit {
		return true, k, limit - k
	}
	return false, limit, 0
}

// mismatches collects disagreements and reports them as one error per
// mismatch (the first few in full) plus a count.
type mismatches struct {
	t     *testing.T
	n     int
	calls int
}

func (m *mismatches) add(format string, args ...any) {
	m.t.Helper()
	m.n++
	if m.n <= 40 {
		m.t.Errorf(format, args...)
	}
}

func (m *mismatches) done(what string) {
	m.t.Helper()
	if m.n > 0 {
		m.t.Errorf("%s: %d mismatching results over %d calls", what, m.n, m.calls)
		return
	}
	m.t.Logf("%s: %d calls, all agree", what, m.calls)
}

func resultLine(r driver.RuleResult) string {
	return fmt.Sprintf("{allowed %v used %d remaining %d limit %d reset %v retry %v}", r.Allowed, r.Used, r.Remaining, r.Limit, r.ResetAfter, r.RetryAfter)
}

// sweepBackend runs the sweep through b (take.lua) and compares every
// result with the memory backend at the same instant and with the closed
// form. Results of the redis-cell strategy ("x") are compared on Allowed,
// Used, Remaining and Limit only: their ResetAfter and RetryAfter come
// from redis-cell's own clock.
func sweepBackend(t *testing.T, b *Backend) {
	ctx := context.Background()
	m := &mismatches{t: t}
	strategies := map[string]int{}
	for _, sc := range sweepCases() {
		var (
			reqs []request
			out  []driver.BatchResult
			r    driver.Rule
		)
		span := time.Duration(-1)
		interval, _, _ := driver.Rule{Algorithm: driver.GCRA, Limit: sc.count, Window: sc.period, Burst: sc.burst}.GCRAParams()
		for try := 0; try < sweepTries; try++ {
			s := newSubject(t, "sweep")
			r = s.gcra("g", sc.count, sc.period, sc.burst)
			reqs = make([]request, sc.burst+2)
			for k := range reqs {
				reqs[k] = request{op: opTake, Request: driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: 1}}
			}
			out = b.batch(ctx, reqs)
			for k, o := range out {
				if o.Err != nil {
					t.Fatalf("%v: TakeBatch[%d] error: %v", sc, k, o.Err)
				}
				if len(o.Result.Rules) != 1 {
					t.Fatalf("%v: TakeBatch[%d] = %d rule results, want 1", sc, k, len(o.Result.Rules))
				}
			}
			span = out[len(out)-1].Result.Now.Sub(out[0].Result.Now)
			if span < interval/2 {
				break
			}
			t.Logf("%v: the takes spanned %v (T = %v): run again on fresh keys", sc, span, interval)
		}
		if span >= interval/2 {
			t.Fatalf("%v: the takes spanned %v, T/2 or more, %d times", sc, span, sweepTries)
		}
		clock := fakeclock.New(time.Time{})
		mem := memory.New(&memory.Options{Clock: clock})
		for k, o := range out {
			m.calls++
			got := o.Result.Rules[0]
			strategies[got.Strategy]++
			clock.Set(o.Result.Now)
			mres, err := mem.Take(ctx, reqs[k].Request)
			if err != nil {
				t.Fatalf("memory Take: %v", err)
			}
			want := mres.Rules[0]
			a, u, rem := sweepWant(sc, int64(k+1))
			if want.Allowed != a || want.Used != u || want.Remaining != rem {
				m.add("%v take #%d: memory = %s, want {allowed %v used %d remaining %d}", sc, k+1, resultLine(want), a, u, rem)
			}
			same := got.Allowed == want.Allowed && got.Used == want.Used && got.Remaining == want.Remaining &&
				got.Limit == want.Limit && got.CostTooHigh == want.CostTooHigh
			if got.Strategy != capability.CellLua.String() {
				same = same && got.ResetAfter == want.ResetAfter && got.RetryAfter == want.RetryAfter
			}
			if !same || o.Result.Allowed != got.Allowed {
				m.add("%v take #%d (%s): Lua = %s, memory at the same instant = %s", sc, k+1, got.Strategy, resultLine(got), resultLine(want))
			}
		}
	}
	t.Logf("strategies: %v", strategies)
	m.done("take.lua vs memory")
}

// sweepCell runs the sweep through CL.THROTTLE itself (each rule's calls in
// one MULTI between two TIMEs) and compares it with the closed form, which
// the memory backend was held to in sweepBackend.
func sweepCell(t *testing.T, c *goredis.Client) {
	ctx := context.Background()
	m := &mismatches{t: t}
	for _, sc := range sweepCases() {
		interval, _, _ := driver.Rule{Algorithm: driver.GCRA, Limit: sc.count, Window: sc.period, Burst: sc.burst}.GCRAParams()
		var (
			cmds []*goredis.Cmd
			span time.Duration
		)
		for try := 0; try < sweepTries; try++ {
			key := newSubject(t, "sweepcell").key("cell")
			cmds = make([]*goredis.Cmd, sc.burst+2)
			var t0, t1 *goredis.TimeCmd
			_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				t0 = p.Time(ctx)
				for k := range cmds {
					cmds[k] = p.Do(ctx, "CL.THROTTLE", key, sc.burst, sc.count, int64(sc.period/time.Second), 1)
				}
				t1 = p.Time(ctx)
				return nil
			})
			if err != nil {
				t.Fatalf("%v: CL.THROTTLE pipeline: %v", sc, err)
			}
			span = t1.Val().Sub(t0.Val())
			if span < interval/2 {
				break
			}
			t.Logf("%v: the calls spanned %v (T = %v): run again on a fresh key", sc, span, interval)
		}
		if span >= interval/2 {
			t.Fatalf("%v: the calls spanned %v, T/2 or more, %d times", sc, span, sweepTries)
		}
		for k, cmd := range cmds {
			m.calls++
			v, err := cmd.Int64Slice()
			if err != nil || len(v) != 5 {
				t.Fatalf("%v: CL.THROTTLE #%d = %v, %v; want 5 integers", sc, k+1, v, err)
			}
			a, u, rem := sweepWant(sc, int64(k+1))
			if (v[0] == 0) != a || v[1] != sc.burst+1 || v[2] != rem {
				m.add("%v call #%d: CL.THROTTLE = %v, want {limited %v limit %d remaining %d} (used %d)", sc, k+1, v, !a, sc.burst+1, rem, u)
			}
		}
	}
	m.done("CL.THROTTLE vs the closed form")
}

// TestGCRASweep runs the sweep on a plain server (take.lua's "g").
func TestGCRASweep(t *testing.T) {
	b, _ := standalone(t)
	sweepBackend(t, b)
}

// TestGCRASweepCell runs the sweep on the redis-cell server: through the
// backend ("x" for the rules CL.THROTTLE expresses exactly, "g" for the
// others) and through CL.THROTTLE itself.
func TestGCRASweepCell(t *testing.T) {
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_CELL"), modStrategies)
	wantStrategy(t, b, driver.GCRA, capability.CellLua)
	t.Run("backend", func(t *testing.T) { sweepBackend(t, b) })
	t.Run("CL.THROTTLE", func(t *testing.T) { sweepCell(t, c) })
}

// gcraFloor returns take.lua's floor division of GCRA's Remaining, as
// the algorithm fragment (lua/alg/gcra.lua) pastes it inline: the double
// quotient q = left / T floored inline (q - q % 1), corrected by one
// where rounding carried it across an integer, then clamped to [0, L]
// (gcraClamp). Every copy in take.lua must be the same (evaluate and
// commit).
func gcraFloor(t *testing.T) string {
	t.Helper()
	const head, floor = "local q = left / T\n", "q = q - q % 1"
	parts := strings.Split(lua.Take, head)
	if len(parts) < 3 {
		t.Fatalf("take.lua has %d copies of %q, want 2 or more (evaluate and commit)", len(parts)-1, strings.TrimSpace(head))
	}
	lines := func(p string) []string {
		l := strings.SplitN(p, "\n", 4)
		for i := range l {
			l[i] = strings.TrimSpace(l[i])
		}
		return l
	}
	fix := lines(parts[1])[1]
	if !strings.Contains(fix, "q * T > left") {
		t.Fatalf("take.lua: %q not followed by its correction, got %q", strings.TrimSpace(head), fix)
	}
	for k, p := range parts[1:] {
		l := lines(p)
		if l[0] != floor || l[1] != fix || l[2]+"\n" != gcraClamp {
			t.Fatalf("take.lua: copy %d of the floor division = %q, want %q, %q, %q", k+1, l[:3], floor, fix, gcraClamp)
		}
	}
	return head + floor + "\n" + fix + "\n"
}

// gcraClamp is the line after gcraFloor's: Remaining q clamped to [0, L].
const gcraClamp = "if q < 0 then q = 0 elseif q > L then q = L end\n"

// TestGCRAFloorDivision runs take.lua's floor division of GCRA's
// Remaining on the server: exact floors of negative, exact and large
// quotients, and Remaining clamped to [0, L] (take.lua reports used as L
// minus it).
func TestGCRAFloorDivision(t *testing.T) {
	_, c := standalone(t)
	ctx := context.Background()
	src := "local left, T, L = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n" + gcraFloor(t) +
		"local floor = q\n" + gcraClamp + "return {floor, q}"
	floor := func(a, b int64) int64 {
		q := a / b
		if a%b != 0 && a < 0 {
			q--
		}
		return q
	}
	for _, tc := range []struct{ a, b, l int64 }{
		{0, 7, 3}, {428571, 428571, 2}, {428570, 428571, 2}, {857142, 428571, 2}, {857141, 428571, 1},
		{-1, 3, 5}, {-428571, 428571, 5}, {-428572, 428571, 5}, {5, 1, 3},
		{1<<53 - 1, 3, 1 << 60}, {1<<53 - 2, 1<<52 - 1, 9}, {1<<53 - 1, 1<<53 - 1, 9},
		{-(1<<53 - 1), 7, 9}, {3*333333 - 1, 333333, 9}, {1<<52 + 1, 1<<26 + 1, 1 << 40},
	} {
		got, err := c.Eval(ctx, src, nil, tc.a, tc.b, tc.l).Int64Slice()
		if err != nil || len(got) != 2 {
			t.Fatalf("floor(%d / %d) = %v, %v", tc.a, tc.b, got, err)
		}
		want := floor(tc.a, tc.b)
		if got[0] != want {
			t.Errorf("floor(%d / %d) = %d, want %d", tc.a, tc.b, got[0], want)
		}
		if rem := min(max(want, 0), tc.l); got[1] != rem {
			t.Errorf("remaining(%d, %d, %d) = %d, want %d", tc.a, tc.b, tc.l, got[1], rem)
		}
	}
}
