package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/bench"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

const benchUsage = `Usage: freqcap bench --redis ADDR | --cluster ADDR,… | --sentinel ADDR,… --master NAME [flags]
       freqcap bench -envoy [-envoy-bin PATH] [flags]

Load test: -workers concurrent callers take decisions of one policy for
-duration (after -warmup) over -subjects subjects, against the Redis
deployment named, and print throughput and latency percentiles. -raw,
-baseline, -floor, -batch, -coalesce, -wait-replicas, -overrides, -serve,
-recorder, -hot and -memory add comparison runs (see each flag); ratios are
computed within the invocation. Each run also says what it cost per
decision: round trips, commands, the server's CPU (INFO cpu; "kernel" is
its used_cpu_sys part, the reads and writes of round trips) and the
bench's own.

The policy is the seed policy "push" (internal/seed), or the one named by
--name from --policies FILE (the same flag as freqcap console's; -policy is
its deprecated spelling); -all, or names separated by commas, run every
policy of the file, or those, in turn. -prefill K,… measures each policy
with K live values per subject, for each K.
testdata/bench-policies.yaml holds the shapes docs/benchmarks/HISTORY.md compares.
Flags take one dash or two.

-envoy compares freqcap serve with Envoy's own rate-limit service
(github.com/envoyproxy/ratelimit, at a pinned version) on Envoy's
rate-limit API instead: each service on a redis-server of its own that
the bench starts on loopback, the same gRPC load for both (-workers
callers over -conns connections, -subjects users, every decision
allowed), for 1 and 4 fixed windows, -rounds times alternating; it
prints decisions/s, the service's and Redis's CPU per decision, and
checks the counts in Redis (docs/BENCHMARKS.md).

Flags:
`

// runBench is `freqcap bench`: it parses the flags into a bench.Config
// and runs internal/bench.
func runBench(args []string) error {
	var (
		cfg                    bench.Config
		server                 serverFlags
		policyFile, policyName string
		all                    bool
		cpuProfile             string
		envoy                  bool
		envoyBin               string
		conns                  int
	)
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	server.register(fs)
	fs.IntVar(&cfg.Workers, "workers", 64, "concurrent workers (each one call at a time: one decision, or one TakeBatch with -batch)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured run length (per run)")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up before each run (0: a single unmeasured call, which loads the run's scripts)")
	fs.IntVar(&cfg.Subjects, "subjects", 100000, "distinct subjects (values of the policy's shard dimensions)")
	fs.IntVar(&cfg.Values, "values", 4, "distinct values of each other dimension (e.g. content) per run")
	fs.Func("prefill", "measure the policy once for each `K` of a comma-separated list, in turn: before measuring, take once for each subject and each of K values of the other dimensions (those outside the policy's shard dimensions, e.g. campaign), so that every subject has K live values, then measure decisions picking among those K (-values is K; -memory then measures, after its FLUSHALL, the used_memory growth over the pre-fill, per subject and per live value); e.g. -prefill 1,10,100,1000", func(v string) error {
		ks, err := parsePrefill(v)
		cfg.Prefill = ks
		return err
	})
	fs.IntVar(&cfg.PrefillTotal, "prefill-total", 0, "with -prefill: run each K with `N`/K subjects (at least 1) instead of -subjects, N live values in all at each K (0: -subjects at each K)")
	fs.Int64Var(&cfg.MaxDecisions, "max", 50_000_000, "stop a run after this many decisions")
	fs.StringVar(&policyFile, "policies", "", "policy `FILE` (YAML), as for freqcap console; default: the seed policies (internal/seed)")
	fs.StringVar(&policyFile, "policy", "", "deprecated: use --policies")
	fs.StringVar(&policyName, "name", "", "`NAME` of the policy to run from the file (default: the first); names separated by commas run each, one after the other, as -all does")
	fs.BoolVar(&all, "all", false, "run every policy of the file (or of the seed policies), one after the other (with -raw: each against raw(R) for its own number of rules R)")
	fs.BoolVar(&cfg.Baseline, "baseline", false, "also run one trivial INCRBY+PEXPIRE EVALSHA per decision and report the ratio (with -batch N, also that script in pipelines of N)")
	fs.BoolVar(&cfg.Raw, "raw", false, "also run raw(R): one EVALSHA doing INCRBY (PEXPIRE on the first hit) on R keys, R = the policy's rules, deciding nothing, and report the policy's ratio to it")
	fs.BoolVar(&cfg.Floor, "floor", false, "also run internal/bench/scripts/floor.lua, the cheapest conceivable 4-rule step (TIME, then HMGET, HSET and PEXPIRE of each state key; no arithmetic, decides nothing), on 1, 2 and 4 keys per subject, and report their ratios to the baseline (with -batch N, also the 4-key step in pipelines of N; with -raw, also the floor of the policy's layout for its R rules, against the policy and raw(R): internal/bench/scripts/logfloor.lua for a policy of sliding logs above driver.LogLine (sorted sets) on one set of dimensions, else internal/bench/scripts/packedfloor.lua, and on a standalone server raw(R) coalesced, the floor of a coalesced decision: the INCRBYs of every queued call in one EVALSHA, at most 2 in flight, as the default run); implies -baseline")
	fs.BoolVar(&cfg.WideFloor, "wide-floor", false, "with -prefill and -raw: also run internal/bench/scripts/widefloor.lua, the floor of a decision on a wide root (GET of the root, HGET, HSET of a field, SET of the root; decides nothing) on as many roots of K fields each, one EVALSHA per decision and coalesced (the concurrent calls in one EVALSHA, at most 2 in flight, as the default run), and report the policy's ratio to the coalesced floor and each floor's to raw(R)")
	fs.BoolVar(&cfg.Memory, "memory", false, "measure bytes per subject: FLUSHALL, one decision per subject, INFO memory delta (DESTROYS ALL DATA on the target)")
	fs.IntVar(&cfg.MemoryTakes, "memory-takes", 1, "with -memory: decisions per subject, one after the other, the k-th with the k-th value (mod -values) of each other dimension")
	fs.BoolVar(&cfg.PlainLua, "plain-lua", false, "use the plain Lua strategies even with -module-strategies")
	forbid := fs.String("forbid", "", "comma-separated features never to use: tairhash, redis-cell, hfe (hfe: wide roots are swept, as on a server without native hash-field expiry)")
	fs.BoolVar(&cfg.ModuleStrategies, "module-strategies", false, "use the per-rule module strategies where the server has their modules (TairHash, native hash-field expiry, redis-cell); by default every algorithm runs on plain Lua")
	fs.StringVar(&cfg.Prefix, "prefix", "bench", "key prefix")
	fs.BoolVar(&cfg.Keep, "keep", false, "leave the runs' keys on the server (default: delete them when done, SCAN MATCH prefix then UNLINK)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the client to `FILE`")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "with -baseline, -raw, -batch, -coalesce, -wait-replicas, -recorder or -hot: alternate the compared runs this many times, every other round in reverse order (reduces noise and order effects); the ratios reported are medians")
	fs.BoolVar(&cfg.Overrides, "overrides", false, "also run the policy with per-person overrides read in every decision (sdk.WithOverrides): with none set, and with one limit override per subject (the first rule's own limit: the same decisions), and report each one's ratio to the policy's run (with -raw, also to raw(R))")
	fs.IntVar(&cfg.Batch, "batch", 0, "also run TakeBatch of `N` attempts per call (same workers) and report its ratio to one-by-one Allow")
	fs.IntVar(&cfg.Coalesce, "coalesce", 0, "also run the policy one-by-one with redis.Options.Coalesce = `N` (concurrent single decisions share multi-attempt scripts, at most N in flight; -1: off, one EVALSHA per call; ignored on a cluster) and report its ratio to the default run (coalescing on, redis.DefaultCoalesce; with -raw, also to raw(R))")
	fs.IntVar(&cfg.WaitReplicas, "wait-replicas", 0, "also run the policy one-by-one with redis.Options.Durability: each decision waits for `N` replicas' acknowledgement (WAIT in its round trip, at most -wait-timeout), and report its ratio to the run without and how many admissions said Durable")
	fs.DurationVar(&cfg.WaitTimeout, "wait-timeout", 0, "with -wait-replicas: the wait's timeout (default redis.DefaultDurabilityTimeout)")
	fs.BoolVar(&cfg.Hot, "hot", false, "hot-subject workload: all workers hammer -hot-subjects subjects, without and with a hot-deny cache (sdk.WithHotDenyCache); reports Redis round trips per decision for each")
	fs.IntVar(&cfg.HotSubjects, "hot-subjects", 10, "with -hot: the number of hot subjects")
	fs.IntVar(&cfg.HotCache, "hot-cache", 10000, "with -hot: the hot-deny cache size")
	fs.BoolVar(&cfg.Serve, "serve", false, "also run the policy through a freqcap serve on loopback (coalesce 4, or -coalesce N), called over gRPC by the same workers (the client coalescing their calls), and report its ratio to the in-process run, to the same calls one RPC per call, and the p99 it adds, and serve's floor: the same calls as Peek, one RPC per call, through a serve on the memory backend, deciding nothing (with -batch N, also TakeBatch of N through serve against one-by-one through serve, coalesced and one RPC per call)")
	fs.BoolVar(&cfg.Recorder, "recorder", false, "also run the policy with an fleet.Recorder (flushing every second to the same server) and report its ratio to the run without one (with -hot: the HotDenyCache run, every decision a cached denial counted in the top denied subjects)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "client read/write timeout (default 2s; with -batch, 2s + 100µs per attempt in flight)")
	fs.BoolVar(&envoy, "envoy", false, "compare freqcap serve (this binary's, default flags) with Envoy's rate-limit service ("+bench.EnvoyRLSModule+"@"+bench.EnvoyRLSVersion+") on Envoy's rate-limit API, each on a redis-server of its own the bench starts (redis-server in PATH); no --redis: see above")
	fs.StringVar(&envoyBin, "envoy-bin", "", "with -envoy: Envoy's rate-limit service `BINARY` (default: the one built by go install into the user cache directory, building it there when missing)")
	fs.IntVar(&conns, "conns", 4, "with -envoy: gRPC connections the -workers callers share")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return unexpectedArg("bench", args, fs, "flags after it would be ignored")
	}
	var err error
	if cfg.Forbid, err = parseForbid(*forbid); err != nil {
		return fmt.Errorf("bench: -forbid: %w", err)
	}
	if envoy {
		if server.given() {
			return errors.New("bench: -envoy starts its own redis-servers: give no --redis, --cluster or --sentinel")
		}
		return runBenchEnvoy(cfg, envoyBin, conns)
	}
	if len(cfg.Prefill) > 0 {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "values" || f.Name == "memory-takes" })
		if explicit {
			return errors.New("bench: -prefill K sets -values to K, and -memory measures the pre-fill: give neither -values nor -memory-takes")
		}
	}
	// Zero means "the default" in bench.Config; on the command line it
	// is a mistake.
	if cfg.Workers < 1 || cfg.Subjects < 1 || cfg.Values < 1 || cfg.Duration <= 0 || cfg.MaxDecisions < 1 || cfg.Warmup < 0 {
		return errors.New("bench: -workers, -subjects, -values, -duration and -max must be positive, -warmup >= 0")
	}
	if cfg.PrefillTotal < 0 || (cfg.PrefillTotal > 0 && len(cfg.Prefill) == 0) {
		return errors.New("bench: -prefill-total needs -prefill, and must be >= 0")
	}
	if cfg.WideFloor && (len(cfg.Prefill) == 0 || !cfg.Raw) {
		return errors.New("bench: -wide-floor needs -prefill and -raw")
	}
	if cfg.Batch < 0 || cfg.Coalesce < -1 || cfg.MemoryTakes < 1 || cfg.HotSubjects < 1 || cfg.HotCache < 1 || cfg.Timeout < 0 || cfg.Rounds < 1 {
		return errors.New("bench: -batch must be >= 0, -coalesce >= -1, -memory-takes, -rounds, -hot-subjects and -hot-cache > 0, -timeout >= 0")
	}
	if err := server.check(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !server.given() {
		fs.Usage()
		return errors.New("bench: give one of --redis, --cluster and --sentinel")
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	switch {
	case all && policyName != "":
		return errors.New("bench: -all and -name exclude each other")
	case all:
		ps, err := benchLoadPolicies(policyFile)
		if err != nil {
			return err
		}
		cfg.Policies = ps
	case strings.Contains(policyName, ","):
		for _, name := range strings.Split(policyName, ",") {
			p, err := benchLoadPolicy(policyFile, name)
			if err != nil {
				return err
			}
			cfg.Policies = append(cfg.Policies, p)
		}
	case policyFile != "" || policyName != "":
		p, err := benchLoadPolicy(policyFile, policyName)
		if err != nil {
			return err
		}
		cfg.Policy = p
	}
	cfg.Redis = server.options()
	if err := ping(cfg.Redis, server); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cfg.Target = server.describe()
	return bench.Run(context.Background(), cfg, os.Stdout)
}

// runBenchEnvoy is `freqcap bench -envoy`: serve is this binary's.
func runBenchEnvoy(cfg bench.Config, envoyBin string, conns int) error {
	if cfg.Workers < 1 || cfg.Subjects < 1 || cfg.Duration <= 0 || cfg.Warmup < 0 || cfg.Rounds < 1 || conns < 1 {
		return errors.New("bench: -workers, -subjects, -duration, -rounds and -conns must be positive, -warmup >= 0")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: the freqcap binary to run serve from: %w", err)
	}
	ctx := context.Background()
	if envoyBin == "" {
		if envoyBin, err = bench.EnsureEnvoyRLS(ctx, os.Stderr); err != nil {
			return err
		}
	} else if _, err := os.Stat(envoyBin); err != nil {
		return fmt.Errorf("bench: -envoy-bin: %w; build Envoy's rate-limit service with `%s`, or leave -envoy-bin out to have the bench build it into the user cache directory",
			err, strings.Join(bench.EnvoyRLSInstall("DIR"), " "))
	}
	return bench.RunEnvoy(ctx, bench.EnvoyConfig{
		Freqcap:  self,
		EnvoyBin: envoyBin,
		Workers:  cfg.Workers,
		Conns:    conns,
		Users:    cfg.Subjects,
		Duration: cfg.Duration,
		Warmup:   cfg.Warmup,
		Rounds:   cfg.Rounds,
	}, os.Stdout)
}

// ping checks once that o's deployment answers and takes its
// credentials (connect).
func ping(o *goredis.UniversalOptions, s serverFlags) error {
	c := goredis.NewUniversalClient(o)
	defer c.Close()
	return connect(context.Background(), c, s)
}

// benchLoadPolicies loads the policies of file (the seed policies when
// file is empty).
func benchLoadPolicies(file string) ([]*sdk.Policy, error) {
	var (
		ps  []*sdk.Policy
		err error
	)
	if file == "" {
		ps, err = seed.Policies()
	} else {
		ps, err = policyfile.LoadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return ps, nil
}

// benchLoadPolicy returns the policy named name of file (the first when
// name is empty).
func benchLoadPolicy(file, name string) (*sdk.Policy, error) {
	ps, err := benchLoadPolicies(file)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if name == "" || p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("bench: no policy named %q", name)
}

// parsePrefill parses -prefill's comma-separated list of positive K.
func parsePrefill(v string) ([]int, error) {
	var ks []int
	for _, f := range strings.Split(v, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("want positive integers separated by commas, got %q", v)
		}
		ks = append(ks, k)
	}
	return ks, nil
}
