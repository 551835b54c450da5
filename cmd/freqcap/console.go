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

	"github.com/freqcap/freqcap/backends/capability"
	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/console"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

const consoleUsage = `Usage: freqcap console [flags]

Serves the support console, the JSON API (/api/v1/check, /api/v1/inspect)
and Prometheus metrics (/metrics).

With no --redis, --cluster or --sentinel, state lives in memory (lost on
exit); --demo
adds synthetic traffic so counters move at once. Without credentials the
console listens on loopback only and everyone is an admin.

Credentials (prefer the environment: flags show up in ps):
  FREQCAP_ADMIN_TOKEN, FREQCAP_VIEWER_TOKEN   bearer tokens / sign-in tokens
  FREQCAP_BASIC_AUTH                          "name:password:role,…" (role viewer|admin)

Flags:
`

// consoleFlags are the console command's settings.
type consoleFlags struct {
	addr        string
	policies    string
	demo        bool
	demoRate    float64
	server      serverFlags
	prefix      string
	timeout     time.Duration
	viewerToken string
	adminToken  string
	basicAuth   string
	auditFile   string
	forcePlain  bool
	forbid      string
}

func parseConsoleFlags(args []string, stderr io.Writer) (consoleFlags, error) {
	var f consoleFlags
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, consoleUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address; a non-loopback address needs credentials")
	fs.StringVar(&f.policies, "policies", "", "policy YAML file (default: the built-in seed policies)")
	fs.BoolVar(&f.demo, "demo", false, "generate synthetic traffic over the policies")
	fs.Float64Var(&f.demoRate, "demo-rate", 20, "demo decisions per second")
	f.server.register(fs) // none given: the in-memory backend
	fs.StringVar(&f.prefix, "prefix", sdk.DefaultPrefix, "key prefix")
	fs.DurationVar(&f.timeout, "timeout", 500*time.Millisecond, "timeout of each backend call")
	fs.StringVar(&f.viewerToken, "viewer-token", os.Getenv("FREQCAP_VIEWER_TOKEN"), "viewer token (env FREQCAP_VIEWER_TOKEN)")
	fs.StringVar(&f.adminToken, "admin-token", os.Getenv("FREQCAP_ADMIN_TOKEN"), "admin token (env FREQCAP_ADMIN_TOKEN)")
	fs.StringVar(&f.basicAuth, "basic-auth", os.Getenv("FREQCAP_BASIC_AUTH"), `basic-auth users "name:password:role,…" (env FREQCAP_BASIC_AUTH)`)
	fs.StringVar(&f.auditFile, "audit", "", "append audit entries (JSON lines) to this file")
	fs.BoolVar(&f.forcePlain, "force-plain-lua", false, "Redis: use the plain Lua strategies whatever modules the server has")
	fs.StringVar(&f.forbid, "forbid", "", "Redis: comma-separated modules never to use: tairhash, redis-cell, hfe")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("console: unexpected argument %q", fs.Arg(0))
	}
	if err := f.server.check(); err != nil {
		return f, fmt.Errorf("console: %w", err)
	}
	return f, nil
}

// credentials builds the console's credentials from the flags.
func (f consoleFlags) credentials() ([]console.Credential, error) {
	var creds []console.Credential
	if f.adminToken != "" {
		creds = append(creds, console.Credential{Role: console.RoleAdmin, Name: "admin-token", Secret: f.adminToken})
	}
	if f.viewerToken != "" {
		creds = append(creds, console.Credential{Role: console.RoleViewer, Name: "viewer-token", Secret: f.viewerToken})
	}
	if f.basicAuth != "" {
		basic, err := console.ParseBasicAuth(f.basicAuth)
		if err != nil {
			return nil, err
		}
		creds = append(creds, basic...)
	}
	return creds, nil
}

func runConsole(args []string) error {
	f, err := parseConsoleFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	creds, err := f.credentials()
	if err != nil {
		return err
	}
	// Refuse early, before connecting anywhere.
	if err := console.CheckAddr(f.addr, len(creds) > 0); err != nil {
		return err
	}

	var policies []*sdk.Policy
	if f.policies != "" {
		policies, err = sdk.LoadPolicyFile(f.policies)
	} else {
		policies, err = seed.Policies()
	}
	if err != nil {
		return fmt.Errorf("console: policies: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	backend, closeBackend, err := consoleBackend(f)
	if err != nil {
		return err
	}
	defer closeBackend()

	metrics := console.NewMetrics(nil)
	// The console records its own decisions (API checks, demo traffic)
	// like any service, so that the overview's fleet charts include them.
	rec, err := sdk.NewRecorder(backend, &sdk.RecorderOptions{Prefix: f.prefix, OnError: recorderLog(log)})
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("console: recorder: %w", err)
	}
	if rec != nil {
		defer rec.Close()
	}
	lim := sdk.New(backend,
		sdk.WithPrefix(f.prefix),
		sdk.WithTimeout(f.timeout),
		sdk.WithObserver(metrics.Observe),
		sdk.WithRecorder(rec),
	)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	desc, err := lim.Describe(dctx)
	cancel()
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("console: backend: %w", err)
	}
	log.Info("backend", "name", desc.Name, "target", desc.Target, "strategies", strategies(desc))

	var audit io.Writer
	if f.auditFile != "" {
		af, err := os.OpenFile(f.auditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("console: audit log: %w", err)
		}
		defer af.Close()
		audit = af
	}

	srv, err := console.New(console.Config{
		Limiter:     lim,
		Policies:    policies,
		Metrics:     metrics,
		Audit:       console.NewAuditLog(audit, 0),
		Credentials: creds,
		Logger:      log,
		Demo:        f.demo,
	})
	if err != nil {
		return err
	}
	if f.demo {
		demo := console.StartDemo(lim, policies, console.DemoOptions{Rate: f.demoRate, Logger: log})
		defer demo.Close()
	}
	return srv.ListenAndServe(ctx, f.addr, func(a net.Addr) {
		auth := "auth off (loopback only)"
		if len(creds) > 0 {
			auth = fmt.Sprintf("%d credential(s)", len(creds))
		}
		fmt.Fprintf(os.Stderr, "freqcap console on http://%s (%s backend, %s, demo %v)\n", a, desc.Name, auth, f.demo)
	})
}

// recorderLog logs the recorder's flush errors, at most one a minute.
func recorderLog(log *slog.Logger) func(error) {
	var mu sync.Mutex
	var last time.Time
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= time.Minute {
			last = now
			log.Warn("recorder: statistics not flushed (logged at most once a minute)", "err", err)
		}
	}
}

// consoleBackend builds the backend the flags ask for, and its closer.
func consoleBackend(f consoleFlags) (driver.Backend, func(), error) {
	if !f.server.given() {
		return memory.New(nil), func() {}, nil
	}
	forbid, err := parseForbid(f.forbid)
	if err != nil {
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	ro := &redis.Options{Detect: capability.Config{ForcePlainLua: f.forcePlain, Forbid: forbid}}
	c := goredis.NewUniversalClient(f.server.options())
	return redis.New(c, ro), func() { c.Close() }, nil
}

func strategies(d sdk.Description) string {
	var parts []string
	for _, a := range capability.Algorithms {
		if st, ok := d.Strategies[sdk.Algorithm(a)]; ok {
			parts = append(parts, a.String()+"="+st.Name)
		}
	}
	return strings.Join(parts, " ")
}
