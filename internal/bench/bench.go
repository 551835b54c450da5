// Package bench is `freqcap bench`: a closed-loop load test of one policy
// against Redis (standalone, Sentinel or Cluster), optionally compared in
// the same invocation with reference scripts (a trivial INCRBY+PEXPIRE
// step and the floors of several key layouts), with a batch run, a
// coalesced run, a hot-subject workload and a bytes-per-subject
// measurement.
//
// Run prints one line per measured run (decisions/s, latency quantiles,
// round trips, commands and server time per decision) and the ratios of
// the compared runs; docs/BENCHMARKS.md and docs/benchmarks/HISTORY.md explain the figures.
//
// RunEnvoy (`freqcap bench -envoy`) compares freqcap serve with Envoy's
// own rate-limit service on Envoy's rate-limit API, each on a
// redis-server of its own.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/backends/redis/capability"
	fqclient "github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/bench/scripts"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Config is one invocation. The zero value of a field means its default.
type Config struct {
	// Redis is the server or servers to load; Run sets its pool size
	// and timeouts. Required.
	Redis *goredis.UniversalOptions
	// Target names the server in the report (e.g. "redis 127.0.0.1:6379").
	Target string
	// Policy is the policy measured; nil means the seed policy "push"
	// (internal/seed).
	Policy *sdk.Policy
	// Policies, when not empty, are measured one after the other, each as
	// Policy would be (so with Raw, each against raw(R) for its own R).
	Policies []*sdk.Policy
	// Workers is the number of concurrent workers, each one call at a
	// time: one decision, or one TakeBatch with Batch. Default 64.
	Workers int
	// Duration is the length of each measured run (default 10s); Warmup
	// the unmeasured run before it (0: a single unmeasured call, which loads the
	// scripts the run uses).
	Duration, Warmup time.Duration
	// Subjects is the number of distinct subjects (values of the policy's
	// shard dimensions, default 100000); Values the number of values of
	// each other dimension, e.g. content (default 4).
	Subjects, Values int
	// MaxDecisions stops a run after this many decisions (default 50M).
	MaxDecisions int64
	// Baseline also runs the trivial INCRBY+PEXPIRE EVALSHA and reports
	// the ratio (with Batch, also that script in pipelines of Batch).
	Baseline bool
	// Raw also runs raw(R), one EVALSHA doing INCRBY (and PEXPIRE on the
	// first hit) on R counters, R the policy's number of rules, and
	// reports the policy's ratio to it: the floor of one round trip per
	// decision on the machine at hand.
	Raw bool
	// Floor also runs scripts.Floor on 1, 2 and 4 keys per subject and
	// reports their ratios to the baseline (with Batch, also the 4-key
	// step in pipelines of Batch); with Raw, also the floor of the
	// policy's layout for its R rules, reporting the policy's ratio to it
	// and its ratio to raw(R): scripts.LogFloor when the rules are all
	// sliding logs above driver.LogLine (sorted sets) on the same dimensions,
	// else scripts.PackedFloor (1 to 9 rules); and on a standalone server
	// raw(R) coalesced (the INCRBYs of every queued call in one EVALSHA,
	// at most 2 in flight, as redis.DefaultCoalesce), the floor of a
	// coalesced decision, with the policy's ratio to it and its ratio to
	// raw(R). It implies Baseline.
	Floor bool
	// WideFloor, with Raw and Prefill, also runs the floor of a decision
	// on a wide root (scripts.WideFloor: GET of the root, HGET, HSET of a
	// field, SET of the root, deciding nothing) on Subjects roots of
	// Values fields each, one EVALSHA per decision and coalesced (the
	// concurrent calls sharing EVALSHAs, at most 2 in flight, as
	// redis.DefaultCoalesce), and reports the policy's ratio to the
	// coalesced floor and each floor's to raw(R).
	WideFloor bool
	// Memory measures bytes per subject: FLUSHALL, MemoryTakes decisions
	// per subject, INFO memory delta. It DESTROYS ALL DATA on the target.
	Memory bool
	// MemoryTakes is the decisions per subject of Memory (default 1),
	// the k-th with the k-th value (mod Values) of each other dimension.
	MemoryTakes int
	// Prefill, when not empty, measures the policy (each of Policies) once
	// for each K in it, in turn, each under its own key prefix
	// (Prefix-k<K>) with Values = K: before the measured runs, each run
	// deciding the policy takes once for each subject and each of the K
	// values (the k-th value of each dimension outside the shard
	// dimensions), so that every subject has K live values, and the
	// measured decisions then pick among those K. With Memory, the
	// memory measured is the used_memory growth over the pre-fill of the
	// policy's run, right after a FLUSHALL (which Memory makes anyway),
	// per subject and per live value. The
	// policy must have a dimension outside its shard dimensions.
	Prefill []int
	// PrefillTotal, with Prefill, runs each K with PrefillTotal/K
	// subjects (at least 1) instead of Subjects: the same number of live
	// values in all at each K (0: Subjects at every K).
	PrefillTotal int
	// prefill is the K of this Run (0: no pre-fill).
	prefill int
	// PlainLua forces the plain Lua strategies
	// (capability.Config.ForcePlainLua), even with ModuleStrategies.
	PlainLua bool
	// ModuleStrategies uses the per-rule module strategies where the
	// server has their modules (capability.Config.ModuleStrategies).
	ModuleStrategies bool
	// Forbid lists features never to use (capability.Config.Forbid): e.g.
	// hfe, to measure a Redis >= 7.4 with wide roots swept as on 7.0.
	Forbid []capability.Feature
	// Prefix is the key prefix (default "bench"); each run uses its own,
	// Prefix-1, Prefix-2, …
	Prefix string
	// Keep leaves the runs' keys on the server. By default Run deletes
	// them when it returns (SCAN MATCH on every master, UNLINK): the keys
	// under Prefix: and each run's Prefix-<k>:, so that a later run, or
	// the next policy of Policies, does not decide on a server swollen by
	// this one's state, and nothing is left behind.
	Keep bool
	// Rounds alternates the compared runs this many times (default 1),
	// every other round in reverse order;
	// the ratios reported are then medians.
	Rounds int
	// Overrides also runs the policy with sdk.WithOverrides, reading
	// each subject's overrides in every decision: with none set, and with
	// one Limit override per subject (the first rule's own limit, so the
	// decisions are the same), and reports each one's ratio to the
	// policy's run and, with Raw, to raw(R).
	Overrides bool
	// Batch also runs TakeBatch of Batch attempts per call and reports
	// its ratio to one-by-one Allow (0: no batch run).
	Batch int
	// Coalesce also runs the policy one-by-one through a backend with
	// redis.Options.Coalesce = Coalesce (concurrent single decisions share
	// multi-attempt scripts, at most Coalesce in flight; -1: coalescing
	// off, one EVALSHA per call) and reports its ratio to the default
	// one-by-one run (redis.DefaultCoalesce) and, with Raw, to raw(R)
	// (0: no such run; on a cluster the option is ignored).
	Coalesce int
	// Hot is the hot-subject workload: every worker on HotSubjects
	// subjects (default 10), without and with a hot-deny cache of
	// HotCache entries (default 10000).
	Hot                   bool
	HotSubjects, HotCache int
	// Timeout is the client's read and write timeout (default 2s, plus
	// 100µs per attempt in flight).
	Timeout time.Duration
	// Recorder also runs the policy with an fleet.Recorder (flushing every
	// second to the same server) and reports its ratio to the run
	// without one; with Hot, the HotDenyCache run with a recorder (every
	// decision a cached denial counted in the top denied subjects).
	Recorder bool
	// WaitReplicas also runs the policy one by one through a backend with
	// redis.Options.Durability{Replicas: WaitReplicas, Timeout:
	// WaitTimeout} (each decision waits for that many replicas'
	// acknowledgement: WAIT in its round trip) and reports its ratio to
	// the run without, and how many of its admissions said Durable (0: no
	// such run).
	WaitReplicas int
	WaitTimeout  time.Duration
	// Serve also runs the policy through a freqcap serve on loopback
	// (package serve, over its own Redis backend with Coalesce, 4 unless
	// Coalesce says otherwise, as `freqcap serve` runs), called by the
	// Go client over gRPC by the same workers (its calls coalesced,
	// client.DefaultCoalesce), and reports its ratio to the in-process
	// run and the p99 it adds, and its ratio to the same calls sent one
	// RPC per call; and serve's floor: the same calls as Peek, one RPC
	// per call, through a serve on the memory backend, deciding
	// nothing (the RPC layer's own cost at that load), with its ratio to
	// the in-process run and that of the run through serve to it. With
	// Batch, also TakeBatch through serve against one-by-one through serve
	// (coalesced, and one RPC per call).
	Serve bool
}

// withDefaults fills in the defaults and checks cfg.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Redis == nil {
		return cfg, errors.New("bench: no server (Config.Redis)")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Workers, 64)
	def(&cfg.Subjects, 100000)
	def(&cfg.Values, 4)
	def(&cfg.MemoryTakes, 1)
	def(&cfg.Rounds, 1)
	def(&cfg.HotSubjects, 10)
	def(&cfg.HotCache, 10000)
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.MaxDecisions == 0 {
		cfg.MaxDecisions = 50_000_000
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "bench"
	}
	if cfg.Workers < 1 || cfg.Subjects < 1 || cfg.Values < 1 || cfg.Duration < 0 || cfg.MaxDecisions < 1 || cfg.Warmup < 0 {
		return cfg, errors.New("bench: workers, subjects, values, duration and max must be positive, warmup >= 0")
	}
	if cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 {
		return cfg, errors.New("bench: wait replicas and wait timeout must be >= 0")
	}
	if cfg.Batch < 0 || cfg.Coalesce < -1 || cfg.MemoryTakes < 1 || cfg.HotSubjects < 1 || cfg.HotCache < 1 || cfg.Timeout < 0 || cfg.Rounds < 1 {
		return cfg, errors.New("bench: batch must be >= 0, coalesce >= -1, memory takes, rounds, hot subjects and hot cache > 0, timeout >= 0")
	}
	cfg.Baseline = cfg.Baseline || cfg.Floor
	if cfg.Timeout == 0 {
		cfg.Timeout = 2*time.Second + time.Duration(cfg.Workers*max(1, cfg.Batch))*100*time.Microsecond
	}
	if cfg.prefill > 0 {
		cfg.Values = cfg.prefill
	}
	if cfg.Policy == nil {
		ps, err := seed.Policies()
		if err != nil {
			return cfg, fmt.Errorf("bench: %w", err)
		}
		cfg.Policy = ps[0]
	}
	return cfg, nil
}

// Run runs the benchmark cfg describes against cfg.Redis and writes the
// report to w. It returns when every run is done, or at the first error.
// With Policies, it benchmarks each policy in turn, each under its own key
// prefix (Prefix-<policy>).
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	if len(cfg.Policies) > 0 {
		for _, p := range cfg.Policies {
			c := cfg
			c.Policy, c.Policies = p, nil
			c.Prefix = cmp.Or(cfg.Prefix, "bench") + "-" + p.Name()
			if err := Run(ctx, c, w); err != nil {
				return err
			}
		}
		return nil
	}
	if len(cfg.Prefill) > 0 {
		for _, k := range cfg.Prefill {
			if k < 1 || cfg.PrefillTotal < 0 {
				return errors.New("bench: prefill values must be positive, prefill total >= 0")
			}
		}
		for _, k := range cfg.Prefill {
			c := cfg
			c.Prefill, c.prefill = nil, k
			if cfg.PrefillTotal > 0 {
				c.Subjects = max(1, cfg.PrefillTotal/k)
			}
			c.Prefix = cmp.Or(cfg.Prefix, "bench") + "-k" + strconv.Itoa(k)
			if err := Run(ctx, c, w); err != nil {
				return err
			}
		}
		return nil
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	policy := cfg.Policy
	if cfg.prefill > 0 {
		if err := checkPrefill(policy); err != nil {
			return err
		}
		if cfg.Hot || cfg.Serve || cfg.WaitReplicas > 0 || cfg.Overrides {
			return errors.New("bench: -prefill measures the policy's own runs (with -raw, -baseline, -floor, -batch, -coalesce, -recorder, -memory): not -hot, -serve, -wait-replicas or -overrides")
		}
	}
	o := *cfg.Redis
	o.PoolSize = cfg.Workers
	o.MinIdleConns = cfg.Workers
	o.ReadTimeout, o.WriteTimeout = cfg.Timeout, cfg.Timeout
	client := goredis.NewUniversalClient(&o)
	defer client.Close()
	rt := countRoundTrips(client)
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: ping: %w", err)
	}
	var nruns int // the runs whose keys (Prefix-1 … Prefix-nruns) are deleted on return
	if !cfg.Keep {
		defer func() {
			patterns := []string{globQuote(cfg.Prefix) + ":*"}
			for k := 1; k <= nruns; k++ {
				patterns = append(patterns, globQuote(cfg.Prefix+"-"+strconv.Itoa(k))+":*")
			}
			// Not the caller's context: a canceled run still cleans up.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			n, err := deleteKeys(cctx, client, patterns)
			fmt.Fprintf(w, "cleanup: deleted %d keys under %s (-keep leaves them): %s\n", n, strings.Join(patterns, " "), errText(err))
		}()
	}

	bopts := &redis.Options{Detect: capability.Config{ForcePlainLua: cfg.PlainLua, ModuleStrategies: cfg.ModuleStrategies, Forbid: cfg.Forbid}}
	// One backend, so one capability detection, made here (Describe)
	// before any measured run.
	be := redis.New(client, bopts)
	lim := sdk.New(be, sdk.WithPrefix(cfg.Prefix)) // -memory, Describe
	gen := newSubjects(policy, cfg.Subjects, cfg.Values)
	live := ""
	if cfg.prefill > 0 {
		live = " (pre-filled: each subject has them all live)"
	}
	fmt.Fprintf(w, "freqcap bench: %s, policy %q (%d rules), %d workers, %v per run, %d subjects, %d values per other dimension%s\n",
		cfg.Target, policy.Name(), len(policy.Rules()), cfg.Workers, cfg.Duration, cfg.Subjects, cfg.Values, live)
	if d, err := lim.Admin().Describe(ctx); err == nil {
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
		serveOne  = -1     // the run through serve, one decision per call
		stops     []func() // the servers of the runs through serve
		ratios    [][2]int // indexes into runs: numerator, denominator
		hotLims   []*sdk.Limiter
		hotCached *sdk.Policy
		recs      []*fleet.Recorder
		tally     *durableTally  // the WaitReplicas run's
		filled    []int          // the runs deciding policy on limiters of their own, pre-filled with Prefill
		lims      []*sdk.Limiter // their limiters
	)
	defer func() {
		for _, r := range recs {
			_ = r.Close()
		}
		for _, stop := range stops {
			stop()
		}
	}()
	runLim := func() *sdk.Limiter {
		return sdk.New(be, sdk.WithPrefix(cfg.Prefix+"-"+strconv.Itoa(len(runs)+1)))
	}
	// recorded is runLim with an fleet.Recorder, flushing every second to
	// the same server under the run's prefix.
	recorded := func() (*sdk.Limiter, error) {
		prefix := cfg.Prefix + "-" + strconv.Itoa(len(runs)+1)
		rec, err := fleet.NewRecorder(be, &fleet.Options{Prefix: prefix})
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		recs = append(recs, rec)
		return sdk.New(be, sdk.WithPrefix(prefix), sdk.WithObserver(rec.Observe)), nil
	}
	if cfg.Hot {
		plain, cached, err := hotPolicies(policy, cfg.HotCache)
		if err != nil {
			return err
		}
		hotCached = cached
		hot := newSubjects(policy, cfg.HotSubjects, cfg.Values)
		fmt.Fprintf(w, "hot-subject workload: %d subjects, hot-deny cache of %d entries in the runs named HotDenyCache\n", cfg.HotSubjects, cfg.HotCache)
		sizes := []int{1}
		if cfg.Batch > 0 {
			sizes = append(sizes, cfg.Batch)
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
					d = takeBatch(l, p, hot, n)
				}
				runs = append(runs, run{name, n, d})
			}
		}
		if cfg.Recorder {
			// The recorder's worst case: every decision a denial from the
			// cache, each one counted in the policy's top denied subjects
			// (under its lock), by every worker at once.
			l, err := recorded()
			if err != nil {
				return err
			}
			runs = append(runs, run{"hot, HotDenyCache, recorder on", 1, allowOne(l, cached, hot)})
			ratios = append(ratios, [2]int{len(runs) - 1, 1})
		}
	} else {
		l := runLim()
		runs = append(runs, run{"policy " + policy.Name(), 1, allowOne(l, policy, gen)})
		filled = append(filled, len(runs)-1)
		lims = append(lims, l)
		if cfg.Recorder {
			l, err := recorded()
			if err != nil {
				return err
			}
			runs = append(runs, run{"policy " + policy.Name() + ", recorder on", 1, allowOne(l, policy, gen)})
			filled = append(filled, len(runs)-1)
			lims = append(lims, l)
			ratios = append(ratios, [2]int{len(runs) - 1, 0})
		}
		if cfg.Batch > 0 {
			l := runLim()
			runs = append(runs, run{fmt.Sprintf("policy %s, TakeBatch of %d", policy.Name(), cfg.Batch), cfg.Batch, takeBatch(l, policy, gen, cfg.Batch)})
			filled = append(filled, len(runs)-1)
			lims = append(lims, l)
			ratios = append(ratios, [2]int{len(runs) - 1, 0})
		}
		var overridden []int // the runs with overrides
		if cfg.Overrides {
			op, err := withOverrides(policy)
			if err != nil {
				return err
			}
			runs = append(runs, run{"policy " + policy.Name() + ", overrides read, none set", 1, allowOne(runLim(), op, gen)})
			overridden = append(overridden, len(runs)-1)
			l := runLim()
			if err := setLimitOverrides(ctx, l, op, gen, cfg.Subjects, cfg.Workers); err != nil {
				return err
			}
			runs = append(runs, run{"policy " + policy.Name() + ", one limit override per subject", 1, allowOne(l, op, gen)})
			overridden = append(overridden, len(runs)-1)
			for _, k := range overridden {
				ratios = append(ratios, [2]int{k, 0})
			}
		}
		coalesced := -1
		if cfg.Coalesce != 0 {
			// A backend of its own: the option is set at construction.
			o := *bopts
			o.Coalesce = cfg.Coalesce
			cbe := redis.New(client, &o)
			if _, err := cbe.Capabilities(ctx); err != nil { // detection, before the measured runs
				return fmt.Errorf("bench: %w", err)
			}
			l := sdk.New(cbe, sdk.WithPrefix(cfg.Prefix+"-"+strconv.Itoa(len(runs)+1)))
			name := fmt.Sprintf("policy %s, coalesce %d", policy.Name(), cfg.Coalesce)
			if cfg.Coalesce < 0 {
				name = fmt.Sprintf("policy %s, coalesce off", policy.Name())
			}
			runs = append(runs, run{name, 1, allowOne(l, policy, gen)})
			filled = append(filled, len(runs)-1)
			lims = append(lims, l)
			coalesced = len(runs) - 1
			ratios = append(ratios, [2]int{coalesced, 0})
		}
		if cfg.WaitReplicas > 0 {
			name, d, t, err := durableRun(ctx, client, bopts, cfg, policy, gen, cfg.Prefix+"-"+strconv.Itoa(len(runs)+1))
			if err != nil {
				return err
			}
			tally = t
			runs = append(runs, run{name, 1, d})
			ratios = append(ratios, [2]int{len(runs) - 1, 0})
		}
		if cfg.Serve {
			// The same workload through a freqcap serve on loopback, as
			// `freqcap serve` runs it (coalescing on), one server per
			// run so that each run has its own keys.
			through := func(name string, per int, co *fqclient.Coalesce, mk func(c *fqclient.Client) decideFunc) error {
				url, stop, err := startServe(ctx, client, bopts, cfg, cfg.Prefix+"-"+strconv.Itoa(len(runs)+1), policy)
				if err != nil {
					return err
				}
				stops = append(stops, stop)
				c := fqclient.New(url, &fqclient.Options{Timeout: cfg.Timeout, Retry: noRetry, Coalesce: co})
				runs = append(runs, run{name, per, mk(c)})
				return nil
			}
			err := through(fmt.Sprintf("policy %s through serve (gRPC, loopback, coalesce %d)", policy.Name(), serveCoalesce(cfg)), 1, nil,
				func(c *fqclient.Client) decideFunc { return allowOne(c, policy, gen) })
			if err != nil {
				return err
			}
			serveOne = len(runs) - 1
			ratios = append(ratios, [2]int{serveOne, 0})
			// The same calls, each an RPC of its own: what the client's
			// coalescing (client.DefaultCoalesce) gains.
			err = through(fmt.Sprintf("policy %s through serve, one RPC per call", policy.Name()), 1, oneRPC,
				func(c *fqclient.Client) decideFunc { return allowOne(c, policy, gen) })
			if err != nil {
				return err
			}
			oneRPCRun := len(runs) - 1
			ratios = append(ratios, [2]int{serveOne, oneRPCRun})
			{
				// serve's floor: the same calls deciding nothing (a Peek
				// on the memory backend finding no state), the RPC
				// layer's own cost at the same load.
				url, stop, err := startServeOn(sdk.New(memory.New(nil)), cfg, policy)
				if err != nil {
					return err
				}
				stops = append(stops, stop)
				c := fqclient.New(url, &fqclient.Options{Timeout: cfg.Timeout, Retry: noRetry, Coalesce: oneRPC})
				runs = append(runs, run{"serve floor: Peek through serve on the memory backend, nothing decided", 1, peekOne(c, policy, gen)})
				ratios = append(ratios, [2]int{len(runs) - 1, 0}, [2]int{serveOne, len(runs) - 1})
			}
			if cfg.Batch > 0 {
				err := through(fmt.Sprintf("policy %s through serve, TakeBatch of %d", policy.Name(), cfg.Batch), cfg.Batch, nil,
					func(c *fqclient.Client) decideFunc { return takeBatch(c, policy, gen, cfg.Batch) })
				if err != nil {
					return err
				}
				ratios = append(ratios, [2]int{len(runs) - 1, serveOne}, [2]int{len(runs) - 1, oneRPCRun})
			}
		}
		if cfg.Raw {
			r := len(policy.Rules())
			runs = append(runs, run{fmt.Sprintf("raw(%d) INCRBY+PEXPIRE on %d keys", r, r), 1, scriptOne(client, scripts.Raw, cfg, "raw", r)})
			raw := len(runs) - 1
			ratios = append(ratios, [2]int{0, raw})
			if coalesced >= 0 {
				ratios = append(ratios, [2]int{coalesced, raw})
			}
			for _, k := range overridden {
				ratios = append(ratios, [2]int{k, raw})
			}
			if cfg.WideFloor && cfg.prefill > 0 {
				// The floor of a decision on a wide root, one EVALSHA each
				// and coalesced as the policy's default run is.
				wf, err := newWideFloor(ctx, client, cfg)
				if err != nil {
					return err
				}
				runs = append(runs, run{"wide floor: GET, HGET, HSET, SET per decision, one EVALSHA each", 1, wf.one()})
				ratios = append(ratios, [2]int{len(runs) - 1, raw})
				runs = append(runs, run{"wide floor, coalesced: the same per decision, the concurrent calls' in one EVALSHA, 2 in flight", 1, wf.coalesced()})
				ratios = append(ratios, [2]int{0, len(runs) - 1}, [2]int{len(runs) - 1, raw})
			}
			if _, single := client.(*goredis.Client); cfg.Floor && single {
				// The floor of a coalesced decision: raw(R)'s INCRBYs for
				// every queued call in one EVALSHA, the policy against it,
				// it against raw(R).
				runs = append(runs, run{fmt.Sprintf("raw(%d) coalesced: the same INCRBYs, the concurrent calls' in one EVALSHA, 2 in flight", r), 1, coalescedRaw(client, cfg, r)})
				ratios = append(ratios, [2]int{0, len(runs) - 1}, [2]int{len(runs) - 1, raw})
			}
			if windows := logWindows(policy); cfg.Floor && windows != nil {
				// The sliding-log layout's floor for R logs.
				runs = append(runs, run{fmt.Sprintf("log floor(%d): %d logs in one sorted set", r, r), 1, logFloor(client, cfg, windows)})
				ratios = append(ratios, [2]int{0, len(runs) - 1}, [2]int{len(runs) - 1, raw})
			} else if cfg.Floor && r >= 1 && r <= 9 {
				// The packed layout's floor for R rules: the policy
				// against it, it against raw(R).
				runs = append(runs, run{fmt.Sprintf("packed floor(%d): %d counters in one value", r, r), 1, packedFloor(client, cfg, r)})
				ratios = append(ratios, [2]int{0, len(runs) - 1}, [2]int{len(runs) - 1, raw})
			}
		}
		if cfg.Baseline {
			base := len(runs)
			runs = append(runs, run{"baseline INCRBY+PEXPIRE EVALSHA", 1, scriptOne(client, scripts.Baseline, cfg, "baseline", 1)})
			ratios = append(ratios, [2]int{0, base})
			if cfg.Batch > 0 {
				// What batching gains on this machine for the cheapest
				// script there is: the ceiling of any batch/one-by-one
				// ratio here (a costlier script gains less).
				d, err := scriptPipelined(ctx, client, scripts.Baseline, cfg, "baseline-p", 1, cfg.Batch)
				if err != nil {
					return err
				}
				runs = append(runs, run{fmt.Sprintf("baseline, pipelines of %d", cfg.Batch), cfg.Batch, d})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
			}
			if cfg.Floor {
				// All four rules in one hash, one hash per set of
				// dimensions, then one key per rule (the layout before
				// the packed one): 2 fields per rule.
				runs = append(runs, run{"floor, 1 hash x 8 fields", 1, scriptOne(client, scripts.Floor, cfg, "floor1", 1)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				runs = append(runs, run{"floor, 2 keys x 4 fields", 1, scriptOne(client, scripts.Floor, cfg, "floor2", 2)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				runs = append(runs, run{"floor, 4 keys x 2 fields", 1, scriptOne(client, scripts.Floor, cfg, "floor4", 4)})
				ratios = append(ratios, [2]int{len(runs) - 1, base})
				if cfg.Batch > 0 {
					f4 := len(runs) - 1
					d, err := scriptPipelined(ctx, client, scripts.Floor, cfg, "floor4-p", 4, cfg.Batch)
					if err != nil {
						return err
					}
					runs = append(runs, run{fmt.Sprintf("floor, 4 keys x 2 fields, pipelines of %d", cfg.Batch), cfg.Batch, d})
					ratios = append(ratios, [2]int{len(runs) - 1, f4})
				}
			}
		}
	}
	nruns = len(runs) // each run made its Limiter with prefix Prefix-<its index + 1>
	if cfg.prefill > 0 {
		for i, k := range filled {
			r := runs[k]
			var before int64
			if i == 0 && cfg.Memory {
				if err := flushAll(ctx, client); err != nil {
					return err
				}
				if before, err = settledMemory(ctx, client); err != nil {
					return fmt.Errorf("bench: INFO memory: %w", err)
				}
			}
			st, err := prefill(ctx, lims[i], policy, gen, cfg.Subjects, cfg.prefill, cfg.Workers)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "pre-fill of %s: %d takes (%d subjects x %d values) in %v, allowed %d, denied %d\n",
				r.name, st.takes, cfg.Subjects, cfg.prefill, st.elapsed.Round(time.Millisecond), st.allowed, st.takes-st.allowed)
			if i == 0 && cfg.Memory {
				after, err := settledMemory(ctx, client)
				if err != nil {
					return fmt.Errorf("bench: INFO memory: %w", err)
				}
				per := float64(after-before) / float64(cfg.Subjects)
				fmt.Fprintf(w, "memory: %.0f bytes per subject, %.1f per live value (%d values live for each of %d subjects; INFO used_memory delta over the pre-fill, after FLUSHALL)\n",
					per, per/float64(cfg.prefill), cfg.prefill, cfg.Subjects)
			}
		}
	}
	rounds := max(1, cfg.Rounds)
	if len(runs) == 1 {
		rounds = 1
	}
	got := make([][]float64, len(ratios))
	for i := range rounds {
		if rounds > 1 {
			fmt.Fprintf(w, "round %d/%d\n", i+1, rounds)
		}
		res := make([]*benchResult, len(runs))
		// Every other round runs the compared runs in reverse order, so
		// that what the server accumulates over a round (keys, memory)
		// weighs on each side alike.
		order := make([]int, len(runs))
		for k := range order {
			order[k] = k
		}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			r := runs[k]
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
		if serveOne >= 0 {
			fmt.Fprintf(w, "p99 added by serve: %v (%v through serve, %v in-process)\n",
				res[serveOne].lat.quantile(0.99)-res[0].lat.quantile(0.99), res[serveOne].lat.quantile(0.99), res[0].lat.quantile(0.99))
		}
		if cfg.Hot {
			for k := 0; k+1 < len(runs); k += 2 {
				a, b := res[k], res[k+1]
				fmt.Fprintf(w, "Redis round trips per decision: %.4f without the cache (coalesced), %.4f with it (%.1f%% of decisions answered from the cache)\n",
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
	if tally != nil {
		fmt.Fprintln(w, tally)
	}
	for _, r := range recs {
		err := r.Close()
		fmt.Fprintf(w, "recorder: %d counts lost to failed flushes; last flush: %v\n", r.Lost(), errText(err))
	}
	recs = nil
	for _, l := range hotLims {
		st := l.Admin().HotDenyStats(hotCached)
		fmt.Fprintf(w, "hot-deny cache: size %d, %d entries, %d hits, %d misses, %d evictions\n", st.Size, st.Entries, st.Hits, st.Misses, st.Evictions)
	}

	if cfg.Memory && cfg.prefill == 0 {
		per, err := benchMemory(ctx, client, cfg, lim, policy, gen)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "memory: %.0f bytes per subject (%d decision(s) each for %d subjects, INFO used_memory delta after FLUSHALL)\n", per, cfg.MemoryTakes, cfg.Subjects)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
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
