package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/lua"
	"github.com/freqcap/freqcap/sdk"
)

// benchPolicy is the seed policy (docs/DESIGN.md): the four caps of the
// messaging platform. -policy FILE replaces it.
const benchPolicy = `policies:
  - name: push
    trail: {max: 20, ttl: 24h}
    rules:
      - {name: recv-1m,  algorithm: sliding_window, limit: 15, window: 1m,  by: [user]}
      - {name: recv-24h, algorithm: sliding_window, limit: 50, window: 24h, by: [user]}
      - {name: content-59s, algorithm: sliding_window, limit: 2, window: 59s, by: [user, content]}
      - {name: content-59m, algorithm: sliding_window, limit: 5, window: 59m, by: [user, content]}
`

type benchConfig struct {
	redisAddr, clusterAddrs string
	workers                 int
	duration, warmup        time.Duration
	subjects, values        int
	maxDecisions            int64
	policyFile, policyName  string
	baseline, memory        bool
	prefix                  string
	cpuProfile              string
	rounds                  int
}

// runBench is `freqcap bench`: a closed-loop load test of one policy
// against Redis, optionally compared with a trivial one-script baseline.
func runBench(args []string) error {
	var cfg benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&cfg.redisAddr, "redis", "", "standalone Redis `ADDR` (host:port)")
	fs.StringVar(&cfg.clusterAddrs, "cluster", "", "Redis Cluster seed `ADDRS`, comma-separated")
	fs.IntVar(&cfg.workers, "workers", 64, "concurrent workers (each one decision at a time)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured run length (per run)")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	fs.IntVar(&cfg.subjects, "subjects", 100000, "distinct subjects (values of the policy's shard dimensions)")
	fs.IntVar(&cfg.values, "values", 4, "distinct values of each other dimension (e.g. content) per run")
	fs.Int64Var(&cfg.maxDecisions, "max", 50_000_000, "stop a run after this many decisions")
	fs.StringVar(&cfg.policyFile, "policy", "", "policy `FILE` (YAML); default: the built-in seed policy \"push\"")
	fs.StringVar(&cfg.policyName, "name", "", "policy to run from the file (default: the first)")
	fs.BoolVar(&cfg.baseline, "baseline", false, "also run one trivial INCRBY+PEXPIRE EVALSHA per decision and report the ratio")
	fs.BoolVar(&cfg.memory, "memory", false, "measure bytes per subject: FLUSHALL, one decision per subject, INFO memory delta (DESTROYS ALL DATA on the target)")
	fs.StringVar(&cfg.prefix, "prefix", "bench", "key prefix")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the client to `FILE`")
	fs.IntVar(&cfg.rounds, "rounds", 1, "with -baseline: alternate policy and baseline runs this many times (reduces noise on a shared machine); the ratio reported is the median")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (cfg.redisAddr == "") == (cfg.clusterAddrs == "") {
		return errors.New("bench: give exactly one of -redis or -cluster")
	}
	if cfg.workers < 1 || cfg.subjects < 1 || cfg.values < 1 || cfg.duration <= 0 || cfg.maxDecisions < 1 {
		return errors.New("bench: -workers, -subjects, -values, -duration and -max must be positive")
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	policy, err := benchLoadPolicy(cfg.policyFile, cfg.policyName)
	if err != nil {
		return err
	}

	var addrs []string
	if cfg.redisAddr != "" {
		addrs = []string{cfg.redisAddr}
	} else {
		addrs = strings.Split(cfg.clusterAddrs, ",")
	}
	o := redis.NewClientOptions(addrs...)
	o.IsClusterMode = cfg.clusterAddrs != ""
	o.PoolSize = cfg.workers
	o.MinIdleConns = cfg.workers
	o.ReadTimeout, o.WriteTimeout = 2*time.Second, 2*time.Second
	client := goredis.NewUniversalClient(o)
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: ping: %w", err)
	}

	lim := sdk.New(redis.New(client, nil), sdk.WithPrefix(cfg.prefix))
	gen := newSubjects(policy, cfg.subjects, cfg.values)
	w := os.Stdout
	target := cfg.redisAddr
	if target == "" {
		target = "cluster " + cfg.clusterAddrs
	}
	fmt.Fprintf(w, "freqcap bench: %s, policy %q (%d rules), %d workers, %v per run, %d subjects, %d values per other dimension\n",
		target, policy.Name(), len(policy.Rules()), cfg.workers, cfg.duration, cfg.subjects, cfg.values)

	decide := func(ctx context.Context, rng *rand.Rand) (bool, error) {
		d, err := lim.Allow(ctx, policy, gen.pick(rng))
		return d.Allowed, err
	}
	var base func(context.Context, *rand.Rand) (bool, error)
	if cfg.baseline {
		keys := make([]string, cfg.subjects)
		for i := range keys {
			keys[i] = cfg.prefix + ":{" + strconv.Itoa(i) + "}:baseline"
		}
		script := goredis.NewScript(lua.Baseline)
		base = func(ctx context.Context, rng *rand.Rand) (bool, error) {
			k := keys[rng.IntN(len(keys))]
			err := script.Run(ctx, client, []string{k}, 60000).Err()
			return err == nil, err
		}
	}
	rounds := max(1, cfg.rounds)
	if !cfg.baseline {
		rounds = 1
	}
	var ratios []float64
	for i := range rounds {
		if rounds > 1 {
			fmt.Fprintf(w, "round %d/%d\n", i+1, rounds)
		}
		p, err := benchRun(ctx, client, cfg, "policy "+policy.Name(), decide)
		if err != nil {
			return err
		}
		p.print(w)
		if base == nil {
			break
		}
		b, err := benchRun(ctx, client, cfg, "baseline INCRBY+PEXPIRE EVALSHA", base)
		if err != nil {
			return err
		}
		b.print(w)
		ratios = append(ratios, p.rate()/b.rate())
		fmt.Fprintf(w, "ratio policy/baseline: %.2f (decisions/s)\n", ratios[len(ratios)-1])
	}
	if len(ratios) > 1 {
		slices.Sort(ratios)
		fmt.Fprintf(w, "median ratio policy/baseline over %d rounds: %.2f (min %.2f, max %.2f)\n", len(ratios), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	}

	if cfg.memory {
		per, err := benchMemory(ctx, client, cfg, lim, policy, gen)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "memory: %.0f bytes per subject (one decision each for %d subjects, INFO used_memory delta after FLUSHALL)\n", per, cfg.subjects)
	}
	return nil
}

func benchLoadPolicy(file, name string) (*sdk.Policy, error) {
	var (
		ps  []*sdk.Policy
		err error
	)
	if file == "" {
		ps, err = sdk.LoadPolicies(strings.NewReader(benchPolicy))
	} else {
		ps, err = sdk.LoadPolicyFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, p := range ps {
		if name == "" || p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("bench: no policy named %q", name)
}

// subjects picks random subjects: shard dimensions from n values, every
// other dimension from m values.
type subjects struct {
	shard, other []string // dimension names
	shardVals    [][]string
	otherVals    []string
}

func newSubjects(p *sdk.Policy, n, m int) *subjects {
	s := &subjects{shard: p.ShardBy()}
	isShard := map[string]bool{}
	for _, d := range s.shard {
		isShard[d] = true
	}
	for _, d := range p.Dimensions() {
		if !isShard[d] {
			s.other = append(s.other, d)
		}
	}
	s.shardVals = make([][]string, len(s.shard))
	for i, d := range s.shard {
		s.shardVals[i] = make([]string, n)
		for j := range n {
			s.shardVals[i][j] = d + strconv.Itoa(j)
		}
	}
	for j := range m {
		s.otherVals = append(s.otherVals, sdk.Fingerprint("content "+strconv.Itoa(j)))
	}
	return s
}

func (s *subjects) pick(rng *rand.Rand) sdk.Subject {
	sub := make(sdk.Subject, len(s.shard)+len(s.other))
	j := rng.IntN(len(s.shardVals[0]))
	for i, d := range s.shard {
		sub[d] = s.shardVals[i][j]
	}
	for _, d := range s.other {
		sub[d] = s.otherVals[rng.IntN(len(s.otherVals))]
	}
	return sub
}

// subject returns the j-th subject with the first value of each other
// dimension (the memory run: one decision per subject).
func (s *subjects) subject(j int) sdk.Subject {
	sub := make(sdk.Subject, len(s.shard)+len(s.other))
	for i, d := range s.shard {
		sub[d] = s.shardVals[i][j]
	}
	for _, d := range s.other {
		sub[d] = s.otherVals[0]
	}
	return sub
}

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
	name                       string
	decisions, allowed, errors int64
	elapsed                    time.Duration
	lat                        hist
	roundTrips, innerCalls     float64 // per decision, from INFO commandstats
	serverMicros               float64 // server time per round trip (µs), from INFO commandstats
	firstErr                   error
}

func (r *benchResult) rate() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

func (r *benchResult) print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d decisions in %v = %.0f decisions/s; p50 %v, p99 %v; allowed %d, denied %d, errors %d; Redis calls per decision: %.2f round trips (EVALSHA/EVAL), %.2f commands inside scripts; server time %.1f µs per script call\n",
		r.name, r.decisions, r.elapsed.Round(time.Millisecond), r.rate(), r.lat.quantile(0.50), r.lat.quantile(0.99),
		r.allowed, r.decisions-r.allowed-r.errors, r.errors, r.roundTrips, r.innerCalls, r.serverMicros)
	if r.firstErr != nil {
		fmt.Fprintf(w, "  first error: %v\n", r.firstErr)
	}
}

// benchRun runs decide from cfg.workers goroutines: a warm-up, then a
// measured run bounded by cfg.duration and cfg.maxDecisions.
func benchRun(ctx context.Context, c goredis.UniversalClient, cfg benchConfig, name string, decide func(context.Context, *rand.Rand) (bool, error)) (*benchResult, error) {
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
		for i := range cfg.workers {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, seed*7919+1))
				var (
					h                 hist
					n, allowed, nerrs int64
					first             error
				)
				for !stop.Load() && started.Add(1) <= limit {
					t0 := time.Now()
					ok, err := decide(ctx, rng)
					h.add(time.Since(t0))
					n++
					if err != nil {
						nerrs++
						if first == nil {
							first = err
						}
					} else if ok {
						allowed++
					}
				}
				mu.Lock()
				res.decisions += n
				res.allowed += allowed
				res.errors += nerrs
				if res.firstErr == nil {
					res.firstErr = first
				}
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
	if cfg.warmup > 0 {
		loop(cfg.warmup, cfg.maxDecisions)
	}
	before, err := commandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	res := loop(cfg.duration, cfg.maxDecisions)
	after, err := commandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	var rt, inner, usec int64
	for cmd, n := range after {
		d := n.calls - before[cmd].calls
		switch cmd {
		case "evalsha", "eval":
			rt += d
			usec += n.usec - before[cmd].usec
		case "info", "ping", "cluster|slots", "cluster|shards", "cluster|nodes", "client|setinfo", "hello", "command", "command|docs", "command|info":
		default:
			inner += d
		}
	}
	if res.decisions > 0 {
		res.roundTrips = float64(rt) / float64(res.decisions)
		res.innerCalls = float64(inner) / float64(res.decisions)
	}
	if rt > 0 {
		res.serverMicros = float64(usec) / float64(rt)
	}
	return res, nil
}

// commandStats sums the calls of each command over every master (INFO
// commandstats). Commands called by scripts are counted too.
type cmdStat struct{ calls, usec int64 }

func commandStats(ctx context.Context, c goredis.UniversalClient) (map[string]cmdStat, error) {
	out := map[string]cmdStat{}
	var mu sync.Mutex
	collect := func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range strings.Split(s, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_")
			if !ok {
				continue
			}
			name, fields, ok := strings.Cut(rest, ":")
			if !ok {
				continue
			}
			st := out[name]
			for _, f := range strings.Split(fields, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.calls += n
				case "usec":
					st.usec += n
				}
			}
			out[name] = st
		}
		return nil
	}
	if err := forEachMaster(ctx, c, collect); err != nil {
		return nil, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	return out, nil
}

func forEachMaster(ctx context.Context, c goredis.UniversalClient, f func(context.Context, *goredis.Client) error) error {
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		return cc.ForEachMaster(ctx, f)
	case *goredis.Client:
		return f(ctx, cc)
	}
	return fmt.Errorf("unsupported client %T", c)
}

func usedMemory(ctx context.Context, c goredis.UniversalClient) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
				m, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return err
				}
				total.Add(m)
			}
		}
		return nil
	})
	return total.Load(), err
}

// benchMemory flushes the target, takes one decision for each of
// cfg.subjects subjects and returns the used_memory growth per subject.
func benchMemory(ctx context.Context, c goredis.UniversalClient, cfg benchConfig, lim *sdk.Limiter, p *sdk.Policy, gen *subjects) (float64, error) {
	if err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		return n.FlushAll(ctx).Err()
	}); err != nil {
		return 0, fmt.Errorf("bench: FLUSHALL: %w", err)
	}
	before, err := usedMemory(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("bench: INFO memory: %w", err)
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	deadline := time.Now().Add(10 * time.Minute)
	for range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := next.Add(1) - 1
				if j >= int64(cfg.subjects) || time.Now().After(deadline) {
					return
				}
				if _, err := lim.Allow(ctx, p, gen.subject(int(j))); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("bench: memory run: %w", firstErr)
	}
	after, err := usedMemory(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("bench: INFO memory: %w", err)
	}
	return float64(after-before) / float64(cfg.subjects), nil
}
