// Package serve is freqcap's decision server: the sdk's operations over
// the network, for senders in any language. One schema
// (proto/freqcap/v1/freqcap.proto) is served by one handler per operation
// as gRPC, gRPC-Web and the Connect protocol's HTTP/JSON
// (connectrpc.com/connect), on one port; Serve gives the calls in the gRPC
// protocol to grpc-go's transport, which costs less per call, and the
// others to net/http (the same handlers answer both).
//
// A Server is stateless: every count lives in the Limiter's backend, so
// any number of replicas may serve the same Redis deployment, and a
// reservation made through one is committed through another. It
// authenticates callers by bearer secret (Caller), each granted some
// operations on some policies, and locks out for a growing time an
// address that keeps sending unknown secrets; without callers it answers
// loopback clients only. It serves /healthz, /readyz and /metrics beside the
// calls, bounds request sizes, batch lengths and each request's time, and
// shuts down gracefully: Shutdown refuses new calls and waits for those in
// flight, so that no decision is made without its answer being sent.
//
//	srv, err := serve.New(serve.Config{Limiter: lim, Policies: policies, Callers: callers})
//	go srv.Serve(ln)
//	…
//	srv.Shutdown(ctx)
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/lockout"
	"github.com/freqcap/freqcap/internal/lograte"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// Defaults of Config's bounds.
const (
	DefaultMaxBatch       = 1000
	DefaultMaxRequestSize = 1 << 20
	DefaultTimeout        = 2 * time.Second
	DefaultMaxReserveTTL  = time.Hour
)

// idleTimeout closes a connection without calls for that long.
const idleTimeout = 2 * time.Minute

// compressMinBytes is the smallest answer gzipped for a client that
// accepts it.
const compressMinBytes = 16 << 10

// Config configures a Server. Limiter and Policies (or Live) are
// required.
type Config struct {
	// Limiter decides. Give it the observers the service should have
	// (cmd/freqcap's serve gives a prom.Collector's and a
	// fleet.Recorder's).
	Limiter *sdk.Limiter
	// Policies are the policies served, by name (a policy file's).
	// Ignored with Live.
	Policies []*sdk.Policy
	// Live, when set, gives the policies served instead: the current
	// version of a followed policy store (a *policystore.Live's Current;
	// nil: none yet, no policies). The server calls it once per call,
	// and decides the call with the policies it returned, so one call
	// never mixes two versions; it must be cheap and safe for concurrent
	// use. Its Version is reported in decisions and by ListPolicies. It may return no policies (an empty
	// store: every call names an unknown policy until one is applied).
	Live func() *policystore.Snapshot
	// Store, when set, answers PolicyService (plan, apply, history,
	// rollback). Nil: PolicyService answers FailedPrecondition.
	Store *policystore.Store
	// Callers are the credentials. None: every loopback client may do
	// everything but admin (as the caller named "local": overrides,
	// identity links and policy-store writes need a credential); others
	// are refused.
	Callers []Caller
	// Audit records each reset, override set or deleted, identity linked
	// or unlinked, person's zone set or cleared, and policy version applied
	// or rolled back to (nil: they are only logged). An error recording
	// one fails the call with Internal, after the change.
	Audit func(AuditEntry) error
	// Ready reports whether the backend answers (/readyz). Nil: always.
	Ready func(context.Context) error
	// Registry receives the server's metrics (request latency by
	// operation and code) and is served at /metrics. Nil: a new one.
	Registry *prometheus.Registry
	// Logger gets structured logs, never subject values. Nil: discarded.
	Logger *slog.Logger
	// MaxBatch bounds the attempts of one TakeBatch or PeekBatch
	// (default DefaultMaxBatch).
	MaxBatch int
	// MaxRequestSize bounds a request message, in bytes (default
	// DefaultMaxRequestSize). A larger one is refused with
	// ResourceExhausted, gRPC's code for a message above the limit.
	MaxRequestSize int
	// Timeout bounds each call's work, whatever deadline the caller
	// asked for (default DefaultTimeout).
	Timeout time.Duration
	// MaxReserveTTL bounds a reservation's ttl (default
	// DefaultMaxReserveTTL).
	MaxReserveTTL time.Duration
	// TLS, when set, is the server's TLS configuration (Serve then
	// speaks TLS; HTTP/2 is negotiated by ALPN). Without it HTTP/2 is
	// spoken in clear text (h2c) beside HTTP/1.1.
	TLS *tls.Config
	// Now is the clock of the lockout after failed credentials and of the
	// log's limit on failure lines
	// (default time.Now).
	Now func() time.Time
	// TracerProvider and MeterProvider, when set, make the server emit
	// OpenTelemetry traces and metrics of its calls
	// (connectrpc.com/otelconnect, and otelgrpc for the calls grpc-go's
	// transport serves): one server span per call, named
	// after its method (freqcap.v1.FreqcapService/Take), with the
	// caller's name and the policy (AttrCaller, AttrPolicy), and the
	// rpc.server.* metrics by method and code; never a subject value or
	// message contents. Nil: none (the default).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// AuditEntry is one reset, override change, change of identity links or
// zones, or policy version applied, as the audit log records it.
type AuditEntry struct {
	At time.Time
	// Action is ActionReset, ActionOverrideSet, ActionOverrideDelete,
	// ActionPersonLink, ActionPersonUnlink, ActionPersonZone,
	// ActionPolicyApply or ActionPolicyRollback ("" is a reset).
	Action string
	// Caller is the credential's name ("local" without credentials).
	Caller string
	// Remote is the client's address.
	Remote string
	// Policy is the policy of a reset or override ("" for a change of
	// links or zones, which is no policy's).
	Policy string
	// Subject is the subject reset or overridden; for a change of links
	// or zones, the "identity" and "person" it names.
	Subject sdk.Subject
	// Rules are the rules reset; Kept those left alone.
	Rules, Kept []string
	// Outcome is "ok" or "failed: …" (never a backend's address).
	Outcome string
	// Detail says what was set, deleted or applied: "override #12 block
	// until 2026-11-27T09:00:00Z: <reason>", "link: <reason>", "zone
	// Europe/Berlin: <reason>", "version 7: <reason>" ("" for a reset).
	// Subjects, identities and persons appear in Subject only.
	Detail string
}

// The audited actions (AuditEntry.Action).
const (
	ActionReset          = "reset"
	ActionOverrideSet    = "override-set"
	ActionOverrideDelete = "override-delete"
	ActionPersonLink     = "person-link"
	ActionPersonUnlink   = "person-unlink"
	ActionPersonZone     = "person-zone"
	ActionPolicyApply    = "policy-apply"
	ActionPolicyRollback = "policy-rollback"
)

// Server serves decisions. Create one with New; it is safe for
// concurrent use.
type Server struct {
	cfg      Config
	policies policies
	callers  *callers         // nil: no credentials
	lockout  *lockout.Guard   // of addresses sending unknown credentials
	logRate  *lograte.Limiter // failure lines: one of a kind every lograte.Every
	log      *slog.Logger
	metrics  *metrics
	handler  http.Handler

	grpc *grpc.Server // the gRPC stack (grpcstack.go)

	draining  atomic.Bool
	mu        sync.Mutex
	servers   []*http.Server
	listeners []net.Listener
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("serve: no Limiter")
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if cfg.Live != nil {
		s.policies.live = cfg.Live
	} else {
		if len(cfg.Policies) == 0 {
			return nil, errors.New("serve: no policies")
		}
		ps, err := newPolicySet(&policystore.Snapshot{Policies: cfg.Policies})
		if err != nil {
			return nil, err
		}
		s.policies.cur.Store(ps)
	}
	if len(cfg.Callers) > 0 {
		cs, err := newCallers(cfg.Callers)
		if err != nil {
			return nil, err
		}
		s.callers = cs
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	s.lockout = lockout.New(s.cfg.Now)
	s.logRate = lograte.New(s.cfg.Now, lograte.Every)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.cfg.MaxBatch <= 0 {
		s.cfg.MaxBatch = DefaultMaxBatch
	}
	if s.cfg.MaxRequestSize <= 0 {
		s.cfg.MaxRequestSize = DefaultMaxRequestSize
	}
	if s.cfg.Timeout <= 0 {
		s.cfg.Timeout = DefaultTimeout
	}
	if s.cfg.MaxReserveTTL <= 0 {
		s.cfg.MaxReserveTTL = DefaultMaxReserveTTL
	}
	if s.cfg.Registry == nil {
		s.cfg.Registry = prometheus.NewRegistry()
	}
	m, err := newMetrics(s.cfg.Registry)
	if err != nil {
		return nil, err
	}
	s.metrics = m

	var opts []connect.HandlerOption
	for _, o := range protoconv.JSONCodecs() {
		opts = append(opts, o)
	}
	interceptors := []connect.Interceptor{s.interceptor()}
	otel, err := otelInterceptor(s.cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: OpenTelemetry: %w", err)
	}
	if otel != nil {
		interceptors = append([]connect.Interceptor{otel}, interceptors...) // outermost: refusals are spans too
	}
	opts = append(opts,
		connect.WithInterceptors(interceptors...),
		connect.WithReadMaxBytes(s.cfg.MaxRequestSize),
		// Answers are small: gzip costs more CPU than it saves on a
		// LAN. Only large batch answers are compressed (when the
		// client accepts gzip).
		connect.WithCompressMinBytes(compressMinBytes),
	)
	svc := newService(s)
	path, h := freqcapv1connect.NewFreqcapServiceHandler(svc, opts...)
	mux := http.NewServeMux()
	mux.Handle(path, s.guard(s.authFirst(h)))
	ppath, ph := freqcapv1connect.NewPolicyServiceHandler(&policyService{s: s}, opts...)
	mux.Handle(ppath, s.guard(s.authFirst(ph)))
	opath, oh := freqcapv1connect.NewOverrideServiceHandler(&overrideService{s: s}, opts...)
	mux.Handle(opath, s.guard(s.authFirst(oh)))
	pepath, peh := freqcapv1connect.NewPersonServiceHandler(&personService{s: s}, opts...)
	mux.Handle(pepath, s.guard(s.authFirst(peh)))
	epath, eh := envoyHandler(svc, opts...)
	mux.Handle(epath, s.guard(s.authFirst(eh)))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.guard(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{})))
	s.handler = mux
	s.grpc = s.newGRPC()
	return s, nil
}

// Handler returns the server's handler: the calls under
// /freqcap.v1.FreqcapService/, /freqcap.v1.PolicyService/,
// /freqcap.v1.OverrideService/ and /freqcap.v1.PersonService/, /healthz,
// /readyz and /metrics, every
// protocol through connect. Serve uses it for all but gRPC (which it
// gives grpc-go's transport); a program with its own http.Server may
// mount it, gRPC included (it then shuts that server down itself, after
// Drain).
func (s *Server) Handler() http.Handler { return s.handler }

// guard refuses, on a server without credentials, clients that are not on
// loopback and requests whose Host is not a loopback name (a DNS
// rebinding page).
func (s *Server) guard(h http.Handler) http.Handler {
	if s.callers != nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpauth.LoopbackHostport(r.RemoteAddr) || !httpauth.LoopbackHostport(r.Host) {
			http.Error(w, "freqcap serve without credentials answers loopback clients only", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// readyz is 200 while the backend answers and the server takes calls,
// else 503 (draining, or the backend failed or refuses to decide,
// driver.ErrRefused: its error goes to the log). Ready, or refusing, its
// body gives each master's memory as the backend describes it
// (driver.Description.Memory: maxmemory, maxmemory-policy, evicted_keys),
// with a warning line for each that may evict freqcap's keys: masters are
// numbered, never named, since /readyz answers anyone.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	if s.cfg.Ready != nil {
		err := s.cfg.Ready(ctx)
		switch {
		case errors.Is(err, driver.ErrRefused):
			s.log.Warn("serve: not ready: the backend refuses to decide", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "the backend refuses to decide (the log has its error)")
			s.writeMemory(ctx, w)
			return
		case err != nil:
			s.log.Warn("serve: not ready: the backend does not answer", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "the backend does not answer")
			return
		}
	}
	fmt.Fprintln(w, "ready")
	s.writeMemory(ctx, w)
}

// writeMemory writes readyz's memory lines: one per master, and a
// warning line for each that may evict freqcap's keys (or would not say).
// A backend that does not describe itself, or keeps no memory report,
// writes none.
func (s *Server) writeMemory(ctx context.Context, w io.Writer) {
	d, err := s.cfg.Limiter.Admin().Describe(ctx)
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			fmt.Fprintln(w, "memory: unknown (the backend did not describe itself)")
		}
		return
	}
	for i, m := range d.Memory {
		node := fmt.Sprintf("master %d of %d", i+1, len(d.Memory))
		if !m.Known {
			fmt.Fprintf(w, "memory: %s: unknown (INFO refused)\n", node)
			fmt.Fprintf(w, "warning: %s does not say whether it evicts freqcap's keys: make sure its maxmemory-policy is noeviction\n", node)
			continue
		}
		fmt.Fprintf(w, "memory: %s: maxmemory %d, maxmemory-policy %s, evicted_keys %d\n", node, m.MaxMemory, m.Policy, m.EvictedKeys)
		if m.Evicts {
			fmt.Fprintf(w, "warning: %s may evict freqcap's keys (maxmemory-policy %s with maxmemory %d; every freqcap key has a TTL): under memory pressure people go uncapped; set maxmemory-policy noeviction\n", node, m.Policy, m.MaxMemory)
		}
	}
}

// Serve accepts connections on ln until Shutdown, with the server's
// timeouts; TLS when Config.TLS is set, else HTTP/1.1 and clear-text
// HTTP/2 (gRPC needs HTTP/2). Calls in the gRPC protocol are served by
// grpc-go's transport, the others by net/http (split.go; the same
// handlers answer both). It returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.Timeout + 30*time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Protocols:         new(http.Protocols),
	}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetHTTP2(true)
	// split reads each connection's preface (and completes TLS): what it
	// gives net/http is HTTP/1.1, a *tls.Conn, or HTTP/2 with prior
	// knowledge.
	hs.Protocols.SetUnencryptedHTTP2(true)
	sp := &split{ln: ln, grpc: newConnQueue(ln.Addr()), web: newConnQueue(ln.Addr()), timeout: hs.ReadHeaderTimeout, stopped: s.draining.Load}
	if s.cfg.TLS != nil {
		sp.tls = s.cfg.TLS.Clone()
		if len(sp.tls.NextProtos) == 0 {
			sp.tls.NextProtos = []string{"h2", "http/1.1"}
		}
	}
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.servers = append(s.servers, hs)
	s.listeners = append(s.listeners, ln)
	s.mu.Unlock()
	go s.grpc.Serve(sp.grpc)
	errc := make(chan error, 1)
	go func() { errc <- sp.run() }()
	err := hs.Serve(sp.web)
	ln.Close()
	if lerr := <-errc; !errors.Is(lerr, net.ErrClosed) && !s.draining.Load() {
		return fmt.Errorf("serve: %w", lerr)
	}
	if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Drain makes the server refuse new calls (Unavailable, reason
// SHUTTING_DOWN: nothing consumed, retry elsewhere) and /readyz answer
// 503. Calls already started finish.
func (s *Server) Drain() { s.draining.Store(true) }

// Shutdown drains the server, stops accepting connections and waits,
// until ctx ends, for the calls in flight to finish and their answers to
// be written. A call still running when ctx ends is cut off (its
// connection closed): give ctx more time than Config.Timeout.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.Drain()
	servers, listeners := s.servers, s.listeners
	s.servers, s.listeners = nil, nil // a second Shutdown has nothing left to do
	s.mu.Unlock()
	for _, ln := range listeners {
		ln.Close()
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			hs.Close()
		}
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		errs = append(errs, ctx.Err())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	return nil
}
