package redis

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// scriptLog is a go-redis hook recording, for every EVALSHA and EVAL a
// client sends (alone or in a pipeline), the SHA1 of the script and
// whether its ARGV took the fast scripts' short form (ARGV[1] an
// attempt's head, its op code first, not a count of attempts).
type scriptLog struct {
	mu    sync.Mutex
	calls []scriptCall
}

type scriptCall struct {
	sha   string
	short bool
}

func (l *scriptLog) record(cmd goredis.Cmder) {
	args := cmd.Args()
	name := cmd.Name()
	if (name != "evalsha" && name != "eval") || len(args) < 3 {
		return
	}
	src, _ := args[1].(string)
	sha := src
	if name == "eval" {
		sum := sha1.Sum([]byte(src))
		sha = hex.EncodeToString(sum[:])
	}
	var nk int
	switch n := args[2].(type) {
	case int:
		nk = n
	case string:
		nk, _ = strconv.Atoi(n)
	}
	short := false
	if len(args) > 3+nk {
		if h, ok := args[3+nk].(string); ok && len(h) > 0 { // a fast head (fastAttempt.args)
			short = h[:1] == opCodeTake || h[:1] == opCodePeek
		}
	}
	l.mu.Lock()
	l.calls = append(l.calls, scriptCall{sha: sha, short: short})
	l.mu.Unlock()
}

func (l *scriptLog) take() []scriptCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

func (l *scriptLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (l *scriptLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		l.record(cmd)
		return next(ctx, cmd)
	}
}
func (l *scriptLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			l.record(c)
		}
		return next(ctx, cmds)
	}
}

// boundsPath is one way a decision reaches a script.
type boundsPath struct {
	name     string
	noFast   bool // take.lua decides everything
	coalesce int
	// fast is whether a fast script decides (where the rule's strategy
	// allows one), and short whether in its short form.
	fast, short bool
	// decide makes the path's decision of cost for s. n counts the
	// decisions made on this path so far in the case (0 for the first).
	decide func(ctx context.Context, t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, cost int64, n int) sdk.Decision
}

func takeOne(ctx context.Context, t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, cost int64, _ int) sdk.Decision {
	t.Helper()
	d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Cost: cost})
	if err != nil {
		t.Fatalf("Take(cost %d) error: %v", cost, err)
	}
	return d
}

func takeInBatch(ctx context.Context, t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, cost int64, _ int) sdk.Decision {
	t.Helper()
	out := lim.TakeBatch(ctx, p, []sdk.Attempt{{Subject: s, Cost: cost}})
	if len(out) != 1 || out[0].Err != nil {
		t.Fatalf("TakeBatch(cost %d) = %+v, want one decision", cost, out)
	}
	return out[0].Decision
}

// TestBoundsExact: every number a script writes is exact at the bounds
// (MaxLimit, the largest cost, MaxWindow, the largest GCRA burst),
// whichever script path decides — take.lua, a fast script in its short
// form (a lone take) or its full form (batches, coalesced calls),
// reservations, idempotent takes and their replays — for every algorithm:
// a take at the bound is allowed, the next is denied, and the denial's
// trail entry (read by Inspect) and every later reply give the exact
// numbers. The module strategies run where FREQCAP_TEST_TAIRHASH,
// FREQCAP_TEST_CELL and FREQCAP_TEST_HFE name servers.
func TestBoundsExact(t *testing.T) {
	const burst = int64(driver.MaxTolerance/driver.MinInterval) - 1 // the largest GCRA burst
	algos := []struct {
		name  string
		algo  driver.Algorithm
		rule  sdk.Rule
		first int64 // the allowed cost (the count after it)
		again int64 // the denied cost
		limit int64 // as reported
		// drifts: the count goes down as time passes (GCRA, one unit
		// per µs here), so later reads see at most first.
		drifts bool
	}{
		// The limit, 10^14, which Lua's tostring writes as 1e+14
		// (its window an hour there; here one no test run sees end).
		{"fixed 1e14", driver.FixedWindow, sdk.FixedWindow("r", 100_000_000_000_000, driver.MaxWindow).By("user"), 100_000_000_000_000, 1, 100_000_000_000_000, false},
		{"fixed", driver.FixedWindow, sdk.FixedWindow("f", driver.MaxLimit, driver.MaxWindow).By("user"), driver.MaxLimit, driver.MaxLimit, driver.MaxLimit, false},
		{"sliding", driver.SlidingWindow, sdk.SlidingWindow("s", driver.MaxLimit, driver.MaxWindow).By("user"), driver.MaxLimit, driver.MaxLimit, driver.MaxLimit, false},
		// One member per unit: the count stays small, the limit, the
		// denied cost and the window are at their bounds.
		{"sliding log", driver.SlidingLog, sdk.SlidingLog("l", driver.MaxLimit, driver.MaxWindow).By("user"), 1, driver.MaxLimit, driver.MaxLimit, false},
		// An emission interval of 1µs and the largest tolerance.
		{"gcra", driver.GCRA, sdk.GCRA("g", driver.MaxLimit, time.Duration(driver.MaxLimit)*time.Microsecond, burst).By("user"), burst + 1, burst + 1, burst + 1, true},
	}
	reserve := func(ctx context.Context, t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, cost int64, n int) sdk.Decision {
		t.Helper()
		d, r, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: cost}, time.Hour)
		if err != nil {
			t.Fatalf("Reserve(cost %d) error: %v", cost, err)
		}
		if d.Allowed {
			// Cancelled at once, and taken again: allowed with the same
			// count only if the refund gave back exactly what was taken.
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("Cancel() error: %v", err)
			}
			again, _, err := lim.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: cost}, time.Hour)
			if err != nil || !again.Allowed || again.Rules[0].Used != d.Rules[0].Used {
				t.Fatalf("Reserve(cost %d) after Cancel = %+v, %v, want %+v", cost, again, err, d)
			}
			d = again
		}
		return d
	}
	idem := func(ctx context.Context, t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, cost int64, n int) sdk.Decision {
		t.Helper()
		a := sdk.Attempt{Subject: s, Cost: cost, IdempotencyKey: "k" + strconv.Itoa(n)}
		d, err := lim.Take(ctx, p, a)
		if err != nil {
			t.Fatalf("Take(cost %d, key) error: %v", cost, err)
		}
		// The replay returns the stored decision, numbers and all.
		r, err := lim.Take(ctx, p, a)
		if err != nil || !r.Replayed || r.Allowed != d.Allowed || r.Rules[0].Used != d.Rules[0].Used ||
			r.Rules[0].RetryAfter != d.Rules[0].RetryAfter || r.Rules[0].ResetAfter != d.Rules[0].ResetAfter {
			t.Fatalf("replay = %+v, %v, want the first decision %+v", r, err, d)
		}
		return d
	}
	paths := []boundsPath{
		{name: "take.lua", noFast: true, decide: takeOne},
		{name: "fast short", fast: true, short: true, decide: takeOne},
		// Uncoalesced: under coalescing a batch of one goes as a single
		// decision (the short form, "coalesced fast batch").
		{name: "take.lua batch", noFast: true, coalesce: -1, decide: takeInBatch},
		{name: "fast batch", fast: true, coalesce: -1, decide: takeInBatch},
		{name: "coalesced fast batch", coalesce: 2, fast: true, short: true, decide: takeInBatch},
		{name: "coalesced take.lua", noFast: true, coalesce: 2, decide: takeOne},
		// A lone coalesced call goes out alone, in the short form.
		{name: "coalesced fast", coalesce: 2, fast: true, short: true, decide: takeOne},
		{name: "reservation", decide: reserve},
		{name: "idempotent", decide: idem},
	}
	for _, srv := range []struct {
		name, env string
		algo      driver.Algorithm    // the algorithm the server's module runs (0: none)
		want      capability.Strategy // its strategy there
	}{
		{"redis", "", 0, 0},
		{"tairhash", "FREQCAP_TEST_TAIRHASH", driver.SlidingWindow, capability.TairHashLua},
		{"cell", "FREQCAP_TEST_CELL", driver.GCRA, capability.CellLua},
		{"hfe", "FREQCAP_TEST_HFE", driver.SlidingWindow, capability.HFELua},
	} {
		t.Run(srv.name, func(t *testing.T) {
			addr := redistest.Standalone(t)
			if srv.env != "" {
				addr = moduleAddr(t, srv.env)
			}
			for _, pa := range paths {
				t.Run(pa.name, func(t *testing.T) {
					var log scriptLog
					c := goredis.NewClient(testserver.Patient(NewClientOptions(addr)).Simple())
					c.AddHook(&log)
					t.Cleanup(func() { c.Close() })
					b := New(c, &Options{Coalesce: pa.coalesce, Detect: capability.Config{ModuleStrategies: srv.algo != 0}})
					b.noFast = pa.noFast
					ctx := context.Background()
					rep, err := b.Capabilities(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if srv.algo != 0 && rep.Choice(srv.algo).Strategy != srv.want {
						t.Fatalf("Choice(%v) = %v, want %v:\n%s", srv.algo, rep.Choice(srv.algo).Strategy, srv.want, rep)
					}
					var r [4]byte
					_, _ = rand.Read(r[:])
					prefix := "fcbounds-" + hex.EncodeToString(r[:])
					lim := sdk.New(b, sdk.WithPrefix(prefix))
					// The keys live for MaxWindow: gone with the test, from
					// module servers too.
					t.Cleanup(func() {
						ctx := context.Background()
						var keys []string
						it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
						for it.Next(ctx) {
							keys = append(keys, it.Val())
						}
						err := it.Err()
						if err == nil && len(keys) > 0 {
							err = c.Del(ctx, keys...).Err()
						}
						if err != nil {
							t.Errorf("deleting the test's keys: %v", err)
						}
					})
					for _, al := range algos {
						t.Run(al.name, func(t *testing.T) {
							p, err := sdk.NewPolicy("bounds", []sdk.Rule{al.rule}, sdk.WithTrail(5, time.Hour))
							if err != nil {
								t.Fatal(err)
							}
							s := sdk.Subject{"user": al.name} // its own trail and idempotency keys
							// count reports whether a later read of the count is
							// right: first, or at most first where it drifts.
							count := func(used int64) bool {
								return used == al.first || al.drifts && used <= al.first && used > 0
							}
							log.take()
							d := pa.decide(ctx, t, lim, p, s, al.first, 0)
							if rd := d.Rules[0]; !d.Allowed || rd.Used != al.first || rd.Limit != al.limit {
								t.Fatalf("take of %d = allowed %v used %d limit %d, want allowed, used %d, limit %d", al.first, d.Allowed, rd.Used, rd.Limit, al.first, al.limit)
							}
							if got, want := d.Rules[0].Strategy, rep.Choice(al.algo).Strategy; got != want.String() {
								t.Fatalf("take ran strategy %q, want %q", got, want)
							}
							d = pa.decide(ctx, t, lim, p, s, al.again, 1)
							den := d.Rules[0]
							if d.Allowed || !count(den.Used) || den.Limit != al.limit || den.RetryAfter <= 0 || den.CostTooHigh {
								t.Fatalf("take of %d = %+v, want denied with used %d, limit %d and a retry", al.again, d, al.first, al.limit)
							}
							// The script that decided: a fast script where the
							// path and the rule's strategy allow one.
							// (a sliding log above driver.LogLine is a sorted
							// set: take.lua's alone)
							fast := pa.fast && rep.Choice(al.algo).Strategy == capability.PlainLua &&
								(al.algo != driver.SlidingLog || al.rule.Limit <= driver.LogLine)
							for _, call := range log.take() {
								if call.sha == settleScript.Hash() {
									continue // Cancel (reservation)
								}
								if (call.sha != takeScript.Hash()) != fast || (fast && call.short != pa.short) {
									t.Fatalf("a script call %+v, want fast %v (short form %v)", call, fast, pa.short)
								}
							}

							ins, err := lim.Admin().Inspect(ctx, p, s)
							if err != nil {
								t.Fatalf("Inspect() error: %v", err)
							}
							if len(ins.Denials) != 1 {
								t.Fatalf("Inspect().Denials = %+v, want one", ins.Denials)
							}
							got := ins.Denials[0]
							if got.Rule != al.rule.Name || got.Used != den.Used || got.Limit != al.limit || got.Cost != al.again ||
								got.RetryAfter != den.RetryAfter || got.CostTooHigh {
								t.Errorf("trail entry = {rule %s used %d limit %d cost %d retry %v}, want {%s %d %d %d %v}",
									got.Rule, got.Used, got.Limit, got.Cost, got.RetryAfter, al.rule.Name, den.Used, al.limit, al.again, den.RetryAfter)
							}
							if ir := ins.Rules[0]; !count(ir.Used) || ir.Limit != al.limit {
								t.Errorf("Inspect().Rules[0] = used %d limit %d, want %d %d", ir.Used, ir.Limit, al.first, al.limit)
							}
							pb := lim.PeekBatch(ctx, p, []sdk.Attempt{{Subject: s, Cost: al.again}})
							if pb[0].Err != nil || pb[0].Decision.Allowed || !count(pb[0].Decision.Rules[0].Used) ||
								pb[0].Decision.Rules[0].RetryAfter > den.RetryAfter {
								t.Errorf("PeekBatch(cost %d) = %+v, want denied with used %d", al.again, pb[0], al.first)
							}
						})
					}
				})
			}
		})
	}
}
