package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/console"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/internal/lograte"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
	"github.com/freqcap/freqcap/sdk/prom"
	"github.com/freqcap/freqcap/serve"
)

const serveUsage = `Usage: freqcap serve [flags]

Serves decisions over the network (docs/SERVE.md): gRPC, gRPC-Web and
HTTP/JSON from one schema (proto/freqcap/v1/freqcap.proto), plus /healthz,
/readyz (ready while the backend answers, and, with --eviction refuse, no
master may evict freqcap's keys; it gives every master's maxmemory,
maxmemory-policy and evicted_keys) and Prometheus /metrics.

With no --redis, --cluster or --sentinel, state lives in memory (lost on
exit). With --policies store, serve follows the versioned policy store kept
in the backend under --prefix (freqcap policy apply, or serve's own
PolicyService): each call is decided with the version in force, and a new
version is in force within about 2 s, without restart; an empty store
serves no policy until a version is applied. With Redis, concurrent calls
share scripts (--coalesce). Every consuming decision is recorded for the
console's fleet charts (--recorder).
On SIGTERM or SIGINT it refuses new calls, finishes those in flight and
exits.

Callers, each "name:secret:grant[;grant…]" with a grant
"op[,op…]@policy[,policy…]", ops take, peek, reserve, inspect, reset, admin
or * (all but admin: overrides, identity links and policy-store writes are
only granted by name), policies by name or *, e.g.
"sender:S3cretS3cret:take,peek@push", "support:An0therOne:*@*" and
"ops:Th1rdOne1:admin@*". Secrets are at least 8 bytes, no two alike.
  --token CREDENTIAL (repeatable), or FREQCAP_SERVE_TOKENS (credentials
  separated by white space; the flag wins). Prefer the environment: flags
  show up in ps, and help output never shows either.
Without credentials freqcap serve listens on loopback only and answers
loopback clients only, all of them allowed everything but admin (as
"local": overrides, identity links and policy-store writes need a
credential).
Failed credentials lock the client's address out after 5: 1s, 2s, 4s …
at most 5m (resource_exhausted, Retry-After).

OpenTelemetry traces and metrics of every call go to an OTLP/HTTP
receiver with --otlp-endpoint URL (or $OTEL_EXPORTER_OTLP_ENDPOINT); off
by default.

Flags:
`

type serveFlags struct {
	addr, policies           string
	server                   serverFlags
	prefix                   string
	timeout, requestTimeout  time.Duration
	grace                    time.Duration
	maxBatch, maxRequest     int
	coalesce                 int
	waitReplicas             int
	waitTimeout              time.Duration
	recorder                 bool
	gcPercent                int
	tokens                   []string
	tlsCert, tlsKey          string
	auditFile                string
	forcePlain               bool
	modules                  bool
	forbid, logFormat, level string
	eviction                 redis.Eviction
	otlpEndpoint             string
	otlpInterval             time.Duration
	set                      map[string]bool
}

func parseServeFlags(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8081", "listen address; a non-loopback address needs credentials")
	fs.StringVar(&f.policies, "policies", "", "policy YAML `FILE`, or \"store\" to follow the policy store in the backend (freqcap policy apply; PolicyService) without restart (default: the built-in seed policies)")
	f.server.register(fs)
	fs.StringVar(&f.prefix, "prefix", keyname.DefaultPrefix, "key prefix (the console reads the same one)")
	fs.DurationVar(&f.timeout, "timeout", 500*time.Millisecond, "timeout of each backend call")
	fs.DurationVar(&f.requestTimeout, "request-timeout", serve.DefaultTimeout, "longest time one call may take, whatever the caller's deadline")
	fs.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long calls in flight may take to finish")
	fs.IntVar(&f.maxBatch, "max-batch", serve.DefaultMaxBatch, "most attempts in one TakeBatch or PeekBatch")
	fs.IntVar(&f.maxRequest, "max-request-bytes", serve.DefaultMaxRequestSize, "largest request message, in bytes")
	fs.IntVar(&f.coalesce, "coalesce", 4, "Redis: concurrent single calls share scripts, at most `N` in flight (redis.Options.Coalesce; 0: off; ignored on a cluster)")
	fs.IntVar(&f.waitReplicas, "wait-replicas", 0, "Redis: each consuming decision waits for `N` replicas' acknowledgement (WAIT, at most --wait-timeout) and says whether it came (durable); redis.Options.Durability; 0: no wait")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", redis.DefaultDurabilityTimeout, "Redis, with --wait-replicas: the wait's timeout")
	fs.IntVar(&f.gcPercent, "gc-percent", defaultGCPercent, "the Go garbage collector's target (GOGC; $GOGC wins when set and this flag is not; -1: off)")
	fs.BoolVar(&f.recorder, "recorder", true, "record consuming decisions for the console's fleet charts (fleet.Recorder)")
	fs.Func("token", "a credential `name:secret:grant[;grant…]`; repeatable (default $FREQCAP_SERVE_TOKENS)", func(v string) error {
		f.tokens = append(f.tokens, v) // checked later: the flag package would print a secret
		return nil
	})
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate `FILE` (PEM; with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS private key `FILE` (PEM; with --tls-cert)")
	fs.StringVar(&f.auditFile, "audit", "", "append an audit entry (JSON line, the console's format) for every reset, override set or deleted, identity linked or unlinked, person's zone changed, and policy version applied, to this file")
	fs.BoolVar(&f.forcePlain, "force-plain-lua", false, "Redis: use the plain Lua strategies whatever modules the server has (the default; this also overrides --module-strategies)")
	fs.BoolVar(&f.modules, "module-strategies", false, "Redis: use the per-rule module strategies where the server has TairHash, native hash-field expiry or redis-cell (slower than plain Lua: docs/MODULES.md)")
	fs.StringVar(&f.forbid, "forbid", "", "Redis: comma-separated modules never to use: tairhash, redis-cell, hfe")
	fs.Func("eviction", "Redis: on a master whose maxmemory-policy may evict freqcap's keys (any but noeviction, with a maxmemory), `warn` (the default: decide, and warn in /readyz and the console) or refuse (decide nothing, /readyz 503; redis.Options.Eviction)", func(v string) error {
		e, err := redis.ParseEviction(v)
		f.eviction = e
		return err
	})
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.level, "log-level", "info", "log level: debug (one line per call), info, warn or error")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "send OpenTelemetry traces and metrics of every call to the OTLP/HTTP receiver at this base `URL` (e.g. http://127.0.0.1:4318; default $OTEL_EXPORTER_OTLP_ENDPOINT; none: off)")
	fs.DurationVar(&f.otlpInterval, "otlp-interval", 0, "with --otlp-endpoint: export metrics every `D` (default $OTEL_METRIC_EXPORT_INTERVAL or 60s)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := f.server.check(); err != nil {
		return f, fmt.Errorf("serve: %w", err)
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return f, errors.New("serve: give both --tls-cert and --tls-key")
	}
	if f.gcPercent < -1 {
		return f, fmt.Errorf("serve: --gc-percent %d: want -1 (off) or more", f.gcPercent)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return f, fmt.Errorf("serve: --log-format %q: want text or json", f.logFormat)
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// gcTarget is the collector target serve sets: --gc-percent when given,
// else its default unless $GOGC (getenv) is set, which the runtime has
// applied already (false: leave it).
func (f serveFlags) gcTarget(getenv func(string) string) (int, bool) {
	if !f.set["gc-percent"] && getenv("GOGC") != "" {
		return 0, false
	}
	return f.gcPercent, true
}

// callers reads the credentials: the --token flags, or else
// $FREQCAP_SERVE_TOKENS (getenv).
func (f serveFlags) callers(getenv func(string) string) ([]serve.Caller, error) {
	list := getenv("FREQCAP_SERVE_TOKENS")
	if f.set["token"] {
		list = strings.Join(f.tokens, " ")
	}
	cs, err := serve.ParseCallers(list)
	if err != nil {
		return nil, fmt.Errorf("serve: --token / FREQCAP_SERVE_TOKENS: %w", err)
	}
	return cs, nil
}

func (f serveFlags) logger(w io.Writer) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(f.level)); err != nil {
		lv = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: lv}
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// defaultGCPercent is serve's garbage collector target: its live heap is
// a few MB and every call allocates, so Go's default GOGC=100 collects
// often; 400 costs tens of MB more and a fifth less CPU per decision
// (docs/SERVE.md, "In production", measured).
const defaultGCPercent = 400

func runServe(args []string) error {
	f, err := parseServeFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	log := f.logger(os.Stderr)
	if n, ok := f.gcTarget(os.Getenv); ok {
		debug.SetGCPercent(n)
	}
	callers, err := f.callers(os.Getenv)
	if err != nil {
		return err
	}
	if err := serve.CheckAddr(f.addr, len(callers) > 0); err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return fmt.Errorf("serve: TLS: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	fromStore := f.policies == "store"
	var policies []*sdk.Policy
	switch {
	case fromStore:
	case f.policies != "":
		policies, err = policyfile.LoadFile(f.policies)
	default:
		policies, err = seed.Policies()
	}
	if err != nil {
		return fmt.Errorf("serve: policies: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	backend, ready, closeBackend, err := serveBackend(ctx, f)
	if err != nil {
		return err
	}
	defer closeBackend()

	// One line per kind of failure every lograte.Every, as in the console;
	// go-redis's own lines go through the same limit.
	rate := lograte.New(time.Now, lograte.Every)
	limited := slog.New(lograte.NewHandler(log.Handler(), rate))
	if f.server.given() {
		goredis.SetLogger(lograte.Printer{Log: log, Lim: rate, Msg: "redis client"})
		defer goredis.SetLogger(quietRedis{})
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	col := prom.New(nil)
	reg.MustRegister(col)
	opts := []sdk.Option{sdk.WithPrefix(f.prefix), sdk.WithTimeout(f.timeout), sdk.WithObserver(col.Observe)}
	var rec *fleet.Recorder
	if f.recorder {
		rec, err = fleet.NewRecorder(backend, &fleet.Options{Prefix: f.prefix, OnError: func(err error) {
			limited.Warn("recorder: statistics not flushed", "err", err)
		}})
		if err != nil {
			return fmt.Errorf("serve: recorder: %w", err)
		}
		rec.Announce(policies...)
		defer rec.Close() // after the server stopped: flushes the last counts
		opts = append(opts, sdk.WithObserver(rec.Observe))
	}
	lim := sdk.New(backend, opts...)
	desc, err := describeBackend(ctx, lim, log)
	if err != nil {
		return fmt.Errorf("serve: backend: %w", err)
	}

	var tel *otlp
	if endpoint := f.otlpEndpoint; endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		if endpoint == "" {
			endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if tel, err = newOTLP(ctx, endpoint, f.otlpInterval); err != nil {
			return err
		}
		log.Info("serve: OpenTelemetry traces and metrics to an OTLP receiver", "endpoint", endpoint)
		defer func() {
			// After the server stopped: the last spans and metrics.
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tel.shutdown(sctx); err != nil {
				log.Warn("serve: OpenTelemetry: the last export failed", "err", err)
			}
		}()
	}

	audit, closeAudit, err := openAudit(f.auditFile, log)
	if err != nil {
		return err
	}
	defer closeAudit()

	var follow *storeFollower
	if fromStore {
		st := policystore.New(backend, policystore.WithPrefix(f.prefix), policystore.WithTimeout(f.timeout))
		follow, err = followServeStore(ctx, st, log, rec)
		if err != nil {
			return fmt.Errorf("serve: policy store: %w", err)
		}
		defer follow.close()
	}

	cfg := serve.Config{
		Limiter:        lim,
		Policies:       policies,
		Callers:        callers,
		Audit:          auditTo(audit, len(callers) > 0),
		Ready:          ready,
		Registry:       reg,
		Logger:         log,
		MaxBatch:       f.maxBatch,
		MaxRequestSize: f.maxRequest,
		Timeout:        f.requestTimeout,
		TLS:            tlsCfg,
	}
	if tel != nil {
		cfg.TracerProvider, cfg.MeterProvider = tel.tp, tel.mp
	}
	if follow != nil {
		cfg.Live, cfg.Store = follow.current, follow.st
	}
	srv, err := serve.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	scheme, auth := "http", "auth off (loopback only)"
	if tlsCfg != nil {
		scheme = "https"
	}
	if len(callers) > 0 {
		auth = fmt.Sprintf("%d credential(s)", len(callers))
	}
	served := fmt.Sprintf("%d policies", len(policies))
	if follow != nil {
		var n int64
		if cur := follow.current(); cur != nil {
			n = cur.Version
		}
		served = fmt.Sprintf("policy store version %d", n)
	}
	fmt.Fprintf(os.Stderr, "freqcap serve on %s://%s (%s backend, %s, %s)\n", scheme, ln.Addr(), desc.Name, auth, served)

	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info("serve: shutting down: refusing new calls, finishing those in flight", "grace", f.grace)
	sctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; err == nil {
		err = serr
	}
	log.Info("serve: stopped")
	return err
}

// storeFollower follows the policy store for serve (--policies store):
// its current version, or no policies while the store is empty (it then
// tries again every policystore.DefaultPoll until a version is applied).
// Each version is announced by the recorder with its number.
type storeFollower struct {
	st     *policystore.Store
	live   atomic.Pointer[policystore.Live]
	cancel context.CancelFunc
	done   chan struct{} // closed when no goroutine of its own runs
}

func followServeStore(ctx context.Context, st *policystore.Store, log *slog.Logger, rec *fleet.Recorder) (*storeFollower, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &storeFollower{st: st, cancel: cancel, done: make(chan struct{})}
	announce := func(s *policystore.Snapshot) {
		log.Info("serve: policy store version in force", "version", s.Version, "by", s.By, "policies", len(s.Policies))
		if rec != nil {
			rec.SetPolicyVersion(s.Version)
			rec.Announce(s.Policies...)
		}
	}
	opts := policystore.WatchOptions{
		OnChange: announce,
		OnError: func(err error) {
			log.Warn("serve: policy store: a version could not be read or loaded (the one in force is kept)", "err", err)
		},
	}
	l, err := st.Watch(ctx, opts)
	if err == nil {
		f.live.Store(l)
		announce(l.Current())
		close(f.done)
		return f, nil
	}
	if !errors.Is(err, policystore.ErrNoPolicyVersion) {
		cancel()
		return nil, err
	}
	log.Warn("serve: the policy store is empty: no policy is served until a version is applied (freqcap policy apply, or PolicyService)")
	go func() {
		defer close(f.done)
		t := time.NewTicker(policystore.DefaultPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			l, err := st.Watch(ctx, opts)
			if err == nil {
				f.live.Store(l)
				announce(l.Current())
				return
			}
			if !errors.Is(err, policystore.ErrNoPolicyVersion) && ctx.Err() == nil {
				opts.OnError(err)
			}
		}
	}()
	return f, nil
}

// current is serve.Config.Live: the version in force (none yet: no
// policies, version 0).
func (f *storeFollower) current() *policystore.Snapshot {
	l := f.live.Load()
	if l == nil {
		return nil
	}
	return l.Current()
}

// close stops following and waits for the goroutines to end.
func (f *storeFollower) close() {
	f.cancel()
	<-f.done
	if l := f.live.Load(); l != nil {
		l.Close()
	}
}

// auditTo records serve's resets, override changes, changes of identity
// links and zones, and policy versions in the console's audit log
// format, so that `freqcap console --audit FILE` can show them.
func auditTo(a *console.AuditLog, withCredentials bool) func(serve.AuditEntry) error {
	via := "none"
	if withCredentials {
		via = "token"
	}
	return func(e serve.AuditEntry) error {
		action, outcome := e.Action, e.Outcome
		if action == "" {
			action = serve.ActionReset
		}
		if e.Detail != "" {
			outcome += " (" + e.Detail + ")"
		}
		return a.Record(console.AuditEntry{
			At: e.At, Actor: e.Caller + " (freqcap serve)", Name: e.Caller, Role: "serve", Via: via,
			Action: action, Policy: e.Policy, Subject: e.Subject, Rules: e.Rules,
			Outcome: outcome, Remote: e.Remote,
		})
	}
}

// serveBackend builds the backend the flags ask for, the readiness probe
// (nil for memory: always ready) and the closer. Redis gets coalescing.
func serveBackend(ctx context.Context, f serveFlags) (driver.Backend, func(context.Context) error, func(), error) {
	if !f.server.given() {
		return memory.New(nil), nil, func() {}, nil
	}
	forbid, err := parseForbid(f.forbid)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	ro := &redis.Options{Detect: capability.Config{ForcePlainLua: f.forcePlain, ModuleStrategies: f.modules, Forbid: forbid}, Coalesce: serveCoalesce(f.coalesce),
		Durability: redis.Durability{Replicas: f.waitReplicas, Timeout: f.waitTimeout}, Eviction: f.eviction}
	c := goredis.NewUniversalClient(f.server.options())
	if err := connect(ctx, c, f.server); err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	rb := redis.New(c, ro)
	return rb, rb.Ready, func() { c.Close() }, nil
}

// serveCoalesce is redis.Options.Coalesce for --coalesce n: 0 turns
// coalescing off (the option's own 0 would mean its default).
func serveCoalesce(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
