package bench

import (
	goredis "github.com/redis/go-redis/v9"

	"context"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// hist is a log-linear latency histogram in µs: 16 buckets per power of
// two (about 6% resolution), no allocation per sample.
type hist [64 * 16]uint64

func (h *hist) add(d time.Duration) {
	us := uint64(d / time.Microsecond)
	if us < 16 {
		h[us]++
		return
	}
	e := bits.Len64(us) - 5 // us >> e is in [16, 32)
	h[(e+1)*16+int(us>>e)-16]++
}

// quantile returns the upper bound (µs) of the bucket holding quantile q.
func (h *hist) quantile(q float64) time.Duration {
	var total uint64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var acc uint64
	for i, c := range h {
		acc += c
		if acc > want {
			if i < 16 {
				return time.Duration(i+1) * time.Microsecond
			}
			e := i/16 - 1
			m := uint64(i%16 + 16)
			return time.Duration((m+1)<<e) * time.Microsecond
		}
	}
	return 0
}

type benchResult struct {
	name                    string
	outcome                 // decisions (n), allowed, cached, errors, the first error
	calls                   int64
	elapsed                 time.Duration
	lat                     hist
	roundTrips              float64 // per decision, counted by the client (commands and pipelines sent to servers)
	scriptCalls, innerCalls float64 // per decision, from INFO commandstats
	serverMicros            float64 // server time per script call (µs), from INFO commandstats
	serverCPU               float64 // server process CPU per decision (µs), from INFO cpu
	serverSys               float64 // the kernel's part of serverCPU (used_cpu_sys)
	clientCPU               float64 // this process's CPU per decision (µs), from getrusage; -1 where unknown
}

func (r *benchResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// clientText is the client's CPU per decision and the two processes'
// cores in use (client + server CPU per decision × decisions/s): on a
// machine whose cores are all busy, that sum is the bound, not Redis alone.
func (r *benchResult) clientText() string {
	if r.clientCPU < 0 {
		return ""
	}
	return fmt.Sprintf("; client CPU %.1f µs per decision; cores busy (client + server) %.2f",
		r.clientCPU, (r.clientCPU+r.serverCPU)*r.rate()/1e6)
}

func (r *benchResult) print(w io.Writer) {
	per := ""
	if r.calls != r.n {
		per = fmt.Sprintf(" (%d calls of %d)", r.calls, r.n/max(1, r.calls))
	}
	fmt.Fprintf(w, "%s: %d decisions%s in %v = %.0f decisions/s; per call p50 %v, p99 %v; allowed %d, denied %d (cached %d), errors %d; Redis calls per decision: %.4f round trips, %.2f scripts (EVALSHA/EVAL), %.2f commands inside scripts; server time %.1f µs per script call; server CPU %.1f µs per decision (kernel %.1f)%s\n",
		r.name, r.n, per, r.elapsed.Round(time.Millisecond), r.rate(), r.lat.quantile(0.50), r.lat.quantile(0.99),
		r.allowed, r.n-r.allowed-r.errs, r.cached, r.errs, r.roundTrips, r.scriptCalls, r.innerCalls, r.serverMicros, r.serverCPU, r.serverSys, r.clientText())
	if r.err != nil {
		fmt.Fprintf(w, "  first error: %v\n", r.err)
	}
}

// benchRun runs decide from cfg.Workers goroutines: a warm-up, then a
// measured run bounded by cfg.Duration and cfg.MaxDecisions.
func benchRun(ctx context.Context, c goredis.UniversalClient, rt *roundTrips, cfg Config, name string, per int, decide decideFunc) (*benchResult, error) {
	loop := func(d time.Duration, limit int64) *benchResult {
		res := &benchResult{name: name}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			started atomic.Int64
			stop    atomic.Bool
		)
		start := time.Now()
		timer := time.AfterFunc(d, func() { stop.Store(true) })
		defer timer.Stop()
		for i := range cfg.Workers {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, seed*7919+1))
				var (
					h   hist
					sum outcome
					n   int64
				)
				for !stop.Load() && started.Add(int64(per)) <= limit {
					t0 := time.Now()
					o := decide(ctx, rng)
					h.add(time.Since(t0))
					n++
					sum.merge(o)
				}
				mu.Lock()
				res.calls += n
				res.merge(sum)
				for i, v := range h {
					res.lat[i] += v
				}
				mu.Unlock()
			}(uint64(i + 1))
		}
		wg.Wait()
		res.elapsed = time.Since(start)
		return res
	}
	if cfg.Warmup > 0 {
		loop(cfg.Warmup, cfg.MaxDecisions)
	} else {
		// One unmeasured call all the same: the first decision of a
		// script loads it (NOSCRIPT, then EVAL), which is not what the
		// run measures.
		decide(ctx, rand.New(rand.NewPCG(0, 1)))
	}
	before, err := commandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	cpu0, sys0, err := serverCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	rt0, own0 := rt.n.Load(), clientCPU()
	res := loop(cfg.Duration, cfg.MaxDecisions)
	rt1, own1 := rt.n.Load(), clientCPU()
	cpu1, sys1, err := serverCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	after, err := commandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	var scripts, inner, usec int64
	for cmd, n := range after {
		d := n.calls - before[cmd].calls
		switch cmd {
		case "evalsha", "eval":
			scripts += d
			usec += n.usec - before[cmd].usec
		case "info", "ping", "cluster|slots", "cluster|shards", "cluster|nodes", "client|setinfo", "hello", "command", "command|docs", "command|info", "script|load":
		default:
			inner += d
		}
	}
	if res.n > 0 {
		res.roundTrips = float64(rt1-rt0) / float64(res.n)
		res.scriptCalls = float64(scripts) / float64(res.n)
		res.innerCalls = float64(inner) / float64(res.n)
		res.serverCPU = (cpu1 - cpu0) * 1e6 / float64(res.n)
		res.serverSys = (sys1 - sys0) * 1e6 / float64(res.n)
		res.clientCPU = -1
		if own0 >= 0 && own1 >= 0 {
			res.clientCPU = (own1 - own0) * 1e6 / float64(res.n)
		}
	}
	if scripts > 0 {
		res.serverMicros = float64(usec) / float64(scripts)
	}
	return res, nil
}
