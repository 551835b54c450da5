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

	"github.com/freqcap/freqcap/backends/capability"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/lua"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
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
	server                  serverFlags
	workers                 int
	duration, warmup        time.Duration
	subjects, values        int
	maxDecisions            int64
	policyFile, policyName  string
	baseline, floor, memory bool
	prefix                  string
	cpuProfile              string
	rounds                  int
	memoryTakes             int
	plainLua                bool
	batch                   int
	hot                     bool
	hotSubjects, hotCache   int
	timeout                 time.Duration
}

// runBench is `freqcap bench`: a closed-loop load test of one policy
// against Redis, optionally compared with a trivial one-script baseline.
func runBench(args []string) error {
	var cfg benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg.server.register(fs)
	fs.IntVar(&cfg.workers, "workers", 64, "concurrent workers (each one call at a time: one decision, or one AllowBatch with -batch)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured run length (per run)")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	fs.IntVar(&cfg.subjects, "subjects", 100000, "distinct subjects (values of the policy's shard dimensions)")
	fs.IntVar(&cfg.values, "values", 4, "distinct values of each other dimension (e.g. content) per run")
	fs.Int64Var(&cfg.maxDecisions, "max", 50_000_000, "stop a run after this many decisions")
	fs.StringVar(&cfg.policyFile, "policy", "", "policy `FILE` (YAML); default: the built-in seed policy \"push\"")
	fs.StringVar(&cfg.policyName, "name", "", "policy to run from the file (default: the first)")
	fs.BoolVar(&cfg.baseline, "baseline", false, "also run one trivial INCRBY+PEXPIRE EVALSHA per decision and report the ratio (with -batch N, also that script in pipelines of N)")
	fs.BoolVar(&cfg.floor, "floor", false, "also run lua/floor.lua, the cheapest conceivable 4-rule step (TIME, then HMGET, HSET and PEXPIRE of each state key; no arithmetic, decides nothing), on 1, 2 and 4 keys per subject, and report their ratios to the baseline (with -batch N, also the 4-key step in pipelines of N); implies -baseline")
	fs.BoolVar(&cfg.memory, "memory", false, "measure bytes per subject: FLUSHALL, one decision per subject, INFO memory delta (DESTROYS ALL DATA on the target)")
	fs.IntVar(&cfg.memoryTakes, "memory-takes", 1, "with -memory: decisions per subject, one after the other, the k-th with the k-th value (mod -values) of each other dimension")
	fs.BoolVar(&cfg.plainLua, "plain-lua", false, "use the plain Lua strategies even where the server has modules (TairHash, native hash-field expiry, redis-cell)")
	fs.StringVar(&cfg.prefix, "prefix", "bench", "key prefix")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the client to `FILE`")
	fs.IntVar(&cfg.rounds, "rounds", 1, "with -baseline, -batch or -hot: alternate the compared runs this many times (reduces noise on a shared machine); the ratios reported are medians")
	fs.IntVar(&cfg.batch, "batch", 0, "also run AllowBatch of `N` attempts per call (same workers) and report its ratio to one-by-one Allow")
	fs.BoolVar(&cfg.hot, "hot", false, "hot-subject workload: all workers hammer -hot-subjects subjects, without and with a hot-deny cache (sdk.HotDenyCache); reports Redis round trips per decision for each")
	fs.IntVar(&cfg.hotSubjects, "hot-subjects", 10, "with -hot: the number of hot subjects")
	fs.IntVar(&cfg.hotCache, "hot-cache", 10000, "with -hot: the hot-deny cache size")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "client read/write timeout (default 2s; with -batch, 2s + 100µs per attempt in flight)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q (flags after it would be ignored)", fs.Arg(0))
	}
	if err := cfg.server.check(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !cfg.server.given() {
		return errors.New("bench: give one of -redis, -cluster and -sentinel")
	}
	if cfg.workers < 1 || cfg.subjects < 1 || cfg.values < 1 || cfg.duration <= 0 || cfg.maxDecisions < 1 {
		return errors.New("bench: -workers, -subjects, -values, -duration and -max must be positive")
	}
	if cfg.batch < 0 || cfg.memoryTakes < 1 || cfg.hotSubjects < 1 || cfg.hotCache < 1 || cfg.timeout < 0 {
		return errors.New("bench: -batch must be >= 0, -memory-takes, -hot-subjects and -hot-cache > 0, -timeout >= 0")
	}
	cfg.baseline = cfg.baseline || cfg.floor
	if cfg.timeout == 0 {
		cfg.timeout = 2*time.Second + time.Duration(cfg.workers*max(1, cfg.batch))*100*time.Microsecond
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

	o := cfg.server.options()
	o.PoolSize = cfg.workers
	o.MinIdleConns = cfg.workers
	o.ReadTimeout, o.WriteTimeout = cfg.timeout, cfg.timeout
	client := goredis.NewUniversalClient(o)
	defer client.Close()
	rt := countRoundTrips(client)
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: ping: %w", err)
	}

	bopts := &redis.Options{Detect: capability.Config{ForcePlainLua: cfg.plainLua}}
	// One backend, so one capability detection, made here (Describe)
	// before any measured run.
	be := redis.New(client, bopts)
	lim := sdk.New(be, sdk.WithPrefix(cfg.prefix)) // -memory, Describe
	gen := newSubjects(policy, cfg.subjects, cfg.values)
	w := os.Stdout
	target := cfg.server.describe()
	fmt.Fprintf(w, "freqcap bench: %s, policy %q (%d rules), %d workers, %v per run, %d subjects, %d values per other dimension\n",
		target, policy.Name(), len(policy.Rules()), cfg.workers, cfg.duration, cfg.subjects, cfg.values)
	if d, err := lim.Describe(ctx); err == nil {
		fmt.Fprintf(w, "backend strategies:%s\n", describeStrategies(policy, d))
	}

	// The runs compared in each round, and the ratios reported. Each run
	// has its own Limiter and key prefix (prefix-1, prefix-2, …), so that
	// one run never decides on state another left (a run that admitted
	// everything would leave the next one mostly denials).
	type run struct {
		name   string
		per    int // decisions per call
		decide decideFunc
	}
	var (
		runs      []run
		ratios    [][2]int // indexes into runs: numerator, denominator
		hotLims   []*sdk.Limiter
		hotCached *sdk.Policy
	)
	runLim := func() *sdk.Limiter {
		return sdk.New(be, sdk.WithPrefix(cfg.prefix+"-"+strconv.Itoa(len(runs)+1)))
	}
	if cfg.hot {
		plain, cached, err := hotPolicies(policy, cfg.hotCache)
		if err != nil {
			return err
		}
		hotCached = cached
		hot := newSubjects(policy, cfg.hotSubjects, cfg.values)
		fmt.Fprintf(w, "hot-subject workload: %d subjects, hot-deny cache of %d entries in the runs named HotDenyCache\n", cfg.hotSubjects, cfg.hotCache)
		sizes := []int{1}
		if cfg.batch > 0 {
			sizes = append(sizes, cfg.batch)
		}
		for _, n := range sizes {
			for _, p := range []*sdk.Policy{plain, cached} {
				name := "hot, "
				if n > 1 {
					name += fmt.Sprintf("batch %d, ", n)
				}
				if p == cached {
					name += "HotDenyCache"
				} else {
					name += "no cache"
				}
				l := runLim()
				if p == cached {
					hotLims = append(hotLims, l)
				}
				d := allowOne(l, p, hot)
				if n > 1 {
					d = allowBatch(l, p, hot, n)
				}
				runs = append(runs, run{name, n, d})
			}
		}
	} else {
		runs = append(runs, run{"policy " + policy.Name(), 1, allowOne(runLim(), policy, gen)})
		if cfg.batch > 0 {
			runs = append(runs, run{fmt.Sprintf("policy %s, AllowBatch of %d", policy.Name(), cfg.batch), cfg.batch, allowBatch(runLim(), policy, gen, cfg.batch)})
			ratios = append(ratios, [2]int{len(runs) - 1, 0})
		}
		if cfg.baseline {
			base := len(runs)
			runs = append(runs, run{"baseline INCRBY+PEXPIRE EVALSHA", 1, scriptOne(client, lua.Baseline, cfg, "baseline", 1)})
			ratios = append(ratios, [2]int{0, base})
			if cfg.batch > 0 {
				// What batching gains on this machine for the cheapest
				// script there is: the ceiling of any batch/one-by-one
				// ratio here (a costlier script gains less).
				d, err := scriptPipelined(ctx, client, lua.Baseline, cfg, "baseline-p", 1, cfg.batch)
				if err != nil {
					return err
				}
				runs = append(runs, run{fmt.Sprintf("baseline, pipelines of %d", cfg.batch), cfg.batch, d})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
			}
			if cfg.floor {
				// All four rules in one hash, one hash per set of
				// dimensions, then one key per rule as take.lua keeps
				// them: 2 fields per rule.
				runs = append(runs, run{"floor, 1 hash x 8 fields", 1, scriptOne(client, lua.Floor, cfg, "floor1", 1)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				runs = append(runs, run{"floor, 2 keys x 4 fields", 1, scriptOne(client, lua.Floor, cfg, "floor2", 2)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				runs = append(runs, run{"floor, 4 keys x 2 fields", 1, scriptOne(client, lua.Floor, cfg, "floor4", 4)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				if cfg.batch > 0 {
					f4 := len(runs) - 1
					d, err := scriptPipelined(ctx, client, lua.Floor, cfg, "floor4-p", 4, cfg.batch)
					if err != nil {
						return err
					}
					runs = append(runs, run{fmt.Sprintf("floor, 4 keys x 2 fields, pipelines of %d", cfg.batch), cfg.batch, d})
					ratios = append(ratios, [2]int{len(runs) - 1, f4})
				}
			}
		}
	}
	rounds := max(1, cfg.rounds)
	if len(runs) == 1 {
		rounds = 1
	}
	got := make([][]float64, len(ratios))
	for i := range rounds {
		if rounds > 1 {
			fmt.Fprintf(w, "round %d/%d\n", i+1, rounds)
		}
		res := make([]*benchResult, len(runs))
		for k, r := range runs {
			var err error
			if res[k], err = benchRun(ctx, client, rt, cfg, r.name, r.per, r.decide); err != nil {
				return err
			}
			res[k].print(w)
		}
		for k, q := range ratios {
			v := res[q[0]].rate() / res[q[1]].rate()
			got[k] = append(got[k], v)
			fmt.Fprintf(w, "ratio %s / %s: %.2f (decisions/s)\n", runs[q[0]].name, runs[q[1]].name, v)
		}
		if cfg.hot {
			for k := 0; k+1 < len(runs); k += 2 {
				a, b := res[k], res[k+1]
				fmt.Fprintf(w, "Redis round trips per decision: %.4f without the cache, %.4f with it (%.1f%% of decisions answered from the cache)\n",
					a.roundTrips, b.roundTrips, 100*float64(b.cached)/float64(max(1, b.n)))
			}
		}
	}
	if rounds > 1 {
		for k, q := range ratios {
			v := got[k]
			slices.Sort(v)
			fmt.Fprintf(w, "median ratio %s / %s over %d rounds: %.2f (min %.2f, max %.2f)\n", runs[q[0]].name, runs[q[1]].name, len(v), v[len(v)/2], v[0], v[len(v)-1])
		}
	}
	for _, l := range hotLims {
		st := l.HotDenyStats(hotCached)
		fmt.Fprintf(w, "hot-deny cache: size %d, %d entries, %d hits, %d misses, %d evictions\n", st.Size, st.Entries, st.Hits, st.Misses, st.Evictions)
	}

	if cfg.memory {
		per, err := benchMemory(ctx, client, cfg, lim, policy, gen)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "memory: %.0f bytes per subject (%d decision(s) each for %d subjects, INFO used_memory delta after FLUSHALL)\n", per, cfg.memoryTakes, cfg.subjects)
	}
	return nil
}

// decideFunc makes one call (one or more decisions) for a bench worker.
type decideFunc func(context.Context, *rand.Rand) outcome

// outcome is what one call decided.
type outcome struct {
	n, allowed, cached, errs int64
	err                      error // the first error
}

// merge adds the counts of o.
func (o *outcome) merge(p outcome) {
	o.n += p.n
	o.allowed += p.allowed
	o.cached += p.cached
	o.errs += p.errs
	if o.err == nil {
		o.err = p.err
	}
}

// add counts one decision: failed (err), else allowed or denied, and
// whether the hot-deny cache answered it.
func (o *outcome) add(err error, allowed, cached bool) {
	o.n++
	switch {
	case err != nil:
		o.errs++
		if o.err == nil {
			o.err = err
		}
	case allowed:
		o.allowed++
	}
	if cached {
		o.cached++
	}
}

// allowOne decides one random subject per call with Allow.
func allowOne(lim *sdk.Limiter, p *sdk.Policy, gen *subjects) decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		d, err := lim.Allow(ctx, p, gen.pick(rng))
		o.add(err, d.Allowed, d.Cached)
		return o
	}
}

// scriptKeys returns, for each of cfg.subjects subjects, n keys under the
// subject's hash tag: prefix:{i}:name (n = 1) or prefix:{i}:name.k.
func scriptKeys(cfg benchConfig, name string, n int) [][]string {
	keys := make([][]string, cfg.subjects)
	for i := range keys {
		base := cfg.prefix + ":{" + strconv.Itoa(i) + "}:" + name
		if n == 1 {
			keys[i] = []string{base}
			continue
		}
		for k := range n {
			keys[i] = append(keys[i], base+"."+strconv.Itoa(k+1))
		}
	}
	return keys
}

// scriptOne runs script src on the nkeys keys of a random subject per call
// (ARGV[1]: a TTL in ms), as the backend runs take.lua: EVALSHA, EVAL
// after NOSCRIPT.
func scriptOne(c goredis.UniversalClient, src string, cfg benchConfig, name string, nkeys int) decideFunc {
	keys := scriptKeys(cfg, name, nkeys)
	script := goredis.NewScript(src)
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		o.add(script.Run(ctx, c, keys[rng.IntN(len(keys))], 60000).Err(), true, false)
		return o
	}
}

// scriptPipelined runs n EVALSHA of script src (ARGV[1]: a TTL in ms), each
// on the nkeys keys of a random subject, per call, in one pipeline (one per
// master on a cluster), as TakeBatch sends take.lua. A pipeline sends
// EVALSHA only, so it loads src on every master first.
func scriptPipelined(ctx context.Context, c goredis.UniversalClient, src string, cfg benchConfig, name string, nkeys, n int) (decideFunc, error) {
	if err := forEachMaster(ctx, c, func(ctx context.Context, m *goredis.Client) error {
		return m.ScriptLoad(ctx, src).Err()
	}); err != nil {
		return nil, fmt.Errorf("bench: SCRIPT LOAD: %w", err)
	}
	keys := scriptKeys(cfg, name, nkeys)
	script := goredis.NewScript(src)
	return func(ctx context.Context, rng *rand.Rand) outcome {
		cmds, _ := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for range n {
				script.EvalSha(ctx, p, keys[rng.IntN(len(keys))], 60000)
			}
			return nil
		})
		var o outcome
		for _, cmd := range cmds {
			o.add(cmd.Err(), true, false)
		}
		return o
	}, nil
}

// allowBatch decides n random subjects per call with one AllowBatch.
func allowBatch(lim *sdk.Limiter, p *sdk.Policy, gen *subjects, n int) decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		as := make([]sdk.Attempt, n)
		for i := range as {
			as[i].Subject = gen.pick(rng)
		}
		var o outcome
		for _, r := range lim.AllowBatch(ctx, p, as) {
			o.add(r.Err, r.Decision.Allowed, r.Decision.Cached)
		}
		return o
	}
}

// hotPolicies returns p without and with a hot-deny cache of size entries:
// the same name, rules and failure mode, and the default denial trail.
func hotPolicies(p *sdk.Policy, size int) (plain, cached *sdk.Policy, err error) {
	var opts []sdk.PolicyOption
	if p.FailOpen() {
		opts = append(opts, sdk.FailOpen())
	}
	if plain, err = sdk.NewPolicy(p.Name(), p.Rules(), opts...); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if cached, err = sdk.NewPolicy(p.Name(), p.Rules(), append(opts, sdk.HotDenyCache(size))...); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return plain, cached, nil
}

// describeStrategies lists the backend's strategy for each algorithm p
// uses.
func describeStrategies(p *sdk.Policy, d driver.Description) string {
	var b strings.Builder
	seen := map[driver.Algorithm]bool{}
	for _, r := range p.Rules() {
		if seen[r.Algorithm] {
			continue
		}
		seen[r.Algorithm] = true
		st := d.Strategies[r.Algorithm]
		fmt.Fprintf(&b, " %s: %s (%s);", r.Algorithm, st.Name, st.Reason)
	}
	return strings.TrimSuffix(b.String(), ";")
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

// subject returns the j-th subject with the k-th value (mod -values) of
// each other dimension: the memory run's k-th decision for subject j, so
// that a user receives several contents.
func (s *subjects) subject(j, k int) sdk.Subject {
	sub := make(sdk.Subject, len(s.shard)+len(s.other))
	for i, d := range s.shard {
		sub[d] = s.shardVals[i][j]
	}
	for _, d := range s.other {
		sub[d] = s.otherVals[k%len(s.otherVals)]
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
	name                    string
	outcome                 // decisions (n), allowed, cached, errors, the first error
	calls                   int64
	elapsed                 time.Duration
	lat                     hist
	roundTrips              float64 // per decision, counted by the client (commands and pipelines sent to servers)
	scriptCalls, innerCalls float64 // per decision, from INFO commandstats
	serverMicros            float64 // server time per script call (µs), from INFO commandstats
	serverCPU               float64 // server process CPU per decision (µs), from INFO cpu
}

func (r *benchResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r *benchResult) print(w io.Writer) {
	per := ""
	if r.calls != r.n {
		per = fmt.Sprintf(" (%d calls of %d)", r.calls, r.n/max(1, r.calls))
	}
	fmt.Fprintf(w, "%s: %d decisions%s in %v = %.0f decisions/s; per call p50 %v, p99 %v; allowed %d, denied %d (cached %d), errors %d; Redis calls per decision: %.4f round trips, %.2f scripts (EVALSHA/EVAL), %.2f commands inside scripts; server time %.1f µs per script call; server CPU %.1f µs per decision\n",
		r.name, r.n, per, r.elapsed.Round(time.Millisecond), r.rate(), r.lat.quantile(0.50), r.lat.quantile(0.99),
		r.allowed, r.n-r.allowed-r.errs, r.cached, r.errs, r.roundTrips, r.scriptCalls, r.innerCalls, r.serverMicros, r.serverCPU)
	if r.err != nil {
		fmt.Fprintf(w, "  first error: %v\n", r.err)
	}
}

// benchRun runs decide from cfg.workers goroutines: a warm-up, then a
// measured run bounded by cfg.duration and cfg.maxDecisions.
func benchRun(ctx context.Context, c goredis.UniversalClient, rt *roundTrips, cfg benchConfig, name string, per int, decide decideFunc) (*benchResult, error) {
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
	if cfg.warmup > 0 {
		loop(cfg.warmup, cfg.maxDecisions)
	}
	before, err := commandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	cpu0, err := serverCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	rt0 := rt.n.Load()
	res := loop(cfg.duration, cfg.maxDecisions)
	rt1 := rt.n.Load()
	cpu1, err := serverCPU(ctx, c)
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
	}
	if scripts > 0 {
		res.serverMicros = float64(usec) / float64(scripts)
	}
	return res, nil
}

// roundTrips counts the requests the client sends to servers: each
// command sent alone and each pipeline (one per server it reaches), but
// not connection set-up or the bench's own INFO calls.
type roundTrips struct{ n atomic.Int64 }

func countRoundTrips(c goredis.UniversalClient) *roundTrips {
	rt := &roundTrips{}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		// Node clients see what reaches each server: a cluster pipeline
		// is one pipeline per node.
		cc.OnNewNode(func(n *goredis.Client) { n.AddHook(rt) })
	case *goredis.Client:
		cc.AddHook(rt)
	}
	return rt
}

func (rt *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() != "info" {
			rt.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && cmds[0].Name() != "client" {
			rt.n.Add(1)
		}
		return next(ctx, cmds)
	}
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

// serverCPU sums used_cpu_sys and used_cpu_user (seconds: the server
// process's CPU time, every thread) over every master (INFO cpu).
func serverCPU(ctx context.Context, c goredis.UniversalClient) (float64, error) {
	var (
		mu    sync.Mutex
		total float64
	)
	err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		s, err := n.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(s, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			mu.Lock()
			total += f
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bench: INFO cpu: %w", err)
	}
	return total, nil
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

// benchMemory flushes the target, takes cfg.memoryTakes decisions for
// each of cfg.subjects subjects (rotating the values of the other
// dimensions) and returns the used_memory growth per subject.
func benchMemory(ctx context.Context, c goredis.UniversalClient, cfg benchConfig, lim *sdk.Limiter, p *sdk.Policy, gen *subjects) (float64, error) {
	if err := forEachMaster(ctx, c, func(ctx context.Context, n *goredis.Client) error {
		// A synchronous FLUSHALL of a large dataset outlasts the bench's
		// timeouts: send it on a client of its own with a long one.
		o := *n.Options()
		o.ReadTimeout, o.WriteTimeout = 5*time.Minute, 5*time.Minute
		fc := goredis.NewClient(&o)
		defer fc.Close()
		return fc.FlushAll(ctx).Err()
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
				for k := range cfg.memoryTakes {
					if _, err := lim.Allow(ctx, p, gen.subject(int(j), k)); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
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
