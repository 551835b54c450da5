// Command peers measures freqcap against raw(R) and its peers on one Redis
// server, in one invocation: raw(1), raw(2) and raw(4) (one EVALSHA doing
// INCRBY on R counters, PEXPIRE on a counter's first hit: the floor of one
// round trip per decision), freqcap's fixed window, sliding window and GCRA
// at 1 and 4 rules and sliding log at 1, 2 and 4 (sdk over backends/redis,
// default options),
// and at 1, 2 and 4 rules github.com/ulule/limiter/v3 (redis store, fixed
// window), github.com/go-redis/redis_rate/v10 (GCRA) and "one ZSET per user,
// ZCOUNT per rule in one script" (the sliding log most articles write). A
// peer without multi-rule calls makes R calls for R rules, as a user would.
//
// The workload is that of `freqcap bench`: 64 workers, each one call at a
// time on a random subject of 100 000, each run bounded in time and count,
// the runs alternated over rounds (every other round in reverse order) and
// the figures medians. It prints a Markdown table: decisions/s and each
// run's ratio to raw(R) for its own R, the median of the per-round ratios.
//
// It lives in its own module so that the peers never become dependencies
// of freqcap's. Run it from this directory:
//
//	go run . [-redis 127.0.0.1:PORT] [-duration 3s] [-rounds 3]
//
// Without -redis it starts a redis-server (from PATH) on a free port of
// 127.0.0.1 and stops it on return. With -redis it deletes only its own
// keys (prefix "peers-") when done. The address must be on 127.0.0.1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/bench/scripts"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// zsetLog is the sliding log of the articles: one sorted set per user, one
// member per request scored by the client's clock in ms; ZCOUNT per rule,
// all in one script.
// KEYS[1]: the user's sorted set
// ARGV[1]: now (ms); ARGV[2]: a unique member; ARGV[3..]: window ms, limit, …
// Reply: 1 allowed, 0 denied
const zsetLog = `
local now = tonumber(ARGV[1])
local maxw = 0
for i = 3, #ARGV, 2 do
  local w = tonumber(ARGV[i])
  if w > maxw then maxw = w end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - maxw)
for i = 3, #ARGV, 2 do
  if redis.call('ZCOUNT', KEYS[1], '(' .. (now - tonumber(ARGV[i])), '+inf') >= tonumber(ARGV[i+1]) then
    return 0
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], maxw)
return 1
`

// rate is one rule of the workload: Limit per Window.
type rate struct {
	name   string
	limit  int64
	window time.Duration
}

// rates returns the workload's first n rules (n = 1, 2 or 4): one rule is
// 15/min; more are 5/s, 15/min, 30/h, 50/24h, as
// testdata/bench-policies.yaml.
func rates(n int) []rate {
	if n == 1 {
		return []rate{{"m", 15, time.Minute}}
	}
	all := []rate{{"s", 5, time.Second}, {"m", 15, time.Minute}, {"h", 30, time.Hour}, {"d", 50, 24 * time.Hour}}
	return all[:n]
}

// gcraBurst is the burst of the GCRA rules, as testdata/bench-policies.yaml
// (redis_rate's Burst is the bucket: gcraBurst+1).
const gcraBurst = 4

// decide makes one decision for subject i; the bool is whether it allowed.
type decide func(ctx context.Context, rng *rand.Rand, i int) (bool, error)

// run is one measured configuration.
type run struct {
	name   string
	rules  int
	decide decide
}

type config struct {
	addr              string
	workers, subjects int
	duration          time.Duration
	rounds            int
	maxDecisions      int64
	only              string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "redis", "", "Redis address on 127.0.0.1 (default: start a redis-server on a free port)")
	flag.IntVar(&cfg.workers, "workers", 64, "concurrent workers")
	flag.IntVar(&cfg.subjects, "subjects", 100000, "distinct subjects")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "length of each measured run")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds (every other one in reverse order); figures are medians")
	flag.Int64Var(&cfg.maxDecisions, "max", 5_000_000, "stop a run after this many decisions")
	flag.StringVar(&cfg.only, "only", "", `"freqcap": only raw(R) and freqcap's runs (for servers the peers are not about)`)
	flag.Parse()
	if err := mainErr(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func mainErr(cfg config, w io.Writer) error {
	if cfg.workers < 1 || cfg.subjects < 1 || cfg.rounds < 1 || cfg.duration <= 0 || cfg.maxDecisions < 1 {
		return errors.New("workers, subjects, rounds, duration and max must be > 0")
	}
	ctx := context.Background()
	own := cfg.addr == ""
	if own {
		addr, stop, err := startRedis()
		if err != nil {
			return err
		}
		defer stop()
		cfg.addr = addr
	} else if host, _, err := net.SplitHostPort(cfg.addr); err != nil || host != "127.0.0.1" {
		return fmt.Errorf("-redis %q: only 127.0.0.1 addresses", cfg.addr)
	}
	o := redis.NewClientOptions(cfg.addr)
	o.PoolSize, o.MinIdleConns = cfg.workers, cfg.workers
	c := goredis.NewUniversalClient(o)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", cfg.addr, err)
	}
	defer func() {
		n, err := deleteKeys(context.WithoutCancel(ctx), c, "peers-*")
		fmt.Fprintf(os.Stderr, "cleanup: deleted %d keys under peers-*: %v\n", n, err)
	}()

	version := "?"
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "redis_version:"); ok {
				version = v
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "peers: redis %s at %s, %d workers, %d subjects (random), %v per run (at most %d decisions), %d rounds, %s, load average at start %s\n",
		version, cfg.addr, cfg.workers, cfg.subjects, cfg.duration, cfg.maxDecisions, cfg.rounds,
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(strings.Fields(string(load))[:3], " "))

	runs, err := buildRuns(c, cfg, w)
	if err != nil {
		return err
	}
	// Warm up: one decision per run (loads the scripts).
	for _, r := range runs {
		if _, err := r.decide(ctx, rand.New(rand.NewPCG(1, 2)), 0); err != nil {
			return fmt.Errorf("warm-up %s: %w", r.name, err)
		}
	}
	rps := make([][]float64, len(runs)) // [run][round]
	for round := range cfg.rounds {
		order := make([]int, len(runs))
		for i := range order {
			order[i] = i
		}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			v, errs, err := measure(ctx, cfg, runs[i].decide)
			if err != nil {
				return fmt.Errorf("%s: %d errors, the first: %w", runs[i].name, errs, err)
			}
			rps[i] = append(rps[i], v)
			fmt.Fprintf(os.Stderr, "round %d/%d %-28s %9.0f decisions/s\n", round+1, cfg.rounds, runs[i].name, v)
		}
	}
	raw := map[int]int{} // rules → index of raw(R)
	for i, r := range runs {
		if strings.HasPrefix(r.name, "raw(") {
			raw[r.rules] = i
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| run | rules | decisions/s | ÷ raw(R) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for i, r := range runs {
		ratios := make([]float64, cfg.rounds)
		for k := range ratios {
			ratios[k] = rps[i][k] / rps[raw[r.rules]][k]
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.2f |\n", r.name, r.rules, median(rps[i]), median(ratios))
	}
	return nil
}

// buildRuns returns the runs measured, in order.
func buildRuns(c goredis.UniversalClient, cfg config, w io.Writer) ([]run, error) {
	ids := make([]string, cfg.subjects)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	var runs []run
	rawScript := goredis.NewScript(scripts.Raw)
	for _, n := range []int{1, 2, 4} {
		if n == 2 && cfg.only == "freqcap" {
			continue
		}
		keys := make([][]string, cfg.subjects)
		for i := range keys {
			for k := range n {
				keys[i] = append(keys[i], "peers-raw"+strconv.Itoa(n)+":{"+ids[i]+"}:"+strconv.Itoa(k))
			}
		}
		runs = append(runs, run{fmt.Sprintf("raw(%d)", n), n, func(ctx context.Context, _ *rand.Rand, i int) (bool, error) {
			return true, rawScript.Run(ctx, c, keys[i], 86400000).Err()
		}})
	}

	lim := sdk.New(redis.New(c, nil), sdk.WithPrefix("peers-fq"))
	if d, err := lim.Describe(context.Background()); err == nil {
		fmt.Fprintf(w, "freqcap's strategies:")
		for _, a := range []driver.Algorithm{driver.FixedWindow, driver.SlidingWindow, driver.GCRA, driver.SlidingLog} {
			fmt.Fprintf(w, " %s %s;", a, d.Strategies[a].Name)
		}
		fmt.Fprintln(w)
	}
	algs := []struct {
		name string
		rule func(r rate) sdk.Rule
	}{
		{"fixed window", func(r rate) sdk.Rule { return sdk.FixedWindow(r.name, r.limit, r.window) }},
		{"sliding window", func(r rate) sdk.Rule { return sdk.SlidingWindow(r.name, r.limit, r.window) }},
		{"GCRA", func(r rate) sdk.Rule { return sdk.GCRA(r.name, r.limit, r.window, gcraBurst) }},
		{"sliding log", func(r rate) sdk.Rule { return sdk.SlidingLog(r.name, r.limit, r.window) }},
	}
	for _, a := range algs {
		ns := []int{1, 4}
		if a.name == "sliding log" && cfg.only != "freqcap" {
			ns = []int{1, 2, 4} // beside the articles' ZSET log at each
		}
		for _, n := range ns {
			var rules []sdk.Rule
			for _, r := range rates(n) {
				rules = append(rules, a.rule(r).By("user"))
			}
			p, err := sdk.NewPolicy(strings.ReplaceAll(a.name, " ", "-")+"-"+strconv.Itoa(n), rules)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", a.name, err)
			}
			runs = append(runs, run{"freqcap " + a.name, n, func(ctx context.Context, _ *rand.Rand, i int) (bool, error) {
				d, err := lim.Allow(ctx, p, sdk.Subject{"user": ids[i]})
				return d.Allowed, err
			}})
		}
	}
	if cfg.only == "freqcap" {
		return runs, nil
	}

	for _, n := range []int{1, 2, 4} {
		var ls []*limiter.Limiter
		for _, r := range rates(n) {
			store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "peers-ulule" + strconv.Itoa(n) + "-" + r.name})
			if err != nil {
				return nil, fmt.Errorf("ulule store: %w", err)
			}
			ls = append(ls, limiter.New(store, limiter.Rate{Period: r.window, Limit: r.limit}))
		}
		runs = append(runs, run{"ulule/limiter (fixed window)", n, func(ctx context.Context, _ *rand.Rand, i int) (bool, error) {
			for _, l := range ls {
				lc, err := l.Get(ctx, ids[i])
				if err != nil || lc.Reached {
					return false, err
				}
			}
			return true, nil
		}})
	}
	rr := redis_rate.NewLimiter(c)
	for _, n := range []int{1, 2, 4} {
		var keys [][]string // [subject][rule]
		var limits []redis_rate.Limit
		for _, r := range rates(n) {
			limits = append(limits, redis_rate.Limit{Rate: int(r.limit), Burst: gcraBurst + 1, Period: r.window})
		}
		keys = make([][]string, cfg.subjects)
		for i := range keys {
			for _, r := range rates(n) {
				keys[i] = append(keys[i], "peers-rr"+strconv.Itoa(n)+"-"+r.name+":"+ids[i])
			}
		}
		runs = append(runs, run{"redis_rate (GCRA)", n, func(ctx context.Context, _ *rand.Rand, i int) (bool, error) {
			for k, l := range limits {
				res, err := rr.Allow(ctx, keys[i][k], l)
				if err != nil || res.Allowed == 0 {
					return false, err
				}
			}
			return true, nil
		}})
	}
	zs := goredis.NewScript(zsetLog)
	for _, n := range []int{1, 2, 4} {
		var args []any
		for _, r := range rates(n) {
			args = append(args, r.window.Milliseconds(), r.limit)
		}
		runs = append(runs, run{"ZSET + ZCOUNT per rule (sliding log)", n, func(ctx context.Context, rng *rand.Rand, i int) (bool, error) {
			now := time.Now().UnixMilli()
			a := append([]any{now, strconv.FormatInt(now, 10) + "-" + strconv.FormatUint(rng.Uint64(), 36)}, args...)
			v, err := zs.Run(ctx, c, []string{"peers-zset" + strconv.Itoa(n) + ":" + ids[i]}, a...).Int()
			return v == 1, err
		}})
	}
	return runs, nil
}

// measure runs d on cfg.workers workers, each on random subjects, for
// cfg.duration or cfg.maxDecisions decisions, and returns decisions/s,
// the number of errors and the first.
func measure(ctx context.Context, cfg config, d decide) (float64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.duration+30*time.Second)
	defer cancel()
	var n, errs atomic.Int64
	var first error
	var once sync.Once
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for time.Now().Before(deadline) && n.Load() < cfg.maxDecisions {
				if _, err := d(ctx, rng, rng.IntN(cfg.subjects)); err != nil {
					errs.Add(1)
					once.Do(func() { first = err })
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), errs.Load(), first
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// startRedis starts a redis-server on a free port of 127.0.0.1, without
// persistence, and returns its address and a function that stops it.
func startRedis() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start redis: free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis: %w", err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("start redis on %s: no answer to PING", addr)
		}
		time.Sleep(50 * time.Millisecond) // polling a server until a deadline
	}
}

// deleteKeys deletes the keys matching pattern (SCAN, UNLINK).
func deleteKeys(ctx context.Context, c goredis.UniversalClient, pattern string) (int, error) {
	n := 0
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := c.Unlink(ctx, batch...).Err()
		n += len(batch)
		batch = batch[:0]
		return err
	}
	for it.Next(ctx) {
		if batch = append(batch, it.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := it.Err(); err != nil {
		return n, err
	}
	return n, flush()
}
