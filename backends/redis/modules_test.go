package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The module strategies run against real module servers given by address
// (docs/MODULES.md): FREQCAP_TEST_TAIRHASH (TairHash, a SORT_MODE build),
// FREQCAP_TEST_CELL (redis-cell), FREQCAP_TEST_HFE (Redis >= 7.4). Each
// test skips loudly when its variable is unset, even under
// FREQCAP_REQUIRE_SERVERS=1: neither module is published where CI can get
// it. The plain-server tests (conformance_test.go) cover the fallbacks.

// moduleAddr returns the address in env, or skips.
func moduleAddr(t *testing.T, env string) string {
	t.Helper()
	addr := os.Getenv(env)
	if addr == "" {
		t.Skipf("SKIPPED: %s is not set (host:port of a module server, docs/MODULES.md); module tests never fail for a missing server", env)
	}
	return addr
}

// moduleBackend returns a backend on addr with cfg, and its client.
func moduleBackend(t *testing.T, addr string, cfg capability.Config) (*Backend, *goredis.Client) {
	t.Helper()
	c := goredis.NewClient(testserver.Patient(NewClientOptions(addr)).Simple())
	t.Cleanup(func() { c.Close() })
	return New(c, &Options{Detect: cfg}), c
}

// modStrategies is the configuration that uses the module strategies
// where they are usable (detection's default is plain Lua on every server:
// docs/MODULES.md, "Why plain Lua").
var modStrategies = capability.Config{ModuleStrategies: true}

// wantStrategy fails unless b's report chose want for a.
func wantStrategy(t *testing.T, b *Backend, a driver.Algorithm, want capability.Strategy) *capability.Report {
	t.Helper()
	rep, err := b.Capabilities(context.Background())
	if err != nil {
		t.Fatalf("Capabilities() error: %v", err)
	}
	if got := rep.Choice(a); got.Strategy != want {
		t.Fatalf("Choice(%v) = %v (%s), want %v\n%s", a, got.Strategy, got.Reason, want, rep)
	}
	return rep
}

// TestConformanceModules: each module server passes the suite as detected
// by default (plain Lua for every algorithm) and with its module strategy
// (Config.ModuleStrategies).
func TestConformanceModules(t *testing.T) {
	for _, tc := range []struct {
		env  string
		algo driver.Algorithm
		want capability.Strategy
	}{
		{"FREQCAP_TEST_TAIRHASH", driver.SlidingWindow, capability.TairHashLua},
		{"FREQCAP_TEST_CELL", driver.GCRA, capability.CellLua},
		{"FREQCAP_TEST_HFE", driver.SlidingWindow, capability.HFELua},
	} {
		t.Run(tc.env, func(t *testing.T) {
			addr := moduleAddr(t, tc.env)
			t.Run("default", func(t *testing.T) {
				b, _ := moduleBackend(t, addr, capability.Config{})
				for _, a := range capability.Algorithms {
					wantStrategy(t, b, a, capability.PlainLua)
				}
				runConformance(t, b)
			})
			t.Run("module strategy", func(t *testing.T) {
				b, _ := moduleBackend(t, addr, modStrategies)
				wantStrategy(t, b, tc.algo, tc.want)
				runConformance(t, b)
			})
		})
	}
}

// TestConformanceForcedPlainLua: a module server configured for plain Lua
// passes the suite with the plain strategies and never writes a module
// key.
func TestConformanceForcedPlainLua(t *testing.T) {
	for _, env := range []string{"FREQCAP_TEST_TAIRHASH", "FREQCAP_TEST_CELL"} {
		t.Run(env, func(t *testing.T) {
			b, _ := moduleBackend(t, moduleAddr(t, env), capability.Config{ForcePlainLua: true})
			for _, a := range capability.Algorithms {
				wantStrategy(t, b, a, capability.PlainLua)
			}
			runConformance(t, b)
		})
	}
}

// TestModuleKeys: each module strategy keeps its state under its suffixed
// key, of the module's type, and Forbid moves a rule back to the plain
// key.
func TestModuleKeys(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		env, suffix, typ string
		feature          capability.Feature
		rule             func(s subject) driver.Rule
	}{
		{"FREQCAP_TEST_TAIRHASH", suffixTairHash, "tairhash-", capability.TairHash, func(s subject) driver.Rule { return s.sliding("s", 500, time.Minute, 6) }},
		{"FREQCAP_TEST_HFE", suffixHFE, "hash", capability.HFE, func(s subject) driver.Rule { return s.sliding("s", 500, time.Minute, 6) }},
		{"FREQCAP_TEST_CELL", suffixCell, "string", capability.Cell, func(s subject) driver.Rule { return s.gcra("g", 6, time.Minute, 4) }},
	} {
		t.Run(tc.env, func(t *testing.T) {
			addr := moduleAddr(t, tc.env)
			b, c := moduleBackend(t, addr, modStrategies)
			plain, _ := moduleBackend(t, addr, capability.Config{ModuleStrategies: true, Forbid: []capability.Feature{tc.feature}})
			s := newSubject(t, "keys")
			r := tc.rule(s)
			res := take(t, b, s.request(opTake, 2, r))
			checkRule(t, "module take", res.Rules[0], true, 2, r.ReportedLimit())
			if typ, _ := c.Type(ctx, r.Key+tc.suffix).Result(); typ != tc.typ {
				t.Errorf("TYPE %s = %q, want %q", tc.suffix, typ, tc.typ)
			}
			if n, _ := c.Exists(ctx, r.Key).Result(); n != 0 {
				t.Errorf("the plain key exists after a module take")
			}
			res = take(t, plain, s.request(opTake, 1, r))
			checkRule(t, "plain take (module forbidden: a fresh key)", res.Rules[0], true, 1, r.ReportedLimit())
			if n, _ := c.Exists(ctx, r.Key).Result(); n != 1 {
				t.Errorf("the plain key is missing after a plain take")
			}
			res = take(t, b, s.request(opPeek, 1, r))
			checkRule(t, "module peek (its own state)", res.Rules[0], true, 2, r.ReportedLimit())
			if err := b.Reset(ctx, s.request(opTake, 1, r).Request); err != nil {
				t.Fatal(err)
			}
			if n, _ := c.Exists(ctx, r.Key, r.Key+tc.suffix).Result(); n != 0 {
				t.Errorf("Reset left %d of the plain and module keys", n)
			}
		})
	}
}

// TestTairHashFieldExpiry: a TairHash cell's field expires
// lua.FieldSlackMs after the last millisecond it counts, (i+N+1)·s-1
// (strict: N cells behind the current one still count; the slack covers
// TairHash's own clock running ahead of the decision's TIME), set with EXHPEXPIREAT (never EXHINCRBY's own TTL
// options), and a refund (cancel) keeps it.
func TestTairHashFieldExpiry(t *testing.T) {
	ctx := context.Background()
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_TAIRHASH"), modStrategies)
	wantStrategy(t, b, driver.SlidingWindow, capability.TairHashLua)
	s := newSubject(t, "thttl")
	r := s.sliding("s", 1000, time.Hour, 10) // 6 min cells (above driver.LogLine: not a log)
	req := s.request(opReserve, 3, r)
	req.ReservationID, req.ReservationTTL = "h1", time.Hour
	res := take(t, b, req)
	cell := (6 * time.Minute).Milliseconds()
	i := res.Now.UnixMilli() / cell
	f := strconv.FormatInt(i, 10)
	key := r.Key + suffixTairHash
	wantAt := (i+11)*cell - 1 + lua.FieldSlackMs
	check := func(what string, v string) {
		t.Helper()
		got, err := c.Do(ctx, "exhget", key, f).Text()
		if err != nil || got != v {
			t.Errorf("%s: EXHGET = %q, %v, want %q", what, got, err, v)
		}
		// TIME and EXHPTTL in one transaction: read at the same instant,
		// however late a loaded machine lets the test read them.
		var tm *goredis.TimeCmd
		var pt *goredis.Cmd
		if _, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			tm, pt = p.Time(ctx), p.Do(ctx, "exhpttl", key, f)
			return nil
		}); err != nil {
			t.Fatalf("%s: MULTI TIME EXHPTTL: %v", what, err)
		}
		pttl, err := pt.Int64()
		if now := tm.Val().UnixMilli(); err != nil || pttl <= 0 || now+pttl < wantAt-50 || now+pttl > wantAt+50 {
			t.Errorf("%s: EXHPTTL = %d, %v; want the field to expire at %d (±50ms), now %d", what, pttl, err, wantAt, now)
		}
	}
	check("after reserve 3", "3")
	take(t, b, s.request(opTake, 2, r))
	check("after take 2", "5")
	if err := b.Cancel(ctx, s.reservations(), "h1"); err != nil {
		t.Fatal(err)
	}
	check("after cancelling the reserve (EXHINCRBY -3, then EXHPEXPIREAT again)", "2")
}

// TestHFEFieldExpiry: a native hash-field-expiry cell's field expires one
// ms after it stops counting, at (i+N+1)·s (HPEXPIREAT, absolute).
func TestHFEFieldExpiry(t *testing.T) {
	ctx := context.Background()
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_HFE"), modStrategies)
	wantStrategy(t, b, driver.SlidingWindow, capability.HFELua)
	s := newSubject(t, "hfettl")
	r := s.sliding("s", 1000, time.Hour, 10) // 6 min cells (above driver.LogLine: not a log)
	res := take(t, b, s.request(opTake, 3, r))
	cell := (6 * time.Minute).Milliseconds()
	i := res.Now.UnixMilli() / cell
	got, err := c.Do(ctx, "hpexpiretime", r.Key+suffixHFE, "FIELDS", 1, strconv.FormatInt(i, 10)).Int64Slice()
	if want := (i + 11) * cell; err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("HPEXPIRETIME of cell i = %v, %v; want [%d], (i+N+1)·s", got, err, want)
	}
}

// TestCellKeyHoldsOnlyTAT: whatever the backend does to a redis-cell key
// (take, denial, a multi-rule undo, reserve, cancel, lapse), it holds an
// unsigned integer string or nothing: CL.THROTTLE aborts the server on
// anything else.
func TestCellKeyHoldsOnlyTAT(t *testing.T) {
	ctx := context.Background()
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_CELL"), modStrategies)
	wantStrategy(t, b, driver.GCRA, capability.CellLua)
	s := newSubject(t, "celltat")
	g1 := s.gcra("g1", 10, time.Minute, 4) // T = 6s, exact
	g2 := s.gcra("g2", 3, time.Minute, 1)
	digits := regexp.MustCompile(`^[0-9]{19}$`)
	check := func(what string) {
		t.Helper()
		for _, r := range []driver.Rule{g1, g2} {
			v, err := c.Get(ctx, r.Key+suffixCell).Result()
			if errors.Is(err, goredis.Nil) {
				continue
			}
			if err != nil || !digits.MatchString(v) {
				t.Errorf("%s: GET %s = %q, %v, want a TAT in ns", what, r.Name, v, err)
			}
			if pttl, _ := c.PTTL(ctx, r.Key+suffixCell).Result(); pttl <= 0 {
				t.Errorf("%s: PTTL %s = %v, want > 0", what, r.Name, pttl)
			}
		}
	}
	// A peek (quantity 0) on a fresh key writes its TAT = now with a 0 ms
	// TTL: gone by the next millisecond.
	res := take(t, b, s.request(opPeek, 1, g1, g2))
	if !res.Allowed {
		t.Errorf("a peek on fresh keys = denied, want allowed")
	}
	eventually(t, time.Second, "the peek's keys gone", func() bool {
		n, _ := c.Exists(ctx, g1.Key+suffixCell, g2.Key+suffixCell).Result()
		return n == 0
	})
	for k := 1; k <= 3; k++ {
		res = take(t, b, s.request(opTake, 1, g1, g2))
		check(fmt.Sprintf("take #%d", k))
	}
	if res.Allowed || res.Rules[1].Allowed || !res.Rules[0].Allowed {
		t.Errorf("take #3 = %+v, want denied by g2 alone", res.Rules)
	}
	before, _ := c.Get(ctx, g1.Key+suffixCell).Result()
	take(t, b, s.request(opTake, 1, g1, g2))
	if after, _ := c.Get(ctx, g1.Key+suffixCell).Result(); after != before {
		t.Errorf("g1's TAT changed on a request g2 denied: %s -> %s", before, after)
	}
	r2 := s.gcra("g3", 10, time.Minute, 4)
	req := s.request(opReserve, 2, g1, r2)
	req.ReservationID, req.ReservationTTL = "h", time.Hour
	take(t, b, req)
	check("reserve")
	if err := b.Cancel(ctx, s.reservations(), "h"); err != nil {
		t.Fatal(err)
	}
	check("cancel")
	if v, _ := c.Get(ctx, g1.Key+suffixCell).Result(); v != before {
		t.Errorf("g1's TAT after reserve+cancel = %s, want %s again", v, before)
	}
	if n, _ := c.Exists(ctx, r2.Key+suffixCell).Result(); n != 0 {
		t.Errorf("g3's key exists after its only reservation was cancelled")
	}
}

// TestCellForeignState: a redis-cell rule's key holding anything
// CL.THROTTLE did not write (which would abort the server) is refused with
// take.lua's freqcap error by every op — take, peek, inspect, reserve, an
// idempotent take — and nothing is written; a refund (cancel) of a reservation on
// such a key leaves it alone. The server answers PING after each.
func TestCellForeignState(t *testing.T) {
	ctx := context.Background()
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_CELL"), modStrategies)
	wantStrategy(t, b, driver.GCRA, capability.CellLua)
	alive := func(what string) {
		t.Helper()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("%s: PING = %v: the server is gone", what, err)
		}
	}
	for _, fs := range foreignStates {
		t.Run(fs.name, func(t *testing.T) {
			s := newSubject(t, "cellforeign")
			r := s.gcra("g", 10, time.Minute, 4) // T = 6s: on redis-cell
			key := r.Key + suffixCell
			fs.put(t, c, key)
			before := dumpKey(t, c, key)
			for op, req := range gcraOps(s, r) {
				res, err := b.do(ctx, req)
				alive(op)
				checkForeignErr(t, op, err, s, "g")
				if err == nil {
					t.Errorf("%s: Take = %+v, want an error", op, res)
				}
			}
			if after := dumpKey(t, c, key); after != before {
				t.Errorf("the key changed on a refusal")
			}
			if n, _ := c.Exists(ctx, s.reservations(), s.trail(), s.base+"!i:k").Result(); n != 0 {
				t.Errorf("%d of the reservations, trail and idempotency keys written on a refusal", n)
			}
			// A reservation taken while the key held a TAT, cancelled after it
			// was overwritten: the refund leaves the foreign value alone.
			s2 := newSubject(t, "cellforeignhold")
			r2 := s2.gcra("g", 10, time.Minute, 4)
			req := s2.request(opReserve, 2, r2)
			req.ReservationID, req.ReservationTTL = "h", time.Hour
			if res := take(t, b, req); !res.Allowed {
				t.Fatalf("reserve = %+v, want allowed", res)
			}
			if err := c.Del(ctx, r2.Key+suffixCell).Err(); err != nil {
				t.Fatal(err)
			}
			fs.put(t, c, r2.Key+suffixCell)
			before = dumpKey(t, c, r2.Key+suffixCell)
			if err := b.Cancel(ctx, s2.reservations(), "h"); err != nil {
				t.Errorf("cancel = %v, want nil", err)
			}
			alive("cancel")
			if after := dumpKey(t, c, r2.Key+suffixCell); after != before {
				t.Errorf("the refund changed the foreign key")
			}
		})
	}
	// The module still decides.
	s := newSubject(t, "cellforeignafter")
	res := take(t, b, s.request(opTake, 1, s.gcra("g", 10, time.Minute, 4)))
	checkRule(t, "take on a fresh key after the refusals", res.Rules[0], true, 1, 5)
}

// TestCellRetryAfterHonest: a denied redis-cell rule's RetryAfter is exact
// (from the TAT), not CL.THROTTLE's whole seconds: admitted once it has
// passed, and never before.
func TestCellRetryAfterHonest(t *testing.T) {
	b, c := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_CELL"), modStrategies)
	wantStrategy(t, b, driver.GCRA, capability.CellLua)
	s := newSubject(t, "cellretry")
	r := s.gcra("g", 4, time.Second, 0) // T = 250ms, one at a time
	res := take(t, b, s.request(opTake, 1, r))
	t0 := res.Now
	res = take(t, b, s.request(opTake, 1, r))
	if res.Allowed {
		t.Fatalf("second take at once = allowed, want denied")
	}
	ra := res.Rules[0].RetryAfter
	if want := t0.Add(250 * time.Millisecond).Sub(res.Now); ra < want || ra > want+2*time.Millisecond {
		t.Errorf("RetryAfter = %v, want %v (the TAT minus now), not whole seconds", ra, want)
	}
	at := res.Now.Add(ra)
	eventually(t, 2*time.Second, "the retry instant", func() bool { return !serverNow(t, c).Before(at) })
	if res = take(t, b, s.request(opTake, 1, r)); !res.Allowed {
		t.Errorf("take at Now+RetryAfter = denied (%v), want allowed", res.Rules[0].RetryAfter)
	}
}

// TestCellArgs: which GCRA rules CL.THROTTLE can express exactly.
func TestCellArgs(t *testing.T) {
	for _, tc := range []struct {
		w             time.Duration
		limit, burst  int64
		count, period int64
		ok            bool
	}{
		{time.Minute, 10, 4, 1, 6, true},
		{time.Second, 10, 2, 10, 1, true},
		{1500 * time.Millisecond, 3, 0, 2, 1, true},
		{time.Hour, 20, 19, 1, 180, true},
		{24 * time.Hour, 8, 0, 1, 10800, true},
		{time.Second, 3, 0, 0, 0, false},                  // 333333333.3 ns
		{1000000007 * time.Nanosecond, 1, 0, 0, 0, false}, // period 1000000007 s
		{time.Second, 1, 1 << 40, 0, 0, false},            // tolerance beyond 2^53 ns
		{time.Second, 400000, 0, 0, 0, false},             // 2.5µs: not a whole µs
	} {
		r := driver.Rule{Name: "g", Algorithm: driver.GCRA, Limit: tc.limit, Window: tc.w, Burst: tc.burst}
		count, period, why := cellArgs(&r)
		if (why == "") != tc.ok || count != tc.count || period != tc.period {
			t.Errorf("cellArgs(%v/%d burst %d) = %d, %d, %q; want %d, %d, ok %v", tc.w, tc.limit, tc.burst, count, period, why, tc.count, tc.period, tc.ok)
		}
		if why == "" {
			// redis-cell's interval: period·1e9/count in float64, truncated.
			ns := float64(period) * 1e9 / float64(count)
			if int64(ns) != int64(tc.w)/tc.limit {
				t.Errorf("cellArgs(%v/%d): redis-cell's interval %d ns, Lua's %d", tc.w, tc.limit, int64(ns), int64(tc.w)/tc.limit)
			}
		}
	}
}

// TestGCRAAgreesWithCell: Lua GCRA and CL.THROTTLE give the same
// allow/deny sequence for the same attempts. Both backends decide each
// attempt back to back (same rule: the plain one on its key, the cell one
// on key%x). A decision of cost c ≤ limit flips from denied to allowed at
// flip = TAT + c·T − tol, each backend's from its own TAT; attempts are
// placed at least 5 ms past both flips, or before both by more than 5 ms
// plus the longest delay seen from the test's clock reading to a
// decision, so the time between the two calls cannot matter.
//
// A loaded machine can delay a call past that (the issue saw attempt 24
// of 4 per 1s differ). Each decision's own clock (Result.Now; redis-cell
// reads its clock in the same script, just after) shows where it fell:
// where both fell on the same side of their flips the decisions must
// agree; where they fell on opposite sides each must be the one GCRA
// gives at its own instant, and then both start again from a fresh state.
// 40 attempts are compared for each rule. After each attempt the TATs
// agree to the time between the calls: redis-cell's minus Lua's equals
// max(TAT, now) of the one minus that of the other, to 5 ms.
func TestGCRAAgreesWithCell(t *testing.T) {
	ctx := context.Background()
	addr := moduleAddr(t, "FREQCAP_TEST_CELL")
	cell, c := moduleBackend(t, addr, modStrategies)
	plain, _ := moduleBackend(t, addr, capability.Config{ForcePlainLua: true})
	wantStrategy(t, cell, driver.GCRA, capability.CellLua)
	wantStrategy(t, plain, driver.GCRA, capability.PlainLua)
	const (
		margin  = 5 * time.Millisecond
		compare = 40 // attempts compared per rule
		most    = 80 // attempts made at most per rule
	)
	// tats reads both TATs of r (the zero time where a state is gone):
	// Lua GCRA's from its packed entry (µs), redis-cell's from its key (ns).
	tats := func(r driver.Rule) (lua, cl time.Time) {
		t.Helper()
		if e, ok := entryOf(t, c, r); ok && len(e.Ints) == 1 {
			lua = time.UnixMicro(e.Ints[0])
		}
		v, err := c.Get(ctx, r.Key+suffixCell).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatalf("GET the redis-cell key: %v", err)
		}
		if err == nil {
			ns, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				t.Fatalf("the redis-cell key holds %q, want a TAT in ns", v)
			}
			cl = time.Unix(0, ns)
		}
		return lua, cl
	}
	for _, rc := range []struct {
		limit int64
		per   time.Duration
		burst int64
	}{{10, time.Second, 2}, {4, time.Second, 0}, {20, 2 * time.Second, 5}} {
		t.Run(fmt.Sprintf("%d per %v burst %d", rc.limit, rc.per, rc.burst), func(t *testing.T) {
			s := newSubject(t, "agree")
			r := s.gcra("g", rc.limit, rc.per, rc.burst)
			T := rc.per / time.Duration(rc.limit)
			tol := T * time.Duration(rc.burst+1)
			rng := mrand.New(mrand.NewPCG(uint64(rc.limit), uint64(rc.burst)))
			var (
				seqPlain, seqCell []bool
				lag               time.Duration // longest from a clock reading to the cell decision
				wantOff           time.Duration // redis-cell's TAT minus Lua's, predicted
				predicted         bool          // wantOff holds for the states now
				offChecks         int
			)
			// checkOff compares the TATs read before attempt k with the
			// prediction; a state gone (drained) leaves nothing to compare.
			checkOff := func(k int, tl, tc time.Time) {
				t.Helper()
				if !predicted || tl.IsZero() || tc.IsZero() {
					return
				}
				offChecks++
				if d := tc.Sub(tl) - wantOff; d < -margin || d > margin {
					t.Errorf("before attempt %d: TATs Lua %v, redis-cell %v: %v apart, want %v (the time between the calls) ±%v", k, tl.UnixMicro(), tc.UnixNano(), tc.Sub(tl), wantOff, margin)
				}
			}
			for k := 0; len(seqPlain) < compare; k++ {
				if k == most {
					t.Fatalf("only %d of %d attempts were decided on the same side of both flips; want %d", len(seqPlain), most, compare)
				}
				cost := []int64{1, 1, 1, 1, 2, 3}[rng.IntN(6)]
				if k == 20 {
					cost = rc.burst + 2 // cost too high
				}
				gap := time.Duration(rng.IntN(int(2*T/time.Millisecond))) * time.Millisecond
				tl, tc := tats(r)
				checkOff(k, tl, tc)
				timed := cost <= rc.burst+1 // a cost too high is denied at any time
				fl := tl.Add(time.Duration(cost)*T - tol)
				fc := tc.Add(time.Duration(cost)*T - tol)
				ahead := margin + min(lag, 50*time.Millisecond)
				target := serverNow(t, c).Add(gap)
				var read time.Time
				for {
					now := serverNow(t, c)
					if now.Before(target) {
						time.Sleep(time.Millisecond) // polling the server's clock
						continue
					}
					moved := false
					for _, f := range []time.Time{fl, fc} {
						if d := now.Sub(f); timed && d < margin && d > -ahead {
							target, moved = f.Add(margin+time.Millisecond), true
						}
					}
					if !moved {
						read = now
						break
					}
				}
				rp := take(t, plain, s.request(opTake, cost, r))
				rcl := take(t, cell, s.request(opTake, cost, r))
				lag = max(lag, rcl.Now.Sub(read))
				// Where each decision fell: Lua GCRA's exactly at its Now;
				// redis-cell's at its Now or up to margin later.
				lAfter, cAfter := !rp.Now.Before(fl), !rcl.Now.Before(fc)
				cSure := cAfter || rcl.Now.Before(fc.Add(-margin))
				if timed && (!cSure || lAfter != cAfter) {
					t.Logf("attempt %d (cost %d): Lua GCRA decided %v from its flip, CL.THROTTLE %v from its own (%v after the clock reading): allowed=%v and %v", k, cost, rp.Now.Sub(fl), rcl.Now.Sub(fc), rcl.Now.Sub(read), rp.Allowed, rcl.Allowed)
					if rp.Allowed != lAfter {
						t.Errorf("attempt %d (cost %d): Lua GCRA allowed=%v %v from its flip", k, cost, rp.Allowed, rp.Now.Sub(fl))
					}
					if cSure && rcl.Allowed != cAfter {
						t.Errorf("attempt %d (cost %d): CL.THROTTLE allowed=%v %v from its flip", k, cost, rcl.Allowed, rcl.Now.Sub(fc))
					}
					if rp.Allowed != rcl.Allowed {
						t.Logf("attempt %d: decided on opposite sides of the flips (a delayed call); both start again from a fresh state", k)
						s = newSubject(t, "agree")
						r = s.gcra("g", rc.limit, rc.per, rc.burst)
						predicted = false
						continue
					}
				} else {
					seqPlain, seqCell = append(seqPlain, rp.Allowed), append(seqCell, rcl.Allowed)
					if rp.Allowed != rcl.Allowed {
						t.Errorf("attempt %d (cost %d): Lua GCRA allowed=%v, CL.THROTTLE allowed=%v", k, cost, rp.Allowed, rcl.Allowed)
					}
				}
				if rp.Rules[0].CostTooHigh != rcl.Rules[0].CostTooHigh {
					t.Errorf("attempt %d (cost %d): CostTooHigh %v vs %v", k, cost, rp.Rules[0].CostTooHigh, rcl.Rules[0].CostTooHigh)
				}
				// The TATs: both unchanged by a denial; an admission sets each
				// to max(TAT, now) + cost·T, so their difference becomes
				// that of max(TAT, now).
				switch {
				case rp.Allowed && rcl.Allowed:
					wantOff, predicted = later(tc, rcl.Now).Sub(later(tl, rp.Now)), true
				case !rp.Allowed && !rcl.Allowed:
					wantOff, predicted = tc.Sub(tl), !tl.IsZero() && !tc.IsZero()
				default:
					predicted = false
				}
			}
			tl, tc := tats(r)
			checkOff(-1, tl, tc)
			if offChecks == 0 {
				t.Errorf("the two TATs were never both present to compare")
			}
			t.Logf("allow sequence (Lua GCRA): %v; TATs compared %d times; longest delay from a clock reading to a decision %v", seqPlain, offChecks, lag)
			if fmt.Sprint(seqPlain) != fmt.Sprint(seqCell) {
				t.Errorf("sequences differ:\n Lua  %v\n cell %v", seqPlain, seqCell)
			}
		})
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bareClient returns a client on addr for a fresh ACL user who may run
// everything but scripting (-@scripting: EVAL, EVALSHA, SCRIPT,
// FUNCTION), as on a server or proxy without Lua. The user is deleted
// with the test.
func bareClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	ctx := context.Background()
	admin := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	user, pass := "fc-bare-"+hex.EncodeToString(rb[:]), "pw-"+hex.EncodeToString(rb[:])
	if err := admin.Do(ctx, "acl", "setuser", user, "on", ">"+pass, "~*", "&*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "acl", "deluser", user) })
	o := testserver.Patient(NewClientOptions(addr)).Simple()
	o.Username, o.Password = user, pass
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBareTairHash: with scripting refused, sliding-window rules run as
// bare TairHash commands: NonAtomic decisions that never over-admit a
// rule, compensated when a later rule denies; other algorithms and
// reservations are unsupported; batches fall back to Take.
func TestBareTairHash(t *testing.T) {
	ctx := context.Background()
	addr := moduleAddr(t, "FREQCAP_TEST_TAIRHASH")
	c := bareClient(t, addr)
	b := New(c, nil)
	rep := wantStrategy(t, b, driver.SlidingWindow, capability.TairHashBare)
	if !rep.NonAtomic {
		t.Errorf("report NonAtomic = false, want true:\n%s", rep)
	}
	d, err := b.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Strategies[driver.SlidingWindow]; st.Name != "tairhash-bare" {
		t.Errorf("Describe: sliding window strategy %q, want tairhash-bare", st.Name)
	}
	wantGCRA := capability.Unavailable // redis-cell-bare where redis-cell is loaded too (barecell_test.go)
	if rep.Feature(capability.Cell).Usable {
		wantGCRA = capability.CellBare
	}
	if st := d.Strategies[driver.GCRA]; st.Name != wantGCRA.String() {
		t.Errorf("Describe: GCRA strategy %q, want %v", st.Name, wantGCRA)
	}
	t.Logf("report:\n%s", rep)

	s := newSubject(t, "bare")
	a := s.sliding("a", 5, time.Hour, 10)
	bb := s.sliding("b", 3, time.Hour, 10)
	check := func(what string, res driver.Result, allowed bool, ua, ub int64) {
		t.Helper()
		if res.Allowed != allowed || !res.NonAtomic {
			t.Errorf("%s: Allowed %v NonAtomic %v, want %v, true", what, res.Allowed, res.NonAtomic, allowed)
		}
		if res.Rules[0].Used != ua || res.Rules[1].Used != ub {
			t.Errorf("%s: used %d, %d; want %d, %d", what, res.Rules[0].Used, res.Rules[1].Used, ua, ub)
		}
	}
	check("take 2", take(t, b, s.request(opTake, 2, a, bb)), true, 2, 2)
	denied := s.request(opTake, 2, a, bb)
	denied.TrailValues = "content=x%7Cy" // stored verbatim in the trail entry
	check("take 2 (b denies)", take(t, b, denied), false, 2, 2)
	check("peek 1", take(t, b, s.request(opPeek, 1, a, bb)), true, 2, 2)
	check("take 1", take(t, b, s.request(opTake, 1, a, bb)), true, 3, 3)
	res := take(t, b, s.request(opInspect, 0, a, bb))
	if len(res.Trail) != 1 || res.Trail[0].Rule != "b" || res.Trail[0].Used != 2 || res.Trail[0].Cost != 2 || res.Trail[0].Values != "content=x%7Cy" {
		t.Errorf("Inspect trail = %+v, want one denial by b (used 2, cost 2, the request's values)", res.Trail)
	}

	// The MAX bound on b's key (b holds 3 of 3 in this cell).
	key := bb.Key + suffixTairHash
	i := res.Now.UnixMicro() / (6 * time.Minute).Microseconds()
	err = c.Do(ctx, "exhincrby", key, strconv.FormatInt(i, 10), 1, "max", 3).Err()
	if !isOverflow(err) {
		t.Errorf("EXHINCRBY past MAX = %v, want %q", err, errOverflow)
	}

	// Compensation: a is incremented, then b's bounded increment fails.
	br := bareRule{r: &bb, key: key, sp: bb.Span(time.Microsecond), i: i}
	ar := bareRule{r: &a, key: a.Key + suffixTairHash, sp: a.Span(time.Microsecond), i: i}
	if err := ar.incr(ctx, c, 1, 5); err != nil {
		t.Fatal(err)
	}
	if err := br.incr(ctx, c, 1, 3-0); !isOverflow(err) {
		t.Fatalf("b's bounded increment = %v, want overflow", err)
	}
	if err := ar.incr(ctx, c, -1, 0); err != nil {
		t.Fatalf("compensating decrement: %v", err)
	}
	check("peek after a compensated increment", take(t, b, s.request(opPeek, 1, a, bb)), false, 3, 3)
	if pttl, _ := c.Do(ctx, "exhpttl", ar.key, strconv.FormatInt(i, 10)).Int64(); pttl <= 0 {
		t.Errorf("a's cell TTL after the compensating decrement = %d, want > 0 (EXHPEXPIREAT again)", pttl)
	}

	// The empty-key leak: a denial on a fresh key by MAX, then the sweep.
	fresh := s.sliding("fresh", 1, time.Hour, 10)
	fr := bareRule{r: &fresh, key: fresh.Key + suffixTairHash, sp: fresh.Span(time.Microsecond), i: i, empty: true}
	if err := fr.incr(ctx, c, 2, 1); !isOverflow(err) {
		t.Fatalf("EXHINCRBY 2 MAX 1 on a fresh key = %v, want overflow", err)
	}
	if n, _ := c.Exists(ctx, fr.key).Result(); n != 1 {
		t.Logf("no empty key left: the EXHPEXPIREAT in the same EXEC removed it (as EXHGET does)")
	}
	if err := b.sweep(ctx, &fr); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, fr.key).Result(); n != 0 {
		t.Errorf("EXISTS after the sweep = %d, want 0", n)
	}

	// Unsupported: other algorithms, reservations.
	for _, tc := range []struct {
		name string
		req  request
	}{
		// A GCRA rule CL.THROTTLE cannot express: refused with or
		// without redis-cell.
		{"gcra", s.request(opTake, 1, s.gcra("g", 3, time.Second, 0))},
		{"fixed with sliding", s.request(opTake, 1, a, s.fixed("f", 10, time.Minute))},
		{"reserve", func() request {
			r := s.request(opReserve, 1, a)
			r.ReservationID, r.ReservationTTL = "h", time.Minute
			return r
		}()},
	} {
		if _, err := b.do(ctx, tc.req); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Take(%s) error = %v, want errors.ErrUnsupported", tc.name, err)
		}
	}

	// Idempotency: a retry replays the first decision.
	req := s.request(opTake, 1, a)
	req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:k1", time.Minute
	first := take(t, b, req)
	again := take(t, b, req)
	if !again.Replayed || again.Allowed != first.Allowed || again.Rules[0].Used != first.Rules[0].Used {
		t.Errorf("retry = replayed %v allowed %v used %d; want the first decision (%v, %d) replayed", again.Replayed, again.Allowed, again.Rules[0].Used, first.Allowed, first.Rules[0].Used)
	}

	// Batches fall back to Take.
	s2 := newSubject(t, "barebatch")
	x := s2.sliding("x", 2, time.Hour, 10)
	out := b.batch(ctx, []request{s2.request(opTake, 1, x), s2.request(opTake, 1, x), s2.request(opTake, 1, x)})
	for k, want := range []bool{true, true, false} {
		if out[k].Err != nil || out[k].Result.Allowed != want || !out[k].Result.NonAtomic {
			t.Errorf("TakeBatch[%d] = %+v, %v; want allowed %v, NonAtomic", k, out[k].Result, out[k].Err, want)
		}
	}

	// The limit holds under concurrency: 32 workers, 4 takes each, on two
	// rules; each rule admits exactly its limit.
	s3 := newSubject(t, "barerace")
	p := s3.sliding("p", 20, time.Hour, 10)
	q := s3.sliding("q", 1000, time.Hour, 10)
	done := make(chan int, 32)
	for range 32 {
		go func() {
			n := 0
			for range 4 {
				if res, err := b.do(ctx, s3.request(opTake, 1, q, p)); err == nil && res.Allowed {
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
	res = take(t, b, s3.request(opPeek, 1, q, p))
	if admitted != 20 || res.Rules[1].Used != 20 || res.Rules[0].Used != 20 {
		t.Errorf("race: %d admitted, used q %d p %d; want 20, 20, 20 (compensated)", admitted, res.Rules[0].Used, res.Rules[1].Used)
	}
}

// TestBareStrict: bare mode is strict too, on the server's clock:
// Sliding(r, 1, 1s) with 100ms cells, one unit just after cell j starts,
// another attempted at the start of cell j+N (less than a second later)
// is denied with RetryAfter to (j+N+1)·s exactly, and admitted then.
func TestBareStrict(t *testing.T) {
	addr := moduleAddr(t, "FREQCAP_TEST_TAIRHASH")
	c := bareClient(t, addr)
	b := New(c, nil)
	wantStrategy(t, b, driver.SlidingWindow, capability.TairHashBare)
	const cell = 100 * time.Millisecond
	for attempt := 1; attempt <= 3; attempt++ {
		s := newSubject(t, "barestrict")
		r := s.sliding("r", 1, time.Second, 10)
		j := serverNow(t, c).Truncate(cell).Add(cell) // cell j starts
		eventually(t, time.Second, "cell j", func() bool { return !serverNow(t, c).Before(j.Add(10 * time.Millisecond)) })
		first := take(t, b, s.request(opTake, 1, r))
		eventually(t, 2*time.Second, "cell j+N", func() bool { return !serverNow(t, c).Before(j.Add(time.Second)) })
		res := take(t, b, s.request(opTake, 1, r))
		leave := j.Add(time.Second + cell)
		if !first.Allowed || first.Now.After(j.Add(cell)) || !res.Now.Before(leave) {
			t.Logf("attempt %d: the takes missed their cells (%v, %v); retrying", attempt, first.Now.Sub(j), res.Now.Sub(j))
			continue
		}
		if res.Allowed || res.Rules[0].RetryAfter != leave.Sub(res.Now) {
			t.Fatalf("take %v after the first = %+v, want denied with retry %v (until cell j stops counting)", res.Now.Sub(first.Now), res.Rules[0], leave.Sub(res.Now))
		}
		eventually(t, 2*time.Second, "cell j leaves", func() bool { return !serverNow(t, c).Before(leave) })
		if res = take(t, b, s.request(opTake, 1, r)); !res.Allowed {
			t.Errorf("take once cell j stopped counting = %+v, want allowed", res.Rules[0])
		}
		return
	}
	t.Fatal("the takes missed their cells 3 times")
}
