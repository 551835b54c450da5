// Package console is freqcap's support console: server-rendered pages that
// answer "why was this user throttled?", a JSON API for scripts (inspect,
// reset, policies, overrides), and Prometheus metrics. Decisions over the
// network are freqcap serve's (package serve): POST /api/v1/check, the
// console's own until then, answers 410 Gone naming serve's calls.
//
// The console is a client of package sdk. Build a Limiter with the
// console's Metrics as its observer, hand both to New, and serve
// Server.Handler (tests) or call Server.ListenAndServe (the freqcap
// command):
//
//	m := console.NewMetrics(nil)
//	lim := sdk.New(memory.New(nil), sdk.WithObserver(m.Observe))
//	srv, err := console.New(console.Config{Limiter: lim, Policies: pols, Metrics: m})
//
// Config.Limiter and Config.Admin are the small interfaces of the calls
// the console makes, decisions (Limiter: *sdk.Limiter implements it) and
// administration (Admin: *sdk.Admin does; nil means the Limiter's
// Admin()). Config.Fleet, usually a
// *fleet.Reader, gives the overview's fleet panel the services'
// statistics and announcements. Handlers build the view
// models of package console/internal/views and render its templ components.
//
// Pages work without JavaScript; a small script refreshes the live parts.
// Every state-changing request is protected against CSRF, all output is
// escaped, and the server refuses to listen on a non-loopback address
// without credentials.
package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/lockout"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

//go:embed static
var staticFS embed.FS

// Limiter is the decisions the console asks of the SDK: exactly the
// calls it makes. *sdk.Limiter implements it; tests may pass a fake.
type Limiter interface {
	// Peek decides without consuming (the subject page's verdict).
	Peek(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error)
}

var _ Limiter = (*sdk.Limiter)(nil)

// Admin is the administration and diagnostics the console asks of the
// SDK: exactly the calls it makes. *sdk.Admin (sdk.Limiter.Admin)
// implements it; tests may pass a fake.
type Admin interface {
	// Inspect reads a subject's state and denial trail (the subject page,
	// GET /api/v1/inspect).
	Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error)
	// Reset deletes a subject's counters (the reset form, POST
	// /api/v1/reset).
	Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error
	// ResetRules deletes a subject's counters of some rules only (the
	// reset of a pair, POST /api/v1/reset with "rules").
	ResetRules(ctx context.Context, p *sdk.Policy, s sdk.Subject, rules ...string) error
	// Describe is the backend's account of itself (the overview).
	Describe(ctx context.Context) (driver.Description, error)
	// KeyLayout is where a subject's state is kept: its rules' sets of
	// dimensions and own keys, its trail and reservations (the subject,
	// policies and reset pages).
	KeyLayout(p *sdk.Policy, s sdk.Subject) sdk.KeyLayout
}

var _ Admin = (*sdk.Admin)(nil)

// Fleet is what the console reads of the fleet's telemetry: what the
// services' fleet.Recorders flushed to the backend. *fleet.Reader
// implements it; tests may pass a fake.
type Fleet interface {
	// Stats reads what the services' recorders counted for a policy
	// (the overview's fleet panel, GET /api/v1/stats).
	Stats(ctx context.Context, p *sdk.Policy, window time.Duration) (fleet.Stats, error)
	// Announced lists the policies services announced within a window
	// (the fleet panel's policy-file warnings, the versions services run).
	Announced(ctx context.Context, within time.Duration) ([]fleet.Announcement, error)
	// Shadow reads what a policy's shadow rules would have denied over a
	// window: attempts and people (the policies page's shadow view).
	Shadow(ctx context.Context, p *sdk.Policy, window time.Duration) (fleet.ShadowStats, error)
	// Evictions reads the keys the backend's servers evicted over a
	// window, as the recorders sampled them (the overview's charts show
	// them beside the decisions).
	Evictions(ctx context.Context, window time.Duration) (fleet.Evictions, error)
}

var _ Fleet = (*fleet.Reader)(nil)

// Config configures a Server. Limiter and Policies are required.
type Config struct {
	// Limiter makes the decisions: usually an *sdk.Limiter. Pass
	// Metrics.Observe to sdk.WithObserver when building it so that
	// /metrics and the overview's rates see them.
	Limiter Limiter
	// Admin inspects, resets and describes what Limiter decides: usually
	// its sdk.Limiter.Admin. Nil means Limiter's Admin() when it has one
	// (an *sdk.Limiter does); else New fails. When it implements
	// Overrider (*sdk.Admin does), the console manages overrides too;
	// when it implements ValueLister (*sdk.Admin does), the subject page
	// lists a person's values of each nested dimension set; when it
	// implements Linker (*sdk.Admin does), the person page and the subject
	// page show and change identity links and stored zones.
	Admin Admin
	// Fleet reads the services' statistics and announcements: usually a
	// *fleet.Reader of the Limiter's backend, with the services'
	// Recorders' prefix. Nil means the backend keeps none: the overview
	// says so and GET /api/v1/stats answers 501.
	Fleet Fleet
	// Policies are the policies the console shows and the API accepts, by
	// name (names must be unique). Ignored when Source is set.
	Policies []*sdk.Policy
	// Source, when set, gives the policies in force instead of Policies:
	// the console follows a policy store (a *policystore.Live: the
	// overview names the version it runs), and every request reads its
	// current snapshot.
	Source PolicySource
	// Store, when set, is the policy store the policy editor plans,
	// applies and rolls back in (admin role) and the history reads: nil
	// means the policies page is read-only.
	Store *policystore.Store
	// WhatIf, when set, estimates a proposed version's denials for the
	// editor's preview; nil means the preview has no estimate.
	WhatIf WhatIf
	// Metrics collects decisions; nil means a fresh Metrics that nothing
	// feeds (the rates stay at zero).
	Metrics *Metrics
	// Audit records resets, override changes and policy versions; nil means an in-memory
	// log of 200 entries of each.
	Audit *AuditLog
	// Credentials are the accepted tokens and basic-auth users. Empty
	// means authentication is off: every request acts as an admin named
	// "local", ListenAndServe accepts loopback addresses only, and only
	// requests naming a loopback Host are answered (DNS rebinding).
	Credentials []Credential
	// Now is the clock for sessions, the audit log and countdowns; nil
	// means time.Now.
	Now func() time.Time
	// Logger receives errors and access problems; nil means
	// slog.Default(). Lines about failures come at most one of a kind
	// (where, and which kind of error) every 10 s, the next one carrying
	// "suppressed": how many were held back. Failed sign-ins and resets
	// are each logged.
	Logger *slog.Logger
	// SessionTTL is how long a console login lasts; 0 means 12h.
	SessionTTL time.Duration
	// Refresh is the live-refresh interval of the pages; 0 means 1s.
	Refresh time.Duration
	// DemoUser, when set, says synthetic traffic is running against these
	// policies (freqcap console --demo): the overview mentions it, with a
	// link to this user, the traffic's hot one.
	DemoUser string
}

// Server is the console: an echo application plus its sessions. It is safe
// for concurrent use. Handler serves it; ListenAndServe runs it on an
// address with timeouts until its context ends.
type Server struct {
	cfg     Config
	now     func() time.Time
	log     *slog.Logger
	pcache  policyCache // the policies in force (snap)
	ovr     Overrider   // Config.Limiter's overrides, marked; nil: none
	vals    ValueLister // Config.Admin's value listing, marked; nil: none
	ppl     Linker      // Config.Admin's identity links, marked; nil: none
	demoURL string      // the demo banner's example subject (Config.DemoUser)
	metrics *Metrics
	audit   *AuditLog
	auth    *authenticator
	guard   *lockout.Guard // failed authentication attempts per address and user name
	warn    *rateLog       // backend failures, at most one line per kind every logEvery
	cop     *http.CrossOriginProtection
	// malformed holds the malformed-announcement reports already logged.
	malformed onceSet
	echo      *echo.Echo
	handler   http.Handler

	descCache describeCache
}

// New checks cfg and builds the console.
func New(cfg Config) (*Server, error) {
	if l, ok := cfg.Limiter.(*sdk.Limiter); cfg.Limiter == nil || (ok && l == nil) {
		return nil, errors.New("console: Config.Limiter is nil")
	}
	if len(cfg.Policies) == 0 && cfg.Source == nil {
		return nil, errors.New("console: no policies")
	}
	if cfg.Admin == nil {
		l, ok := cfg.Limiter.(interface{ Admin() *sdk.Admin })
		if !ok {
			return nil, errors.New("console: Config.Admin is nil and Config.Limiter has no Admin")
		}
		cfg.Admin = l.Admin()
	}
	var ovr Overrider
	if o, ok := cfg.Admin.(Overrider); ok {
		ovr = markedOverrider{o}
	}
	var vals ValueLister
	if v, ok := cfg.Admin.(ValueLister); ok {
		vals = markedValues{v}
	}
	ppl := linkerOf(cfg.Admin)
	cfg.Limiter = markedLimiter{cfg.Limiter}
	cfg.Admin = markedAdmin{cfg.Admin}
	if cfg.Fleet == nil {
		cfg.Fleet = noFleet{}
	}
	cfg.Fleet = markedFleet{cfg.Fleet}
	s := &Server{
		cfg:     cfg,
		now:     cfg.Now,
		log:     cfg.Logger,
		metrics: cfg.Metrics,
		audit:   cfg.Audit,
		ovr:     ovr,
		vals:    vals,
		ppl:     ppl,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(s.now)
	}
	if s.audit == nil {
		s.audit = NewAuditLog(nil, 200)
	}
	if s.cfg.Refresh <= 0 {
		s.cfg.Refresh = time.Second
	}
	pols := cfg.Policies
	if cfg.Source != nil {
		_, pols = sourcePolicies(cfg.Source)
	}
	ps, err := newPolicySet(0, pols)
	if err != nil {
		return nil, err
	}
	if cfg.Source == nil {
		s.pcache.set.Store(ps)
	}
	for _, p := range ps.order {
		if sh := p.ShardBy(); cfg.DemoUser != "" && s.demoURL == "" && len(sh) == 1 && sh[0] == "user" {
			s.demoURL = "/subject?" + subjectQuery(p.Name(), sdk.Subject{"user": cfg.DemoUser})
		}
	}
	ttl := cfg.SessionTTL
	if ttl <= 0 {
		ttl = 12 * time.Hour
	}
	a, err := newAuthenticator(cfg.Credentials, ttl, s.now)
	if err != nil {
		return nil, err
	}
	s.auth = a
	s.guard = lockout.New(s.now)
	s.cop = http.NewCrossOriginProtection()
	s.warn = newRateLog(s.log, s.now, logEvery)
	s.echo = s.routes()
	s.handler = s.echo
	return s, nil
}

// Handler returns the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// AuthEnabled reports whether credentials are configured.
func (s *Server) AuthEnabled() bool { return s.auth.enabled() }

// ErrInsecureAddr is returned by ListenAndServe for a non-loopback address
// when no credentials are configured.
var ErrInsecureAddr = errors.New("console: refusing to listen on a non-loopback address without authentication (set --token, --admin-token/--checker-token/--viewer-token or --basic-auth)")

// CheckAddr returns ErrInsecureAddr when addr (host:port) is not a
// loopback address and authEnabled is false. An empty host ("":8080) means
// every interface and is not loopback; "localhost" is.
func CheckAddr(addr string, authEnabled bool) error {
	loopback, err := httpauth.LoopbackAddr(addr)
	if err != nil {
		return fmt.Errorf("console: address %q: %w", addr, err)
	}
	if authEnabled || loopback {
		return nil
	}
	return ErrInsecureAddr
}

// ListenAndServe listens on addr and serves until ctx ends, then shuts
// down gracefully (waiting up to 10s for requests in flight). It refuses a
// non-loopback addr when authentication is off. ready, if not nil, is
// called with the bound address once listening.
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	if err := CheckAddr(addr, s.AuthEnabled()); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	// The bound address decides, too: a name may resolve elsewhere.
	if err := CheckAddr(ln.Addr().String(), s.AuthEnabled()); err != nil {
		ln.Close()
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully. It closes
// ln. It does not check the address: ListenAndServe does.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(s.warn.writer("http-server", "console: http server"), "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("console: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// routes builds the echo application.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	// The audit log records the peer's address, never a forwarded header
	// a client can forge.
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(s.securityHeaders, s.recoverPanic, s.crossOrigin, s.checkHost, s.authenticate, s.checkCSRF)

	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded directory exists by construction
	}
	// Every page answers HEAD as well as GET.
	get := func(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
		e.Match([]string{http.MethodGet, http.MethodHead}, path, h, m...)
	}
	get("/static/*", staticFiles(static))
	get("/favicon.ico", s.favicon)
	get("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })

	get("/login", s.loginPage)
	e.POST("/login", s.login)
	get("/login/basic", s.loginBasic)
	e.POST("/logout", s.logout)

	viewer := s.require(RoleViewer)
	admin := s.require(RoleAdmin)
	get("/", s.overview, viewer)
	get("/live/overview", s.overviewLive, viewer)
	get("/subject", s.subject, viewer)
	get("/live/subject", s.subjectLive, viewer)
	e.POST("/fingerprint", s.fingerprint, viewer)
	get("/policies", s.policiesPage, viewer)
	get("/policies/edit", s.editPage, viewer)
	e.POST("/policies/preview", s.preview, admin)
	e.POST("/policies/apply", s.applyForm, admin)
	get("/policies/history", s.historyPage, viewer)
	get("/policies/version", s.versionPage, viewer)
	get("/policies/diff", s.diffPage, viewer)
	get("/policies/rollback", s.rollbackConfirm, admin)
	e.POST("/policies/rollback", s.rollback, admin)
	get("/audit", s.auditPage, viewer)
	get("/reset", s.resetConfirm, admin)
	e.POST("/reset", s.reset, admin)
	e.POST("/override", s.overrideSet, admin)
	get("/override/delete", s.overrideDeleteConfirm, admin)
	e.POST("/override/delete", s.overrideDelete, admin)
	get("/person", s.personPage, viewer)
	e.POST("/person/link", s.personForm("link"), admin)
	e.POST("/person/unlink", s.personForm("unlink"), admin)
	e.POST("/person/zone", s.personForm("zone"), admin)

	get("/metrics", s.metricsHandler, viewer)
	// Retired: 410 naming serve's calls, to any signed-in caller.
	e.POST("/api/v1/check", s.apiCheckRetired, viewer)
	e.POST("/api/v1/reset", s.apiReset, admin)
	get("/api/v1/inspect", s.apiInspect, viewer)
	get("/api/v1/values", s.apiValues, viewer)
	get("/api/v1/policies", s.apiPolicies, viewer)
	get("/api/v1/stats", s.apiStats, viewer)
	e.POST("/api/v1/policies/plan", s.apiPlan, admin)
	e.POST("/api/v1/policies/apply", s.apiApply, admin)
	e.POST("/api/v1/policies/rollback", s.apiRollback, admin)
	get("/api/v1/policies/history", s.apiHistory, viewer)
	get("/api/v1/policies/version", s.apiVersion, viewer)
	get("/api/v1/overrides", s.apiOverrides, viewer)
	e.POST("/api/v1/overrides", s.apiOverrideSet, admin)
	e.POST("/api/v1/overrides/delete", s.apiOverrideDelete, admin)
	get("/api/v1/person", s.apiPerson, viewer)
	e.POST("/api/v1/person/link", s.apiPersonChange("link"), admin)
	e.POST("/api/v1/person/unlink", s.apiPersonChange("unlink"), admin)
	e.POST("/api/v1/person/zone", s.apiPersonChange("zone"), admin)
	return e
}

// staticFiles serves the files of fsys under /static/: files only, never
// a directory's listing (404, as for a file that does not exist).
func staticFiles(fsys fs.FS) echo.HandlerFunc {
	files := http.StripPrefix("/static/", http.FileServer(http.FS(fsys)))
	return func(c echo.Context) error {
		name := strings.TrimPrefix(c.Request().URL.Path, "/static/")
		if st, err := fs.Stat(fsys, name); err != nil || st.IsDir() {
			return echo.ErrNotFound
		}
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// favicon serves the console's icon (an SVG) for browsers that ask for
// /favicon.ico before reading the page's <link rel="icon">.
func (s *Server) favicon(c echo.Context) error {
	b, err := staticFS.ReadFile("static/favicon.svg")
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=86400")
	return c.Blob(http.StatusOK, "image/svg+xml", b)
}

// checkHost answers, with authentication off, only requests whose Host is
// a loopback name (localhost, 127.0.0.0/8, [::1], with any port). Without
// credentials the console trusts whoever reaches it; a DNS-rebinding page
// reaches a loopback console under its own host name, and is refused here.
func (s *Server) checkHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.auth.enabled() || httpauth.LoopbackHostport(c.Request().Host) {
			return next(c)
		}
		return echo.NewHTTPError(http.StatusMisdirectedRequest, "with authentication off this console answers only to a loopback host name (localhost, 127.0.0.1, [::1])")
	}
}

// render writes comp with status. It renders into a buffer first, so that
// a failing component yields an error page instead of half a page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return fmt.Errorf("console: render: %w", err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// isAPI reports whether the request wants machine-readable answers.
func isAPI(c echo.Context) bool {
	p := c.Request().URL.Path
	return strings.HasPrefix(p, "/api/") || p == "/metrics"
}

// handleError is the central error handler: JSON for the API, an error
// page otherwise. Internal errors are logged, not shown.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		s.warn.Error("response-started", "console: error after response started", "path", c.Request().URL.Path, "err", err)
		return
	}
	status, msg := http.StatusInternalServerError, "internal error"
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		status = he.Code
		if m, ok := he.Message.(string); ok {
			msg = m
		} else {
			msg = http.StatusText(status)
		}
	case errors.Is(err, sdk.ErrInvalidSubject), errors.Is(err, sdk.ErrInvalidCost):
		// sdk errors never contain subject values.
		status, msg = http.StatusBadRequest, err.Error()
	case errors.As(err, new(*backendError)):
		// The text names socket addresses: the log gets it.
		status, msg = http.StatusServiceUnavailable, backendUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		status, msg = http.StatusGatewayTimeout, "backend timed out"
	}
	if status >= 500 && he == nil { // handlers log the HTTP errors they make
		s.warn.Error("request-failed "+c.Path(), "console: request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "status", status, "err", err)
	}
	if status == http.StatusUnauthorized && isAPI(c) {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="freqcap"`)
	}
	var werr error
	switch {
	case c.Request().Method == http.MethodHead:
		werr = c.NoContent(status)
	case isAPI(c):
		werr = c.JSON(status, apiError{Error: msg, Status: status})
	default:
		werr = render(c, status, views.ErrorPage(s.page(c, ""), status, msg))
	}
	if werr != nil {
		s.warn.Error("error-response", "console: writing error response", "err", werr)
	}
}

// recoverPanic turns a handler panic into a 500 through the error handler.
func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("console: panic: %v", r)
			}
		}()
		return next(c)
	}
}
