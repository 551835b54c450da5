package console

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/faulty"
	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

const (
	adminToken   = "admin-secret-token"
	checkerToken = "checker-secret-token"
	viewerToken  = "viewer-secret-token"
)

// t0 is the tests' starting instant.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type fixture struct {
	srv      *Server
	lim      *sdk.Limiter
	clock    *fakeclock.Clock
	policies map[string]*sdk.Policy
	audit    *AuditLog
	backend  driver.Backend // what lim uses
	prefix   string         // lim's key prefix ("": the default)
	auditBuf *bytes.Buffer
	logs     *bytes.Buffer // the console's log lines
}

func testCredentials() []Credential {
	return []Credential{
		{Role: RoleAdmin, Name: "alice", Secret: adminToken},
		{Role: RoleChecker, Name: "billing", Secret: checkerToken},
		{Role: RoleViewer, Name: "victor", Secret: viewerToken},
	}
}

// newFixture builds a console over the seed policies and a memory backend
// on a fake clock. creds nil means authentication off.
func newFixture(t *testing.T, creds []Credential) *fixture {
	t.Helper()
	return newFixtureWith(t, creds, nil, nil)
}

// newFixtureWith is newFixture with a backend (nil: memory, on the
// fixture's clock) and an audit log (nil: a fresh one writing to
// auditBuf).
func newFixtureWith(t *testing.T, creds []Credential, mk func(clk *fakeclock.Clock) *faulty.Backend, audit *AuditLog) *fixture {
	t.Helper()
	var mkb func(clk *fakeclock.Clock) driver.Backend
	if mk != nil {
		mkb = func(clk *fakeclock.Clock) driver.Backend { return mk(clk) }
	}
	return newFixtureCfg(t, creds, mkb, audit, nil)
}

// newFixtureCfg is newFixtureWith with a hook that completes the
// console's Config (nil: none) before New, given the fixture's backend
// and limiter.
func newFixtureCfg(t *testing.T, creds []Credential, mk func(clk *fakeclock.Clock) driver.Backend, audit *AuditLog, hook func(*Config, driver.Backend, *sdk.Limiter)) *fixture {
	t.Helper()
	clk := fakeclock.New(t0)
	pols, err := seed.Policies()
	if err != nil {
		t.Fatalf("seed.Policies() error: %v", err)
	}
	m := NewMetrics(clk.Now)
	opts := []sdk.Option{sdk.WithClock(clk), sdk.WithObserver(m.Observe)}
	var be driver.Backend = memory.New(&memory.Options{Clock: clk})
	if mk != nil {
		be = mk(clk)
	}
	lim := sdk.New(be, opts...)
	var buf, logs bytes.Buffer
	if audit == nil {
		audit = NewAuditLog(&buf, 0)
	}
	cfg := Config{
		Limiter:     lim,
		Fleet:       fleetOf(be, &fleet.Options{Now: clk.Now}),
		Policies:    pols,
		Metrics:     m,
		Audit:       audit,
		Credentials: creds,
		Now:         clk.Now,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	}
	if hook != nil {
		hook(&cfg, be, lim)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New() error: %v", err)
	}
	f := &fixture{srv: srv, lim: lim, clock: clk, policies: map[string]*sdk.Policy{}, audit: audit, backend: be, auditBuf: &buf, logs: &logs}
	for _, p := range pols {
		f.policies[p.Name()] = p
	}
	return f
}

func (f *fixture) allow(t *testing.T, policy string, s sdk.Subject, n int) []sdk.Decision {
	t.Helper()
	var ds []sdk.Decision
	for range n {
		d, err := f.lim.Allow(context.Background(), f.policies[policy], s)
		if err != nil {
			t.Fatalf("Allow(%s) error: %v", policy, err)
		}
		ds = append(ds, d)
	}
	return ds
}

// req describes one test request.
type req struct {
	method, path string
	body         string
	form         url.Values
	bearer       string
	basic        [2]string
	cookies      []*http.Cookie
	header       map[string]string
	host         string // "" means 127.0.0.1:8080
	remote       string // the peer's address; "" means httptest's 192.0.2.1:1234
	tls          *tls.ConnectionState
}

func (f *fixture) do(t *testing.T, r req) *http.Response {
	t.Helper()
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	} else if r.body != "" {
		body = strings.NewReader(r.body)
	}
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	hr := httptest.NewRequest(method, r.path, body)
	hr.TLS = r.tls
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	hr.Host = "127.0.0.1:8080"
	if r.host != "" {
		hr.Host = r.host
	}
	if r.form != nil {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	if r.basic[0] != "" {
		hr.SetBasicAuth(r.basic[0], r.basic[1])
	}
	for _, c := range r.cookies {
		hr.AddCookie(c)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, hr)
	return rec.Result()
}

func readBody(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func cookie(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// csrf fetches a page to get a pre-session cookie and returns it; tok
// gives the CSRF token bound to it.
func (f *fixture) csrf(t *testing.T) *http.Cookie {
	t.Helper()
	res := f.do(t, req{path: "/login"})
	c := cookie(res, preCookie)
	if c == nil {
		t.Fatalf("GET /login set no %s cookie", preCookie)
	}
	return c
}

// tok is the CSRF token pages embed for a request bearing c (the
// pre-session or the session cookie).
func (f *fixture) tok(c *http.Cookie) string { return f.srv.auth.csrfToken(c.Value) }

// ruleRow extracts used/limit/remaining of a rule from a subject page.
func ruleRow(t *testing.T, body, rule string) (used, limit, remaining string) {
	t.Helper()
	re := regexp.MustCompile(`data-rule="` + regexp.QuoteMeta(rule) + `"[^>]*>.*?<td class="num used"[^>]*>(\d+)</td><td class="num limit"[^>]*>(\d+)</td><td class="num remaining"[^>]*>(?:<span class="bad">)?(\d+)`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no row for rule %s in page:\n%s", rule, body)
	}
	return m[1], m[2], m[3]
}

var push = sdk.Subject{"user": "18829340001", "content": sdk.Fingerprint("hello")}

func TestSubjectLookupShowsCountersAndTrail(t *testing.T) {
	f := newFixture(t, nil)
	f.allow(t, "push", push, 3) // the third is denied by content-59s
	q := "/subject?" + subjectQuery("push", push)
	for _, path := range []string{q, strings.Replace(q, "/subject?", "/live/subject?", 1)} {
		t.Run(path, func(t *testing.T) {
			res := f.do(t, req{path: path})
			body := readBody(t, res)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s = %d, want 200\n%s", path, res.StatusCode, body)
			}
			for _, tc := range []struct {
				rule                   string
				used, limit, remaining string
			}{
				{"recv-1m", "2", "15", "13"},
				{"recv-24h", "2", "50", "48"},
				{"content-59s", "2", "2", "0"},
				{"content-59m", "2", "5", "3"},
			} {
				u, l, r := ruleRow(t, body, tc.rule)
				if u != tc.used || l != tc.limit || r != tc.remaining {
					t.Errorf("rule %s: used/limit/remaining = %s/%s/%s, want %s/%s/%s", tc.rule, u, l, r, tc.used, tc.limit, tc.remaining)
				}
			}
			if !regexp.MustCompile(`(?s)<table id="trail"[^>]*>.*<td class="rule"[^>]*><strong>content-59s</strong></td><td class="num used"[^>]*>2 / 2</td>`).MatchString(body) {
				t.Errorf("denial trail does not show content-59s at 2 / 2:\n%s", body)
			}
			if !strings.Contains(body, "would be <span class=\"bad\">denied</span> by <strong>content-59s</strong>") {
				t.Errorf("verdict does not name content-59s:\n%s", body)
			}
			if !strings.Contains(body, "fc:{18829340001}:push:recv-1m.") {
				t.Errorf("keys not shown:\n%s", body)
			}
			// The key of the rule's set of dimensions, as a key (not as
			// template text), where the Redis backend keeps it.
			if !strings.Contains(body, "fc:{18829340001}:push:=<") || strings.Contains(body, "@idText") {
				t.Errorf("dimension-set keys not shown:\n%s", body)
			}
		})
	}
}

func TestSubjectLookupInputErrors(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name, path string
		status     int
		want       string
	}{
		{"form only", "/subject?policy=push", http.StatusOK, `id="dim-user"`},
		{"no policy picks the first", "/subject", http.StatusOK, `name="policy" value="push"`},
		{"missing shard dimension", "/subject?policy=push&content=x", http.StatusBadRequest, `Enter a value for &#34;user&#34;`},
		{"unknown policy", "/subject?policy=nope&user=1", http.StatusNotFound, "no such policy"},
		{"partial subject skips rules", "/subject?policy=push&user=1", http.StatusOK, "<code>content-59s, content-59m</code>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := f.do(t, req{path: tc.path})
			body := readBody(t, res)
			if res.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s = %d, want %d containing %q\n%s", tc.path, res.StatusCode, tc.status, tc.want, body)
			}
		})
	}
}

func TestOutputIsEscaped(t *testing.T) {
	f := newFixture(t, nil)
	evil := `<script>alert("x")</script>`
	s := sdk.Subject{"user": evil, "content": `"><img src=x onerror=alert(1)>`}
	f.allow(t, "push", s, 3)
	admin := f.csrf(t)
	// Reset it, so the audit log shows the subject too.
	form := url.Values{"policy": {"push"}, "user": {s["user"]}, "content": {s["content"]}, "confirm": {"yes"}, csrfField: {f.tok(admin)}}
	if res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{admin}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /reset = %d, want 303: %s", res.StatusCode, readBody(t, res))
	}
	for _, path := range []string{
		"/subject?" + subjectQuery("push", s),
		"/live/subject?" + subjectQuery("push", s),
		"/reset?" + subjectQuery("push", s),
		"/audit",
		"/audit?policy=push&user=" + url.QueryEscape(s["user"]),
	} {
		t.Run(path, func(t *testing.T) {
			body := readBody(t, f.do(t, req{path: path}))
			for _, bad := range []string{"<script>alert", "<img src=x"} {
				if strings.Contains(body, bad) {
					t.Errorf("GET %s: page contains %q unescaped", path, bad)
				}
			}
			if !strings.Contains(body, html.EscapeString(evil)) {
				t.Errorf("GET %s: escaped subject not shown:\n%s", path, body)
			}
		})
	}
	// The API is JSON: Go escapes < and > there.
	res := f.do(t, req{path: "/api/v1/inspect?" + subjectQuery("push", s)})
	if body := readBody(t, res); strings.Contains(body, "<script>") || res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("inspect: content type %q, body %s", res.Header.Get("Content-Type"), body)
	}
}

func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	for _, path := range []string{"/", "/subject", "/login", "/api/v1/policies", "/metrics", "/nope"} {
		res := f.do(t, req{path: path})
		for h, want := range map[string]string{
			"Content-Security-Policy": contentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("GET %s: %s = %q, want %q", path, h, got, want)
			}
		}
	}
	if csp := contentSecurityPolicy; strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP allows inline code: %s", csp)
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t, testCredentials())
	tests := []struct {
		name   string
		r      req
		status int
		where  string // Location, for redirects
	}{
		{"anonymous page goes to sign-in", req{path: "/subject?policy=push"}, http.StatusSeeOther, "/login?next=%2Fsubject%3Fpolicy%3Dpush"},
		{"anonymous API is 401", req{path: "/api/v1/policies"}, http.StatusUnauthorized, ""},
		{"anonymous metrics is 401", req{path: "/metrics"}, http.StatusUnauthorized, ""},
		{"bad bearer is 401", req{path: "/", bearer: "wrong-token-123"}, http.StatusUnauthorized, ""},
		{"viewer bearer reads", req{path: "/", bearer: viewerToken}, http.StatusOK, ""},
		{"admin bearer reads", req{path: "/policies", bearer: adminToken}, http.StatusOK, ""},
		{"basic auth with name", req{path: "/", basic: [2]string{"victor", viewerToken}}, http.StatusOK, ""},
		{"basic auth wrong name", req{path: "/", basic: [2]string{"alice", viewerToken}}, http.StatusUnauthorized, ""},
		{"static needs no auth", req{path: "/static/app.js"}, http.StatusOK, ""},
		{"health needs no auth", req{path: "/healthz"}, http.StatusOK, ""},
		{"viewer cannot open reset", req{path: "/reset?policy=push&user=1", bearer: viewerToken}, http.StatusForbidden, ""},
		{"admin opens reset", req{path: "/reset?policy=push&user=1", bearer: adminToken}, http.StatusOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := f.do(t, tc.r)
			if res.StatusCode != tc.status {
				t.Fatalf("GET %s = %d, want %d: %s", tc.r.path, res.StatusCode, tc.status, readBody(t, res))
			}
			if tc.where != "" && res.Header.Get("Location") != tc.where {
				t.Errorf("Location = %q, want %q", res.Header.Get("Location"), tc.where)
			}
		})
	}
}

func TestLoginSession(t *testing.T) {
	f := newFixture(t, testCredentials())
	cs := f.csrf(t)
	login := func(token string) *http.Response {
		form := url.Values{"token": {token}, "next": {"/policies"}, csrfField: {f.tok(cs)}}
		return f.do(t, req{method: http.MethodPost, path: "/login", form: form, cookies: []*http.Cookie{cs}})
	}
	if res := login("not-a-token"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /login with a bad token = %d, want 401", res.StatusCode)
	}
	res := login(viewerToken)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/policies" {
		t.Fatalf("POST /login = %d to %q, want 303 to /policies", res.StatusCode, res.Header.Get("Location"))
	}
	sess := cookie(res, sessionCookie)
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie = %+v, want HttpOnly SameSite=Strict", sess)
	}
	res = f.do(t, req{path: "/", cookies: []*http.Cookie{sess}})
	if body := readBody(t, res); res.StatusCode != http.StatusOK || !strings.Contains(body, "victor (viewer, session)") {
		t.Fatalf("GET / with session = %d, want 200 naming victor:\n%s", res.StatusCode, body)
	}
	// Sign out ends the session.
	res = f.do(t, req{method: http.MethodPost, path: "/logout", form: url.Values{csrfField: {f.tok(sess)}}, cookies: []*http.Cookie{sess}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /logout = %d, want 303", res.StatusCode)
	}
	if res := f.do(t, req{path: "/", cookies: []*http.Cookie{sess}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / after sign-out = %d, want 303 to the sign-in page", res.StatusCode)
	}
	// An open redirect is refused.
	for _, next := range []string{"//evil.example/", "https://evil.example/", "/\\evil"} {
		if got := safeNext(next); got != "/" {
			t.Errorf("safeNext(%q) = %q, want /", next, got)
		}
	}
	// Sessions expire.
	res = login(adminToken)
	sess = cookie(res, sessionCookie)
	f.clock.Advance(13 * time.Hour)
	if res := f.do(t, req{path: "/", cookies: []*http.Cookie{sess}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / with an expired session = %d, want 303", res.StatusCode)
	}
}

func TestReset(t *testing.T) {
	f := newFixture(t, testCredentials())
	f.allow(t, "push", push, 3)
	cs := f.csrf(t)
	form := url.Values{"policy": {"push"}, "user": {push["user"]}, "content": {push["content"]}, "confirm": {"yes"}, csrfField: {f.tok(cs)}}
	post := func(r req) *http.Response {
		r.method, r.path = http.MethodPost, "/reset"
		return f.do(t, r)
	}
	without := func(k string) url.Values {
		v := url.Values{}
		for kk, vv := range form {
			if kk != k {
				v[kk] = vv
			}
		}
		return v
	}
	tests := []struct {
		name   string
		r      req
		status int
	}{
		{"viewer is forbidden", req{form: form, cookies: []*http.Cookie{cs}, bearer: viewerToken}, http.StatusForbidden},
		{"anonymous is unauthorized", req{form: form, cookies: []*http.Cookie{cs}}, http.StatusUnauthorized},
		{"no CSRF field", req{form: without(csrfField), cookies: []*http.Cookie{cs}, bearer: adminToken}, http.StatusForbidden},
		{"no CSRF cookie", req{form: form, bearer: adminToken}, http.StatusForbidden},
		{"wrong CSRF", req{form: func() url.Values { v := without(csrfField); v.Set(csrfField, strings.Repeat("x", 43)); return v }(), cookies: []*http.Cookie{cs}, bearer: adminToken}, http.StatusForbidden},
		{"cross-site request", req{form: form, cookies: []*http.Cookie{cs}, bearer: adminToken, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, http.StatusForbidden},
		{"not confirmed", req{form: without("confirm"), cookies: []*http.Cookie{cs}, bearer: adminToken}, http.StatusBadRequest},
		{"no shard value", req{form: without("user"), cookies: []*http.Cookie{cs}, bearer: adminToken}, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := post(tc.r)
			if res.StatusCode != tc.status {
				t.Errorf("POST /reset = %d, want %d: %s", res.StatusCode, tc.status, readBody(t, res))
			}
		})
	}
	if n := len(f.audit.Entries()); n != 0 {
		t.Fatalf("audit log has %d entries after refused resets, want 0", n)
	}
	if u, _, _ := ruleRow(t, readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", push), bearer: adminToken})), "recv-1m"); u != "2" {
		t.Fatalf("recv-1m used = %s after refused resets, want 2", u)
	}

	// The viewer's page offers no reset; the admin's does.
	if body := readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", push), bearer: viewerToken})); strings.Contains(body, `id="reset"`) || !strings.Contains(body, `id="reset-denied"`) {
		t.Errorf("viewer's subject page offers a reset")
	}
	// Confirmation page carries the CSRF token and the subject; the form
	// without a rules field (the wider of its two) resets every rule the
	// subject gives the dimensions of (TestResetPair has the other).
	body := readBody(t, f.do(t, req{path: "/reset?" + subjectQuery("push", push), bearer: adminToken, cookies: []*http.Cookie{cs}}))
	for _, want := range []string{`name="_csrf" value="` + f.tok(cs) + `"`, `name="user" value="18829340001"`, `id="wider-rules">recv-1m, recv-24h, content-59s, content-59m<`} {
		if !strings.Contains(body, want) {
			t.Errorf("confirmation page lacks %q:\n%s", want, body)
		}
	}

	res := post(req{form: form, cookies: []*http.Cookie{cs}, bearer: adminToken})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /reset = %d, want 303: %s", res.StatusCode, readBody(t, res))
	}
	body = readBody(t, f.do(t, req{path: res.Header.Get("Location"), bearer: adminToken}))
	for _, rule := range []string{"recv-1m", "recv-24h", "content-59s", "content-59m"} {
		if u, _, _ := ruleRow(t, body, rule); u != "0" {
			t.Errorf("after reset, %s used = %s, want 0", rule, u)
		}
	}
	if !strings.Contains(body, `id="notice"`) || !strings.Contains(body, "alice (admin, token)") || !strings.Contains(body, "<table id=\"trail\"") {
		t.Errorf("after reset, page lacks the notice, the audit entry or the kept trail:\n%s", body)
	}
	entries := f.audit.Entries()
	if len(entries) != 1 {
		t.Fatalf("audit log has %d entries, want 1", len(entries))
	}
	e := entries[0]
	if e.Action != "reset" || e.Policy != "push" || e.Role != "admin" || e.Subject["user"] != push["user"] || !e.At.Equal(t0) || e.Outcome != "ok" || len(e.Rules) != 4 {
		t.Errorf("audit entry = %+v", e)
	}
	var logged AuditEntry
	if err := json.Unmarshal(f.auditBuf.Bytes(), &logged); err != nil || logged.Actor != e.Actor {
		t.Errorf("audit file line = %q (%v), want the entry as JSON", f.auditBuf.String(), err)
	}
}

func TestLoginNeedsCSRF(t *testing.T) {
	f := newFixture(t, testCredentials())
	res := f.do(t, req{method: http.MethodPost, path: "/login", form: url.Values{"token": {adminToken}}})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("POST /login without CSRF = %d, want 403", res.StatusCode)
	}
}

// TestAPICheckRetired: POST /api/v1/check, retired, answers its old
// callers 410 Gone with freqcap serve's calls in the body, whatever they
// send (after authentication, as every API call), and decides nothing.
func TestAPICheckRetired(t *testing.T) {
	f := newFixture(t, testCredentials())
	body := `{"policy":"push","subject":{"user":"u1","content":"c1"}}`
	for _, tc := range []struct {
		name, body, token string
		status            int
	}{
		{"checker", body, checkerToken, http.StatusGone},
		{"viewer peek", `{"policy":"push","subject":{"user":"u1","content":"c1"},"peek":true}`, viewerToken, http.StatusGone},
		{"bad JSON", `{"policy":`, adminToken, http.StatusGone},
		{"no token", body, "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.do(t, req{method: http.MethodPost, path: "/api/v1/check", body: tc.body, bearer: tc.token, header: map[string]string{"Content-Type": "application/json"}})
			b := readBody(t, res)
			var e apiError
			if res.StatusCode != tc.status || json.Unmarshal([]byte(b), &e) != nil || e.Status != tc.status {
				t.Fatalf("POST /api/v1/check = %d %s, want %d with a JSON error", res.StatusCode, b, tc.status)
			}
			if tc.status == http.StatusGone && (e.Error != checkReplacement || !strings.Contains(e.Error, "/freqcap.v1.FreqcapService/Take")) {
				t.Errorf("410 body = %q, want the replacement %q", e.Error, checkReplacement)
			}
		})
	}
	if ins, err := f.lim.Admin().Inspect(context.Background(), f.policies["push"], sdk.Subject{"user": "u1", "content": "c1"}); err != nil || ins.Rules[0].Used != 0 {
		t.Errorf("after the retired checks, Inspect = %+v, %v; want nothing consumed", ins, err)
	}
}

// TestAPIBody: the JSON API reads one JSON object of bounded size, valid
// UTF-8, no unknown fields and nothing after it, sent as
// application/json, and answers every refusal as a JSON error.
func TestAPIBody(t *testing.T) {
	f := newFixture(t, testCredentials())
	body := `{"policy":"push","subject":{"user":"u1"}}`
	errs := []struct {
		name, body, ctype, token string
		status                   int
	}{
		{"unknown policy", `{"policy":"nope","subject":{"user":"u"}}`, "application/json", adminToken, 404},
		{"no policy", `{"subject":{"user":"u"}}`, "application/json", adminToken, 400},
		{"missing dimension", `{"policy":"push","subject":{"content":"c"}}`, "application/json", adminToken, 400},
		{"bad JSON", `{"policy":`, "application/json", adminToken, 400},
		{"unknown field", `{"policy":"push","subjects":{}}`, "application/json", adminToken, 400},
		{"trailing data", body + `{"policy":"api"}`, "application/json", adminToken, 400},
		{"trailing garbage", body + `x`, "application/json", adminToken, 400},
		{"invalid UTF-8 in an id", "{\"policy\":\"push\",\"subject\":{\"user\":\"u\xff\"}}", "application/json", adminToken, 400},
		{"lone surrogate in an id", `{"policy":"push","subject":{"user":"u\udc00"}}`, "application/json", adminToken, 400},
		{"too large", `{"policy":"push","subject":{"user":"` + strings.Repeat("u", maxBody) + `"}}`, "application/json", adminToken, 413},
		{"form posts are refused", `policy=push`, "application/x-www-form-urlencoded", adminToken, 415},
		{"text/plain is refused", body, "text/plain", adminToken, 415},
		{"no token", body, "application/json", "", 401},
		{"a checker may not reset", body, "application/json", checkerToken, 403},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			res := f.do(t, req{method: http.MethodPost, path: "/api/v1/reset", body: tc.body, bearer: tc.token, header: map[string]string{"Content-Type": tc.ctype}})
			b := readBody(t, res)
			var e apiError
			if res.StatusCode != tc.status || json.Unmarshal([]byte(b), &e) != nil || e.Status != tc.status {
				t.Errorf("POST /api/v1/reset = %d %s, want %d with a JSON error", res.StatusCode, b, tc.status)
			}
		})
	}
}

func TestAPIInspect(t *testing.T) {
	f := newFixture(t, nil)
	f.allow(t, "push", push, 3)
	res := f.do(t, req{path: "/api/v1/inspect?" + subjectQuery("push", sdk.Subject{"user": push["user"]})})
	var ins InspectionJSON
	if err := json.NewDecoder(res.Body).Decode(&ins); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /api/v1/inspect = %d (%v)", res.StatusCode, err)
	}
	if len(ins.Rules) != 2 || ins.Rules[0].Rule != "recv-1m" || ins.Rules[0].Used != 2 || len(ins.Skipped) != 2 {
		t.Errorf("inspection rules = %+v skipped %v, want recv-1m, recv-24h at 2 and 2 skipped", ins.Rules, ins.Skipped)
	}
	if len(ins.Denials) != 1 || ins.Denials[0].Rule != "content-59s" || ins.Denials[0].Used != 2 || ins.Denials[0].Limit != 2 {
		t.Errorf("denials = %+v, want one by content-59s at 2/2", ins.Denials)
	}
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/api/v1/inspect?policy=push", 400},
		{"/api/v1/inspect?user=1", 400},
		{"/api/v1/inspect?policy=nope&user=1", 404},
	} {
		if res := f.do(t, req{path: tc.path}); res.StatusCode != tc.status {
			t.Errorf("GET %s = %d, want %d", tc.path, res.StatusCode, tc.status)
		}
	}
}

// failing is a backend that cannot decide.
var failing = faulty.Down(errors.New("connection refused"))

func TestMetrics(t *testing.T) {
	f := newFixture(t, nil)
	f.allow(t, "push", push, 3)
	f.clock.Advance(3 * time.Second)
	// A fail-open policy on a failing backend gives degraded decisions.
	broken := sdk.New(failing, sdk.WithObserver(f.srv.metrics.Observe))
	if d, err := broken.Allow(context.Background(), f.policies["push"], push); err != nil || !d.Degraded {
		t.Fatalf("Allow on a failing backend = %+v, %v; want degraded", d, err)
	}
	if _, err := broken.Allow(context.Background(), f.policies["api"], sdk.Subject{"user": "u", "campaign": "c"}); err == nil {
		t.Fatalf("fail-closed Allow on a failing backend: no error")
	}
	res := f.do(t, req{path: "/metrics"})
	body := readBody(t, res)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q", ct)
	}
	for _, want := range []string{
		"# TYPE freqcap_decisions_total counter",
		`freqcap_decisions_total{op="take",outcome="allowed",policy="push"} 3`, // 2 + the degraded one
		`freqcap_decisions_total{op="take",outcome="denied",policy="push"} 1`,
		`freqcap_decisions_total{op="take",outcome="error",policy="api"} 1`,
		`freqcap_rule_decisions_total{outcome="denied",policy="push",rule="content-59s"} 1`,
		`freqcap_rule_decisions_total{outcome="allowed",policy="push",rule="recv-1m"} 3`,
		`freqcap_degraded_decisions_total{op="take",policy="push"} 1`,
		"# TYPE freqcap_backend_latency_seconds histogram",
		`freqcap_backend_latency_seconds_bucket{op="take",le="+Inf"} 5`,
		`freqcap_backend_latency_seconds_count{op="take"} 5`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	r := f.srv.metrics.Rates("push")
	if r.Allowed != 3 || r.Denied != 1 || r.Degraded != 1 || r.AllowedPerSec != 0.2 || r.DeniedPerSec != 0.1 {
		t.Errorf("Rates(push) = %+v", r)
	}
	// The overview shows them.
	if body := readBody(t, f.do(t, req{path: "/live/overview"})); !strings.Contains(body, "3 allowed, 1 denied (25%), 1 degraded") {
		t.Errorf("overview rates:\n%s", body)
	}
}

func TestMetricsLabelEscaping(t *testing.T) {
	m := NewMetrics(nil)
	m.Observe(sdk.Event{Policy: "a\"b\\c\nd", Op: "take", Decision: sdk.Decision{Allowed: true}})
	if want, got := `freqcap_decisions_total{op="take",outcome="allowed",policy="a\"b\\c\nd"} 1`, scrape(t, m); !strings.Contains(got, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, got)
	}
}

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr string
		auth bool
		ok   bool
	}{
		{"127.0.0.1:8080", false, true},
		{"127.0.0.2:8080", false, true},
		{"[::1]:8080", false, true},
		{"localhost:8080", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"[::]:8080", false, false},
		{"10.1.2.3:8080", false, false},
		{"console.example:8080", false, false},
		{"0.0.0.0:8080", true, true},
	}
	for _, tc := range tests {
		err := CheckAddr(tc.addr, tc.auth)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInsecureAddr)) {
			t.Errorf("CheckAddr(%q, %v) = %v, want ok=%v", tc.addr, tc.auth, err, tc.ok)
		}
	}
	f := newFixture(t, nil)
	if err := f.srv.ListenAndServe(context.Background(), "0.0.0.0:0", nil); !errors.Is(err, ErrInsecureAddr) {
		t.Errorf("ListenAndServe(0.0.0.0:0) without auth = %v, want ErrInsecureAddr", err)
	}
}

func TestListenAndServeShutsDown(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- f.srv.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a.String() }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("ListenAndServe: %v", err)
	}
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /healthz = %v, %v", res, err)
	}
	res.Body.Close()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("ListenAndServe after cancel = %v, want nil", err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	pols, _ := seed.Policies()
	lim := sdk.New(memory.New(nil))
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no limiter", Config{Policies: pols}},
		{"no policies", Config{Limiter: lim}},
		{"duplicate policy", Config{Limiter: lim, Policies: append(pols, pols[0])}},
		{"short secret", Config{Limiter: lim, Policies: pols, Credentials: []Credential{{Role: RoleAdmin, Secret: "short"}}}},
		{"no role", Config{Limiter: lim, Policies: pols, Credentials: []Credential{{Secret: "long-enough-secret"}}}},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("New(%s) = nil error", tc.name)
		}
	}
}

func TestPoliciesPage(t *testing.T) {
	f := newFixture(t, nil)
	body := readBody(t, f.do(t, req{path: "/policies"}))
	for _, want := range []string{
		`id="policy-push"`, "fc:{&lt;user&gt;}:push:recv-1m.", "fc:{&lt;user&gt;}:push:content-59s.", ":&lt;content&gt;",
		"calendar day in Asia/Shanghai", "rate 30 per 1m, burst 14: up to 15 at once (the limit shown), then one every 2s", "fc:{&lt;user&gt;}:push:!t",
		// The keys of the rules' sets of dimensions, where Redis keeps them.
		`<td class="mono group-key" data-label="Key of its dimensions">fc:{&lt;user&gt;}:push:=</td>`, `<td class="mono group-key" data-label="Key of its dimensions">fc:{&lt;user&gt;}:push:=content:&lt;content&gt;</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("policies page lacks %q", want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "—"}, {time.Millisecond, "1s"}, {54800 * time.Millisecond, "55s"}, {61 * time.Second, "1m 01s"},
		{23*time.Hour + 59*time.Minute + 30*time.Second, "23h 59m"}, {50 * time.Hour, "2d 2h"},
	} {
		if got := fmtCountdown(tc.d); got != tc.want {
			t.Errorf("fmtCountdown(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Minute, "1m"}, {59 * time.Second, "59s"}, {24 * time.Hour, "24h"}, {48 * time.Hour, "2d"}, {5900 * time.Millisecond, "5.9s"}, {90 * time.Minute, "1h30m"},
	} {
		if got := fmtWindow(tc.d); got != tc.want {
			t.Errorf("fmtWindow(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestBackendDown(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Limiter: sdk.New(failing), Policies: pols, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv}
	tests := []struct {
		name   string
		r      req
		status int
		want   string
	}{
		{"subject page", req{path: "/subject?policy=push&user=1"}, http.StatusServiceUnavailable, "The backend could not answer"},
		{"overview still renders", req{path: "/"}, http.StatusOK, "The backend did not describe itself"},
		{"reset is 503", req{method: http.MethodPost, path: "/api/v1/reset", body: `{"policy":"push","subject":{"user":"u"}}`, header: map[string]string{"Content-Type": "application/json"}}, http.StatusServiceUnavailable, `"status":503`},
		{"inspect is 503", req{path: "/api/v1/inspect?policy=push&user=1"}, http.StatusServiceUnavailable, `"status":503`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := f.do(t, tc.r)
			body := readBody(t, res)
			if res.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s = %d, want %d containing %q:\n%s", tc.r.method, tc.r.path, res.StatusCode, tc.status, tc.want, body)
			}
			if strings.Contains(tc.r.path, "/api/") && res.Header.Get("RateLimit") != "" {
				t.Errorf("RateLimit header on a decision without rule states")
			}
		})
	}
}

func TestBasicAuthSignIn(t *testing.T) {
	f := newFixture(t, testCredentials())
	res := f.do(t, req{path: "/login/basic?next=/policies"})
	if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("GET /login/basic = %d, WWW-Authenticate %q; want 401 with a Basic challenge", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	res = f.do(t, req{path: "/login/basic?next=/policies", basic: [2]string{"alice", adminToken}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/policies" {
		t.Errorf("GET /login/basic with credentials = %d to %q, want 303 to /policies", res.StatusCode, res.Header.Get("Location"))
	}
	// Basic-auth users are CSRF-protected like sessions: a browser sends
	// their credentials by itself.
	res = f.do(t, req{method: http.MethodPost, path: "/reset", form: url.Values{"policy": {"push"}, "user": {"1"}, "confirm": {"yes"}}, basic: [2]string{"alice", adminToken}})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("basic-auth POST /reset without CSRF = %d, want 403", res.StatusCode)
	}
}

func TestParseBasicAuth(t *testing.T) {
	tests := []struct {
		in   string
		want []Credential
		ok   bool
	}{
		{"alice:pa:ss:word:admin, bob:secret12:viewer, svc:secret34:checker", []Credential{{RoleAdmin, "alice", "pa:ss:word"}, {RoleViewer, "bob", "secret12"}, {RoleChecker, "svc", "secret34"}}, true},
		{"", nil, true},
		{"alice:secret", nil, false},
		{"alice:secret:root", nil, false},
		{":secret:admin", nil, false},
		{"alice::admin", nil, false},
	}
	for _, tc := range tests {
		got, err := ParseBasicAuth(tc.in)
		if (err == nil) != tc.ok || len(got) != len(tc.want) {
			t.Errorf("ParseBasicAuth(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseBasicAuth(%q)[%d] = %+v, want %+v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

// TestDemoBanner: with demo traffic on, the banner links to a demo user
// under the first policy sharded by user alone, and to none when no policy
// is.
func TestDemoBanner(t *testing.T) {
	seed, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	byDevice, err := sdk.NewPolicy("devices", []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("device")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		policies []*sdk.Policy
		link     string // "": no link
	}{
		{"seed", seed, `<a href="/subject?policy=push&amp;user=18829340001">18829340001</a>`},
		{"no user policy", []*sdk.Policy{byDevice}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := New(Config{Limiter: sdk.New(memory.New(nil)), Policies: tc.policies, DemoUser: "18829340001",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, (&fixture{srv: srv}).do(t, req{path: "/"}))
			if !strings.Contains(body, "Demo traffic is running") {
				t.Fatalf("overview lacks the demo banner:\n%s", body)
			}
			if got := strings.Contains(body, "Try user"); got != (tc.link != "") || !strings.Contains(body, tc.link) {
				t.Errorf("demo banner: link %v, want %q:\n%s", got, tc.link, body)
			}
		})
	}
}

// fleetOf is a Reader of b, or nil when b keeps no statistics.
func fleetOf(b driver.Backend, o *fleet.Options) Fleet {
	r, err := fleet.NewReader(b, o)
	if err != nil {
		return nil
	}
	return r
}
