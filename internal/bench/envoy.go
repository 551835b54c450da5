package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/freqcap/freqcap/backends/redis"
	rlcommon "github.com/freqcap/freqcap/gen/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/freqcap/freqcap/gen/envoy/service/ratelimit/v3"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// EnvoyConfig is one run of the comparison with Envoy's rate-limit
// service (RunEnvoy). The zero value of a field means its default.
type EnvoyConfig struct {
	// Freqcap is the freqcap binary whose `serve` is measured, run with
	// its default flags but --addr, --redis and --policies. Required.
	Freqcap string
	// EnvoyBin is Envoy's rate-limit service binary (EnvoyRLSPackage at
	// EnvoyRLSVersion; EnsureEnvoyRLS builds it). Required.
	EnvoyBin string
	// RedisServer is the redis-server binary each service gets its own
	// server from (default: redis-server in PATH).
	RedisServer string
	// Limits are the numbers of fixed windows R compared, each of 1 to 4
	// (default 1 and 4).
	Limits []int
	// Workers concurrent callers (default 64) over Conns gRPC connections
	// (default 4), each one call at a time, on Users users (default
	// 100000).
	Workers, Conns, Users int
	// Duration is each measured run (default 5s), after Warmup (default
	// 1s; 0: none).
	Duration, Warmup time.Duration
	// Rounds alternates the services this many times (default 1), every
	// other round in reverse order.
	Rounds int
	// Log receives the services' own output (default: discarded).
	Log io.Writer
}

// envoyWindow is one fixed window of the comparison: Envoy's unit and
// descriptor key, freqcap's rule name and window.
type envoyWindow struct {
	key, unit, window string
	d                 time.Duration
}

// envoyWindows are the fixed windows of the comparison, by preference:
// R of them are the first R, the hour first. The hour is the window
// whose counts are checked after each run (it outlives a run, where the
// seconds' keys may have expired by then).
var envoyWindows = []envoyWindow{
	{"h", "hour", "1h", time.Hour},
	{"d", "day", "24h", 24 * time.Hour},
	{"m", "minute", "1m", time.Minute},
	{"s", "second", "1s", time.Second},
}

// windowsOf are the R windows of the comparison, shortest first.
func windowsOf(r int) []envoyWindow {
	ws := slices.Clone(envoyWindows[:r])
	slices.SortFunc(ws, func(a, b envoyWindow) int { return int(a.d - b.d) })
	return ws
}

// envoyLimit is every window's limit: no decision of a run is denied.
const envoyLimit = 1_000_000_000

// envoyDomain is the Envoy domain and the freqcap policy of R windows.
func envoyDomain(r int) string { return "r" + strconv.Itoa(r) }

func (cfg EnvoyConfig) withDefaults() (EnvoyConfig, error) {
	if cfg.Freqcap == "" || cfg.EnvoyBin == "" {
		return cfg, errors.New("bench: the Envoy comparison needs the freqcap binary and Envoy's rate-limit service binary")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Workers, 64)
	def(&cfg.Conns, 4)
	def(&cfg.Users, 100000)
	def(&cfg.Rounds, 1)
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if len(cfg.Limits) == 0 {
		cfg.Limits = []int{1, 4}
	}
	if cfg.RedisServer == "" {
		cfg.RedisServer = "redis-server"
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, r := range cfg.Limits {
		if r < 1 || r > len(envoyWindows) {
			return cfg, fmt.Errorf("bench: %d limits: the comparison has 1 to %d", r, len(envoyWindows))
		}
	}
	if cfg.Workers < 1 || cfg.Conns < 1 || cfg.Users < 1 || cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Rounds < 1 {
		return cfg, errors.New("bench: workers, connections, users and rounds must be positive, duration and warm-up >= 0")
	}
	return cfg, nil
}

// rlsService is one side of the comparison: a service process on its own
// redis-server, and how a request of R limits is put to it.
type rlsService struct {
	name    string
	proc    *process // the service
	redis   *process // its redis-server
	rdb     *goredis.Client
	conns   []*grpc.ClientConn
	request func(r int, user string) *rlsv3.RateLimitRequest
	// counted returns how many units the hour window of R holds in Redis
	// for users (those the runs touched).
	counted func(ctx context.Context, r int, users []string) (int64, error)
	shape   func(r int) string
}

func (s *rlsService) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	s.proc.stop()
	s.redis.stop()
}

// rlsResult is one measured run.
type rlsResult struct {
	service string
	r       int
	n       int64 // decisions
	allowed int64
	errs    int64
	err     error
	elapsed time.Duration
	lat     hist
	svcCPU  float64 // µs per decision
	rdsCPU  float64 // µs per decision
	cmds    float64 // Redis commands per decision (INFO commandstats: scripts, the commands they call, commands sent alone or pipelined)
	scripts float64 // EVALSHA/EVAL per decision
	genCPU  float64 // the load generator's (this process's) CPU, µs per decision
	check   string
}

func (r *rlsResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r *rlsResult) print(w io.Writer) {
	fmt.Fprintf(w, "%s, R=%d: %d decisions in %v = %.0f decisions/s; per call p50 %v, p99 %v; allowed %d, over limit %d, errors %d; service CPU %.1f µs per decision; Redis CPU %.1f µs per decision; Redis commands %.2f per decision (%.2f of them scripts, the rest pipelined or called by the scripts); load generator CPU %.1f µs per decision\n",
		r.service, r.r, r.n, r.elapsed.Round(time.Millisecond), r.rate(), r.lat.quantile(0.5), r.lat.quantile(0.99),
		r.allowed, r.n-r.allowed-r.errs, r.errs, r.svcCPU, r.rdsCPU, r.cmds, r.scripts, r.genCPU)
	if r.err != nil {
		fmt.Fprintf(w, "  first error: %v\n", r.err)
	}
	fmt.Fprintf(w, "  check: %s\n", r.check)
}

// RunEnvoy compares Envoy's own rate-limit service (cfg.EnvoyBin) with
// freqcap serve (cfg.Freqcap serve, its default configuration) on Envoy's
// rate-limit API: each service on a redis-server of its own on loopback,
// both loaded by the same generator (ShouldRateLimit over gRPC, every
// decision allowed), for each R of cfg.Limits: Envoy's service with R
// descriptors of one fixed window each, serve with one descriptor of a
// policy of R fixed windows. It prints each run, with the service's and
// its Redis's CPU per decision, and a table of the rounds. After each
// run it checks that the hour window's counts in Redis equal the
// decisions allowed, and fails when they do not.
func RunEnvoy(ctx context.Context, cfg EnvoyConfig, w io.Writer) (err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "freqcap-bench-envoy-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	envoy, err := startEnvoyRLS(ctx, cfg, filepath.Join(dir, "envoy"))
	if err != nil {
		return err
	}
	defer envoy.close()
	fq, err := startFreqcapServe(ctx, cfg, filepath.Join(dir, "serve"))
	if err != nil {
		return err
	}
	defer fq.close()
	services := []*rlsService{envoy, fq}
	version, _ := redisVersion(ctx, envoy.rdb)
	fmt.Fprintf(w, "freqcap bench -envoy: %d callers over %d gRPC connections per service, %d users, every decision allowed; %v warm-up, then %v measured per run; %d round(s), alternating; each service on a redis-server %s of its own on loopback\n",
		cfg.Workers, cfg.Conns, cfg.Users, cfg.Warmup, cfg.Duration, cfg.Rounds, version)
	fmt.Fprintf(w, "%s: %s@%s (%s), its defaults but REDIS_SOCKET_TYPE, REDIS_URL, USE_STATSD=false, the runtime directory, ports and LOG_LEVEL; %s\n",
		envoy.name, EnvoyRLSPackage, EnvoyRLSVersion, cfg.EnvoyBin, envoyShape(cfg.Limits))
	fmt.Fprintf(w, "%s: %s %s (its default flags otherwise); %s\n", fq.name, cfg.Freqcap, strings.Join(fq.proc.cmd.Args[1:], " "), serveShape(cfg.Limits))

	type key struct {
		svc string
		r   int
	}
	got := map[key][]*rlsResult{}
	for round := range cfg.Rounds {
		if cfg.Rounds > 1 {
			fmt.Fprintf(w, "round %d/%d\n", round+1, cfg.Rounds)
		}
		order := slices.Clone(services)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, r := range cfg.Limits {
			for _, s := range order {
				res, err := rlsRun(ctx, cfg, s, r)
				if err != nil {
					return err
				}
				res.print(w)
				got[key{s.name, r}] = append(got[key{s.name, r}], res)
				if res.errs > 0 || res.n != res.allowed+res.errs || !strings.HasPrefix(res.check, "ok") {
					return fmt.Errorf("bench: %s, R=%d: %d errors, %d decisions over limit, check %s", s.name, r, res.errs, res.n-res.allowed-res.errs, res.check)
				}
			}
			e, f := got[key{envoy.name, r}], got[key{fq.name, r}]
			a, b := e[len(e)-1], f[len(f)-1]
			fmt.Fprintf(w, "ratio serve / Envoy, R=%d: decisions/s %.2f; service CPU per decision %.2f; Redis CPU per decision %.2f\n",
				r, b.rate()/a.rate(), b.svcCPU/a.svcCPU, b.rdsCPU/a.rdsCPU)
		}
	}

	// The table: each cell lists the rounds' figures, in order (CPU:
	// each R's lowest–highest).
	perR := func(label string) string {
		var s []string
		for _, r := range cfg.Limits {
			s = append(s, fmt.Sprintf("R=%d", r))
		}
		return label + " (" + strings.Join(s, " / ") + ")"
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| |")
	for _, r := range cfg.Limits {
		fmt.Fprintf(w, " decisions/s, R=%d |", r)
	}
	fmt.Fprintf(w, " %s | %s |\n", perR("service CPU per decision"), perR("Redis CPU per decision"))
	fmt.Fprint(w, "|---|")
	for range cfg.Limits {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---:|---:|")
	for _, s := range services {
		fmt.Fprintf(w, "| %s |", s.name)
		var svc, rds []string
		for _, r := range cfg.Limits {
			rs := got[key{s.name, r}]
			fmt.Fprintf(w, " %s |", joinFigures(rs, func(x *rlsResult) float64 { return x.rate() }, "%.0f"))
			svc = append(svc, spanFigures(rs, func(x *rlsResult) float64 { return x.svcCPU }))
			rds = append(rds, spanFigures(rs, func(x *rlsResult) float64 { return x.rdsCPU }))
		}
		fmt.Fprintf(w, " %s µs | %s µs |\n", strings.Join(svc, " / "), strings.Join(rds, " / "))
	}
	fmt.Fprint(w, "| ratio serve / Envoy |")
	var svc, rds []string
	for _, r := range cfg.Limits {
		e, f := got[key{envoy.name, r}], got[key{fq.name, r}]
		var rs []string
		var sv, rd []float64
		for i := range e {
			rs = append(rs, fmt.Sprintf("%.2f", f[i].rate()/e[i].rate()))
			sv = append(sv, f[i].svcCPU/e[i].svcCPU)
			rd = append(rd, f[i].rdsCPU/e[i].rdsCPU)
		}
		fmt.Fprintf(w, " %s |", strings.Join(rs, " / "))
		svc, rds = append(svc, span(sv, "%.2f")), append(rds, span(rd, "%.2f"))
	}
	fmt.Fprintf(w, " %s | %s |\n", strings.Join(svc, " / "), strings.Join(rds, " / "))
	return nil
}

func envoyShape(limits []int) string {
	var parts []string
	for _, r := range limits {
		var units []string
		for _, win := range windowsOf(r) {
			units = append(units, win.unit)
		}
		parts = append(parts, fmt.Sprintf("R=%d: %d descriptor(s), one fixed window each (%s)", r, r, strings.Join(units, ", ")))
	}
	return strings.Join(parts, "; ")
}

func serveShape(limits []int) string {
	var parts []string
	for _, r := range limits {
		var ws []string
		for _, win := range windowsOf(r) {
			ws = append(ws, win.window)
		}
		parts = append(parts, fmt.Sprintf("R=%d: one descriptor, policy %q of %d fixed window(s) (%s)", r, envoyDomain(r), r, strings.Join(ws, ", ")))
	}
	return strings.Join(parts, "; ")
}

func joinFigures(rs []*rlsResult, f func(*rlsResult) float64, format string) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf(format, f(r)))
	}
	return strings.Join(s, " / ")
}

func spanFigures(rs []*rlsResult, f func(*rlsResult) float64) string {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return span(v, "%.0f")
}

// span is "min–max" of v (one figure when they round alike).
func span(v []float64, format string) string {
	if len(v) == 0 {
		return "—"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	a, b := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if a == b {
		return a
	}
	return a + "–" + b
}

// rlsRun runs the load of R limits against s: a warm-up, a measured run,
// then the check of the counts in Redis, and FLUSHALL (each run starts on
// an empty server).
func rlsRun(ctx context.Context, cfg EnvoyConfig, s *rlsService, r int) (*rlsResult, error) {
	touched := make([]atomic.Bool, cfg.Users)
	users := make([]string, cfg.Users)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	var allowed atomic.Int64               // warm-up and run
	hour := time.Now().Truncate(time.Hour) // the hour window the run starts in
	loop := func(d time.Duration, seed uint64) *rlsResult {
		res := &rlsResult{service: s.name, r: r}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			stop atomic.Bool
		)
		start := time.Now()
		timer := time.AfterFunc(d, func() { stop.Store(true) })
		defer timer.Stop()
		for i := range cfg.Workers {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				conn := s.conns[i%len(s.conns)]
				rng := rand.New(rand.NewPCG(seed+uint64(i), uint64(i)*7919+1))
				var (
					h           hist
					n, ok, errs int64
					first       error
					resp        rlsv3.RateLimitResponse
				)
				for !stop.Load() {
					u := rng.IntN(cfg.Users)
					req := s.request(r, users[u])
					t0 := time.Now()
					err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", req, &resp)
					h.add(time.Since(t0))
					n++
					switch {
					case err != nil:
						errs++
						if first == nil {
							first = err
						}
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						ok++
						touched[u].Store(true)
					default:
						touched[u].Store(true) // an over-limit answer may have counted too
					}
				}
				mu.Lock()
				res.n += n
				res.allowed += ok
				res.errs += errs
				if res.err == nil {
					res.err = first
				}
				for k, v := range h {
					res.lat[k] += v
				}
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		res.elapsed = time.Since(start)
		allowed.Add(res.allowed)
		return res
	}
	if cfg.Warmup > 0 {
		loop(cfg.Warmup, 1<<32)
	}
	cmds0, err := commandStats(ctx, s.rdb)
	if err != nil {
		return nil, err
	}
	r0, _, err := serverCPU(ctx, s.rdb)
	if err != nil {
		return nil, err
	}
	s0, err := s.proc.cpu()
	if err != nil {
		return nil, err
	}
	g0 := clientCPU()
	res := loop(cfg.Duration, 1<<33)
	g1 := clientCPU()
	s1, err := s.proc.cpu()
	if err != nil {
		return nil, err
	}
	r1, _, err := serverCPU(ctx, s.rdb)
	if err != nil {
		return nil, err
	}
	cmds1, err := commandStats(ctx, s.rdb)
	if err != nil {
		return nil, err
	}
	if res.n > 0 {
		n := float64(res.n)
		res.svcCPU = (s1 - s0) * 1e6 / n
		res.rdsCPU = (r1 - r0) * 1e6 / n
		res.genCPU = (g1 - g0) * 1e6 / n
		var cmds, scripts int64
		for c, st := range cmds1 {
			d := st.calls - cmds0[c].calls
			switch c {
			case "info":
			case "evalsha", "eval":
				scripts += d
				cmds += d
			default:
				cmds += d
			}
		}
		res.cmds, res.scripts = float64(cmds)/n, float64(scripts)/n
	}
	var seen []string
	for i := range touched {
		if touched[i].Load() {
			seen = append(seen, users[i])
		}
	}
	counted, err := s.counted(ctx, r, seen)
	switch {
	case err != nil:
		res.check = "failed: " + err.Error()
	case counted == allowed.Load():
		res.check = fmt.Sprintf("ok: the hour window holds %d units in Redis over %d users = the %d decisions allowed (warm-up and run)", counted, len(seen), allowed.Load())
	case s.name == freqcapServeName && !time.Now().Truncate(time.Hour).Equal(hour):
		res.check = "ok, not checked: the run crossed an hour boundary (serve's hour window restarted)"
	default:
		res.check = fmt.Sprintf("MISMATCH: the hour window holds %d units in Redis over %d users, but %d decisions were allowed (warm-up and run)", counted, len(seen), allowed.Load())
	}
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bench: FLUSHALL after %s: %w", s.name, err)
	}
	return res, nil
}

const (
	envoyRLSName     = "envoyproxy/ratelimit"
	freqcapServeName = "freqcap serve"
)

// envoyRequest is Envoy's service's request of R limits: R descriptors,
// one per window, each keyed by the window with the user as value.
func envoyRequest(r int, user string) *rlsv3.RateLimitRequest {
	ds := make([]*rlcommon.RateLimitDescriptor, r)
	for i, win := range windowsOf(r) {
		ds[i] = &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: win.key, Value: user}}}
	}
	return &rlsv3.RateLimitRequest{Domain: envoyDomain(r), Descriptors: ds, HitsAddend: 1}
}

// serveRequest is serve's request of R limits: one descriptor, the user,
// whose policy (the domain) has the R windows.
func serveRequest(r int, user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain:      envoyDomain(r),
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}},
		HitsAddend:  1,
	}
}

// envoyConfigYAML is Envoy's service's configuration of R windows (one
// file per domain).
func envoyConfigYAML(r int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", envoyDomain(r))
	for _, win := range windowsOf(r) {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n", win.key, win.unit, envoyLimit)
	}
	return b.String()
}

// servePoliciesYAML is serve's policy file: a policy of R fixed windows
// for each R of limits.
func servePoliciesYAML(limits []int) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for _, r := range limits {
		fmt.Fprintf(&b, "  - name: %s\n    rules:\n", envoyDomain(r))
		for _, win := range windowsOf(r) {
			fmt.Fprintf(&b, "      - {name: %s, algorithm: fixed_window, limit: %d, window: %s, by: [user]}\n", win.key, envoyLimit, win.window)
		}
	}
	return b.String()
}

// envoyCounted sums the hour descriptor's counters of domain R in
// Envoy's Redis: its keys are domain_key_value_windowstart.
func envoyCounted(rdb *goredis.Client) func(context.Context, int, []string) (int64, error) {
	return func(ctx context.Context, r int, _ []string) (int64, error) {
		var total int64
		iter := rdb.Scan(ctx, 0, globQuote(envoyDomain(r)+"_"+envoyWindows[0].key+"_")+"*", 1000).Iterator()
		for iter.Next(ctx) {
			v, err := rdb.Get(ctx, iter.Val()).Int64()
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, iter.Err()
	}
}

// serveCounted sums, over users, the hour rule's count of policy R in
// serve's Redis, peeked with a limiter of its own on the same keys.
func serveCounted(rdb *goredis.Client, policies []*sdk.Policy) func(context.Context, int, []string) (int64, error) {
	lim := sdk.New(redis.New(rdb, nil))
	return func(ctx context.Context, r int, users []string) (int64, error) {
		var p *sdk.Policy
		for _, q := range policies {
			if q.Name() == envoyDomain(r) {
				p = q
			}
		}
		if p == nil {
			return 0, fmt.Errorf("no policy %q", envoyDomain(r))
		}
		var total int64
		for chunk := range slices.Chunk(users, 500) {
			as := make([]sdk.Attempt, len(chunk))
			for i, u := range chunk {
				as[i] = sdk.Attempt{Subject: sdk.Subject{"user": u}}
			}
			for _, br := range lim.PeekBatch(ctx, p, as) {
				if br.Err != nil {
					return 0, br.Err
				}
				for _, rd := range br.Decision.Rules {
					if rd.Rule == envoyWindows[0].key {
						total += rd.Used
					}
				}
			}
		}
		return total, nil
	}
}

// startEnvoyRLS starts a redis-server and Envoy's rate-limit service on
// it, configured (files and environment) under dir.
func startEnvoyRLS(ctx context.Context, cfg EnvoyConfig, dir string) (*rlsService, error) {
	s := &rlsService{name: envoyRLSName, request: envoyRequest}
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, r := range cfg.Limits {
		if err := os.WriteFile(filepath.Join(conf, envoyDomain(r)+".yaml"), []byte(envoyConfigYAML(r)), 0o644); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	var err error
	if s.redis, err = startRedis(ctx, cfg, dir); err != nil {
		return nil, err
	}
	s.rdb = goredis.NewClient(&goredis.Options{Addr: s.redis.addr})
	s.counted = envoyCounted(s.rdb)
	ports, err := freePorts(3)
	if err != nil {
		s.close()
		return nil, err
	}
	grpcPort, httpPort, debugPort := ports[0], ports[1], ports[2]
	env := []string{
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + s.redis.addr,
		"USE_STATSD=false",
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(httpPort),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(debugPort),
		"LOG_LEVEL=warn",
	}
	s.proc, err = startProcess(ctx, cfg.EnvoyBin, nil, env, cfg.Log, "envoy ratelimit: ")
	if err != nil {
		s.close()
		return nil, err
	}
	s.proc.addr = "127.0.0.1:" + strconv.Itoa(grpcPort)
	if err := s.proc.waitHTTP(ctx, "http://127.0.0.1:"+strconv.Itoa(httpPort)+"/healthcheck"); err != nil {
		s.close()
		return nil, fmt.Errorf("bench: Envoy's rate-limit service (%s) did not become healthy: %w", cfg.EnvoyBin, err)
	}
	if err := s.dial(cfg.Conns); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// startFreqcapServe starts a redis-server and `freqcap serve` on it with
// the comparison's policies, under dir.
func startFreqcapServe(ctx context.Context, cfg EnvoyConfig, dir string) (*rlsService, error) {
	s := &rlsService{name: freqcapServeName, request: serveRequest}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	file := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(file, []byte(servePoliciesYAML(cfg.Limits)), 0o644); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	policies, err := policyfile.LoadFile(file)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if s.redis, err = startRedis(ctx, cfg, dir); err != nil {
		return nil, err
	}
	s.rdb = goredis.NewClient(&goredis.Options{Addr: s.redis.addr})
	s.counted = serveCounted(s.rdb, policies)
	args := []string{"serve", "--addr", "127.0.0.1:0", "--redis", s.redis.addr, "--policies", file}
	s.proc, err = startProcess(ctx, cfg.Freqcap, args, nil, cfg.Log, "freqcap serve: ")
	if err != nil {
		s.close()
		return nil, err
	}
	addr, err := s.proc.waitLine(ctx, "freqcap serve on http://")
	if err != nil {
		s.close()
		return nil, fmt.Errorf("bench: %s serve did not start: %w", cfg.Freqcap, err)
	}
	s.proc.addr, _, _ = strings.Cut(addr, " ")
	if err := s.dial(cfg.Conns); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// dial opens n gRPC connections to the service, each connected before
// the runs.
func (s *rlsService) dial(n int) error {
	for range n {
		c, err := grpc.NewClient(s.proc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("bench: dial %s: %w", s.name, err)
		}
		c.Connect()
		s.conns = append(s.conns, c)
	}
	return nil
}

func redisVersion(ctx context.Context, rdb *goredis.Client) (string, error) {
	s, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("no redis_version")
}
