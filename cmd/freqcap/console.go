package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/console"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/demo"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/internal/lograte"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
)

const consoleUsage = `Usage: freqcap console [flags]

Serves the support console, the JSON API (/api/v1/inspect, /api/v1/reset,
/api/v1/policies, /api/v1/overrides) and Prometheus metrics
(/metrics). With --policies store it follows the backend's policy store
and its editor applies new versions.

With no --redis, --cluster or --sentinel, state lives in memory (lost on
exit); --demo adds synthetic traffic so counters move at once. Without
credentials the console listens on loopback only, answers only to loopback
host names, and everyone is an admin.

Roles: viewer reads (pages, audit log, metrics, inspect); checker reads
too (it consumed quota through POST /api/v1/check, retired: decisions are
freqcap serve's); admin may also reset subjects, set and delete per-person
overrides, and apply or roll back policy versions (forms and API, audited).

Credentials, each "name:secret:role" (the name is what the audit log
records; secrets at least 8 bytes, no two alike). Prefer the environment:
flags show up in ps, and help output never shows either.
  --token name:secret:role (repeatable), FREQCAP_TOKENS="n:s:r,n:s:r"
                                          bearer tokens, also the sign-in form
  --basic-auth, FREQCAP_BASIC_AUTH        basic-auth users "name:password:role,…"
  --admin-token, FREQCAP_ADMIN_TOKEN      one shared token each, audited as
  --checker-token, FREQCAP_CHECKER_TOKEN  shared-admin-token, shared-checker-token
  --viewer-token, FREQCAP_VIEWER_TOKEN    and shared-viewer-token
A flag given on the command line wins over its variable.

Flags:
`

// consoleFlags are the console command's settings. The credential fields
// hold what the flags gave; credentials() adds the environment's.
type consoleFlags struct {
	addr         string
	policies     string
	demo         bool
	demoRate     float64
	server       serverFlags
	prefix       string
	timeout      time.Duration
	viewerToken  string
	checkerToken string
	adminToken   string
	tokens       []string
	basicAuth    string
	auditFile    string
	forcePlain   bool
	modules      bool
	forbid       string
	set          map[string]bool // flags given on the command line
}

// maxDemoRate is the fastest --demo-rate: internal/demo decides at most
// once a millisecond.
const maxDemoRate = 1000

func parseConsoleFlags(args []string, stderr io.Writer) (consoleFlags, error) {
	var f consoleFlags
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, consoleUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address; a non-loopback address needs credentials")
	fs.StringVar(&f.policies, "policies", "", `policy YAML file, or "store": follow the backend's policy store and edit it (admins); default: the store when it holds a version, else the built-in seed policies`)
	fs.BoolVar(&f.demo, "demo", false, "generate synthetic traffic over the policies")
	fs.Float64Var(&f.demoRate, "demo-rate", 20, "demo decisions per second (above 0, at most 1000)")
	f.server.register(fs) // none given: the in-memory backend
	fs.StringVar(&f.prefix, "prefix", keyname.DefaultPrefix, "key prefix")
	fs.DurationVar(&f.timeout, "timeout", 500*time.Millisecond, "timeout of each backend call (positive)")
	// No secret is ever a flag's default: -h prints defaults, and a flag
	// error prints the usage. The environment is read after parsing.
	fs.Func("token", "a named token `name:secret:role` (role viewer, checker or admin); repeatable (default $FREQCAP_TOKENS)", func(v string) error {
		// Never fails: the flag package would print the value, a secret.
		f.tokens = append(f.tokens, v)
		return nil
	})
	fs.StringVar(&f.viewerToken, "viewer-token", "", "shared viewer token (default $FREQCAP_VIEWER_TOKEN)")
	fs.StringVar(&f.checkerToken, "checker-token", "", "shared checker token (default $FREQCAP_CHECKER_TOKEN)")
	fs.StringVar(&f.adminToken, "admin-token", "", "shared admin token (default $FREQCAP_ADMIN_TOKEN)")
	fs.StringVar(&f.basicAuth, "basic-auth", "", `basic-auth users "name:password:role,…" (default $FREQCAP_BASIC_AUTH)`)
	fs.StringVar(&f.auditFile, "audit", "", "append audit entries (JSON lines) to this file, and show its last entries after a restart")
	fs.BoolVar(&f.forcePlain, "force-plain-lua", false, "Redis: use the plain Lua strategies whatever modules the server has (the default; this also overrides --module-strategies)")
	fs.BoolVar(&f.modules, "module-strategies", false, "Redis: use the per-rule module strategies where the server has TairHash, native hash-field expiry or redis-cell (slower than plain Lua: docs/MODULES.md)")
	fs.StringVar(&f.forbid, "forbid", "", "Redis: comma-separated modules never to use: tairhash, redis-cell, hfe")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		// A stray argument is often a second credential given to one
		// --token, secret and all.
		return f, unexpectedArg("console", args, fs, "give each credential its own --token, and every flag before any other argument")
	}
	switch {
	case !(f.demoRate > 0 && f.demoRate <= maxDemoRate): // NaN too
		return f, fmt.Errorf("console: --demo-rate must be above 0 and at most %d decisions per second", maxDemoRate)
	case f.timeout <= 0:
		return f, errors.New("console: --timeout must be positive")
	}
	if err := f.server.check(); err != nil {
		return f, fmt.Errorf("console: %w", err)
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// credentials builds the console's credentials from the flags and, for
// each flag not given, its environment variable (getenv). Shared tokens
// are named after their role ("shared-admin-token"), so the audit log
// says a shared token was used rather than naming a person.
func (f consoleFlags) credentials(getenv func(string) string) ([]console.Credential, error) {
	val := func(flagName, v, env string) string {
		if f.set[flagName] {
			return v
		}
		return getenv(env)
	}
	var creds []console.Credential
	for _, sh := range []struct {
		flag, value, env string
		role             console.Role
	}{
		{"admin-token", f.adminToken, "FREQCAP_ADMIN_TOKEN", console.RoleAdmin},
		{"checker-token", f.checkerToken, "FREQCAP_CHECKER_TOKEN", console.RoleChecker},
		{"viewer-token", f.viewerToken, "FREQCAP_VIEWER_TOKEN", console.RoleViewer},
	} {
		if v := val(sh.flag, sh.value, sh.env); v != "" {
			creds = append(creds, console.Credential{Role: sh.role, Name: "shared-" + sh.role.String() + "-token", Secret: v})
		}
	}
	tokens := strings.Join(f.tokens, ",")
	if !f.set["token"] {
		tokens = getenv("FREQCAP_TOKENS")
	}
	named, err := console.ParseCredentials(tokens)
	if err != nil {
		return nil, fmt.Errorf("--token / FREQCAP_TOKENS: %w", err)
	}
	creds = append(creds, named...)
	basic, err := console.ParseCredentials(val("basic-auth", f.basicAuth, "FREQCAP_BASIC_AUTH"))
	if err != nil {
		return nil, fmt.Errorf("--basic-auth / FREQCAP_BASIC_AUTH: %w", err)
	}
	return append(creds, basic...), nil
}

func runConsole(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveConsole(ctx, args, consoleEnv{stderr: os.Stderr, getenv: os.Getenv, now: time.Now})
}

// consoleEnv is what the console command takes from its process; tests
// give their own.
type consoleEnv struct {
	stderr io.Writer           // logs and the banner
	getenv func(string) string // credentials' variables
	now    func() time.Time    // the console's and the log limiter's clock
	ready  func(net.Addr)      // nil, or called once listening
}

// serveConsole is freqcap console: it serves until ctx ends.
func serveConsole(ctx context.Context, args []string, env consoleEnv) error {
	f, err := parseConsoleFlags(args, env.stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(env.stderr, nil))
	// Lines about failures that repeat during an outage (go-redis's own,
	// the recorder's, the demo's) pass through one limiter: one line of a
	// kind every lograte.Every, with the count held back. The console
	// limits its own the same way (console.Config.Logger).
	rate := lograte.New(env.now, lograte.Every)
	limited := slog.New(lograte.NewHandler(log.Handler(), rate))
	creds, err := f.credentials(env.getenv)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	// Refuse early, before connecting anywhere.
	if err := console.CheckAddr(f.addr, len(creds) > 0); err != nil {
		return err
	}

	var policies []*sdk.Policy
	switch f.policies {
	case "", policiesStore:
		// Decided once the backend is known: the store, or the seed.
	default:
		if policies, err = policyfile.LoadFile(f.policies); err != nil {
			return fmt.Errorf("console: policies: %w", err)
		}
	}

	backend, closeBackend, err := consoleBackend(ctx, f)
	if err != nil {
		return err
	}
	defer closeBackend()
	if f.server.given() {
		goredis.SetLogger(lograte.Printer{Log: log, Lim: rate, Msg: "redis client"})
		defer goredis.SetLogger(quietRedis{})
	}

	metrics := console.NewMetrics(nil)
	// The console records its own decisions (demo traffic, inspections)
	// like any service, so that the overview's fleet charts include them.
	rec, err := fleet.NewRecorder(backend, &fleet.Options{Prefix: f.prefix, Service: console.ServiceName(), OnError: func(err error) {
		limited.Warn("recorder: statistics not flushed", "err", err)
	}})
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("console: recorder: %w", err)
	}
	opts := []sdk.Option{sdk.WithPrefix(f.prefix), sdk.WithTimeout(f.timeout), sdk.WithObserver(metrics.Observe)}
	var reader console.Fleet // nil: the backend keeps no statistics
	if rec != nil {
		defer rec.Close()
		opts = append(opts, sdk.WithObserver(rec.Observe))
		r, err := fleet.NewReader(backend, &fleet.Options{Prefix: f.prefix, Timeout: f.timeout})
		if err != nil {
			return fmt.Errorf("console: fleet reader: %w", err)
		}
		reader = r
	}
	lim := sdk.New(backend, opts...)
	desc, err := describeBackend(ctx, lim, log)
	if err != nil {
		return fmt.Errorf("console: backend: %w", err)
	}

	audit, closeAudit, err := openAudit(f.auditFile, log)
	if err != nil {
		return err
	}
	defer closeAudit()

	// The demo traffic, restarted over each new version of the store.
	traffic := &demoTraffic{}
	cfg := console.Config{
		Limiter:     lim,
		Fleet:       reader,
		Policies:    policies,
		Metrics:     metrics,
		Audit:       audit,
		Credentials: creds,
		Logger:      log,
		Now:         env.now,
		DemoUser:    demoUser(f.demo),
	}
	if policies == nil {
		store := policystore.New(backend, policystore.WithPrefix(f.prefix), policystore.WithTimeout(f.timeout))
		live, err := followStore(ctx, f, store, rec, limited, log, traffic.restart)
		if err != nil {
			return err
		}
		if live != nil {
			defer live.Close()
			cfg.Source, cfg.Store = live, store
			if r, ok := reader.(*fleet.Reader); ok {
				cfg.WhatIf = console.FleetWhatIf(r)
			}
			policies = live.Current().Policies
		} else if policies, err = seed.Policies(); err != nil {
			return fmt.Errorf("console: policies: %w", err)
		}
		cfg.Policies = policies
	}
	srv, err := console.New(cfg)
	if err != nil {
		return err
	}
	if f.demo {
		traffic.start(lim, policies, demo.Options{Rate: f.demoRate, Logger: limited})
		defer traffic.close()
	}
	// A signal ends the console: say so when it comes and once it is done.
	context.AfterFunc(ctx, func() { log.Info("console: shutting down: finishing the requests in flight") })
	defer func() {
		if ctx.Err() != nil {
			log.Info("console: stopped")
		}
	}()
	return srv.ListenAndServe(ctx, f.addr, func(a net.Addr) {
		auth := "auth off (loopback only)"
		if len(creds) > 0 {
			auth = fmt.Sprintf("%d credential(s)", len(creds))
		}
		fmt.Fprintf(env.stderr, "freqcap console on http://%s (%s backend, %s, demo %v)\n", a, desc.Name, auth, f.demo)
		if env.ready != nil {
			env.ready(a)
		}
	})
}

// openAudit returns the console's audit log: in memory only when path is
// empty, else appending to the file at path after reading back the
// entries earlier runs wrote there (the audit page survives a restart).
func openAudit(path string, log *slog.Logger) (*console.AuditLog, func(), error) {
	if path == "" {
		return console.NewAuditLog(nil, 0), func() {}, nil
	}
	af, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("console: audit log: %w", err)
	}
	audit := console.NewAuditLog(af, 0)
	n, bad, err := audit.Load(af)
	if err != nil {
		af.Close()
		return nil, nil, err
	}
	log.Info("audit log", "file", path, "entries_loaded", n, "lines_skipped", bad)
	return audit, func() { af.Close() }, nil
}

// consoleBackend builds the backend the flags ask for, and its closer. A
// Redis deployment is pinged first, so that an unreachable server or a
// wrong password reads as such (see connect).
func consoleBackend(ctx context.Context, f consoleFlags) (driver.Backend, func(), error) {
	if !f.server.given() {
		return memory.New(nil), func() {}, nil
	}
	forbid, err := parseForbid(f.forbid)
	if err != nil {
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	ro := &redis.Options{Detect: capability.Config{ForcePlainLua: f.forcePlain, ModuleStrategies: f.modules, Forbid: forbid}}
	c := goredis.NewUniversalClient(f.server.options())
	if err := connect(ctx, c, f.server); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	return redis.New(c, ro), func() { c.Close() }, nil
}

func strategies(d driver.Description) string {
	var parts []string
	for _, a := range capability.Algorithms {
		if st, ok := d.Strategies[driver.Algorithm(a)]; ok {
			parts = append(parts, a.String()+"="+st.Name)
		}
	}
	return strings.Join(parts, " ")
}

// demoUser is the user the console's demo banner links to: the demo
// traffic's hot one, or none without --demo.
func demoUser(on bool) string {
	if !on {
		return ""
	}
	return demo.Users[0]
}

// policiesStore is the --policies value that makes the console follow the
// backend's policy store.
const policiesStore = "store"

// demoTraffic is the console's --demo traffic: none until start, and
// restarted over new policies (the store's new version) once started.
type demoTraffic struct {
	mu   sync.Mutex
	d    *demo.Demo
	lim  *sdk.Limiter
	opts demo.Options
}

func (t *demoTraffic) start(lim *sdk.Limiter, ps []*sdk.Policy, opts demo.Options) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lim, t.opts = lim, opts
	t.d = demo.Start(lim, ps, opts)
}

// restart runs the traffic over ps, if it runs.
func (t *demoTraffic) restart(ps []*sdk.Policy) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.d == nil {
		return
	}
	t.d.Close()
	t.d = demo.Start(t.lim, ps, t.opts)
}

func (t *demoTraffic) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.d != nil {
		t.d.Close()
		t.d = nil
	}
}

// followStore decides whether the console follows the backend's policy
// store and, if so, returns the Live it reads (nil: it runs the seed
// policies). With --policies store it does; an empty store is given the
// seed policies as version 1 on the in-memory backend (the embedded demo)
// and is an error on Redis (apply a version first: freqcap policy apply).
// Without --policies it follows the store when the store holds a version.
// The console's own recorder announces the version it runs; onChange is
// given each new version's policies.
func followStore(ctx context.Context, f consoleFlags, st *policystore.Store, rec *fleet.Recorder, limited, log *slog.Logger, onChange func([]*sdk.Policy)) (*policystore.Live, error) {
	_, err := st.Version(ctx, 0)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		if f.policies == policiesStore {
			return nil, fmt.Errorf("console: --policies store: this backend keeps no policy store: %w", err)
		}
		return nil, nil
	case errors.Is(err, policystore.ErrNoPolicyVersion) && f.policies == "":
		return nil, nil
	case errors.Is(err, policystore.ErrNoPolicyVersion) && f.server.given():
		return nil, fmt.Errorf("console: --policies store: the policy store is empty: apply a version first (freqcap policy apply FILE)")
	case errors.Is(err, policystore.ErrNoPolicyVersion):
		plan, err := st.Plan(ctx, seed.YAML)
		if err == nil {
			_, err = st.Apply(ctx, plan, "freqcap-console", "the built-in seed policies")
		}
		if err != nil && !errors.Is(err, policystore.ErrVersionConflict) {
			return nil, fmt.Errorf("console: policy store: applying the seed policies: %w", err)
		}
	case errors.Is(err, policystore.ErrUnreadableVersion):
		// Watch starts from the newest version that loads, and says why.
	case err != nil:
		return nil, fmt.Errorf("console: policy store: %w", err)
	}
	live, err := st.Watch(ctx, policystore.WatchOptions{
		OnChange: func(snap *policystore.Snapshot) {
			log.Info("console: policy version in force", "version", snap.Version, "by", snap.By)
			if rec != nil {
				rec.SetPolicyVersion(snap.Version)
			}
			onChange(snap.Policies)
		},
		OnError: func(err error) { limited.Warn("console: policy store", "err", err) },
	})
	if err != nil {
		return nil, fmt.Errorf("console: policy store: %w", err)
	}
	if rec != nil {
		rec.SetPolicyVersion(live.Current().Version)
	}
	log.Info("console: following the policy store", "version", live.Current().Version)
	return live, nil
}
