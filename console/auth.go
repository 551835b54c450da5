package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/console/internal/views"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/lockout"
)

// Role is what a console user may do. Roles are ordered: each one may do
// everything the ones before it may.
type Role int

const (
	// RoleNone: not signed in.
	RoleNone Role = iota
	// RoleViewer reads every page, the audit log and the metrics, and
	// uses the read-only JSON API (inspect, policies, overrides). It
	// resets nothing.
	RoleViewer
	// RoleChecker may what RoleViewer may. It consumed quota through POST
	// /api/v1/check, retired (decisions over the network are freqcap
	// serve's); it stays so that existing credentials still start.
	RoleChecker
	// RoleAdmin may also reset a subject (form and API).
	RoleAdmin
)

// String returns "viewer", "checker", "admin" or "none".
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleChecker:
		return "checker"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses "viewer", "checker" or "admin". Its error does not
// repeat s: s may be a mistyped secret.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return RoleViewer, nil
	case "checker":
		return RoleChecker, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("console: unknown role (want viewer, checker or admin)")
}

// Credential is one accepted secret. It is accepted as a bearer token
// (Authorization: Bearer SECRET), in the console's sign-in form, and as
// HTTP basic auth with user Name and password Secret.
type Credential struct {
	Role Role
	// Name identifies the holder in the audit log: a person ("alice") or
	// a service ("billing"). Empty means the role's name.
	Name string
	// Secret is the token or password; at least 8 bytes, and no two
	// credentials may share one.
	Secret string
}

// identity is who a request acts as.
type identity struct {
	Role   Role
	Name   string
	Method string // "token", "basic", "session", "none"
}

func (id identity) String() string {
	if id.Role == RoleNone {
		return "anonymous"
	}
	return id.Name + " (" + id.Role.String() + ", " + id.Method + ")"
}

type session struct {
	id      identity
	expires time.Time
}

// authenticator checks credentials and keeps console sessions (in memory:
// a restart signs everyone out).
type authenticator struct {
	creds   []Credential
	ttl     time.Duration
	now     func() time.Time
	csrfKey []byte // signs CSRF tokens: HMAC of the session (or pre-session) value

	mu       sync.Mutex
	sessions map[string]session // key: sha256 of the cookie value
}

func newAuthenticator(creds []Credential, ttl time.Duration, now func() time.Time) (*authenticator, error) {
	creds = append([]Credential(nil), creds...)
	for i, c := range creds {
		if c.Role != RoleViewer && c.Role != RoleChecker && c.Role != RoleAdmin {
			return nil, fmt.Errorf("console: credential %d: role must be viewer, checker or admin", i+1)
		}
		if len(c.Secret) < 8 {
			return nil, fmt.Errorf("console: credential %d (%s): secret shorter than 8 bytes", i+1, c.Role)
		}
		if c.Name == "" {
			creds[i].Name = c.Role.String()
		}
		if !validName(creds[i].Name) {
			return nil, fmt.Errorf("console: credential %d: name must be 1 to 64 printable characters without ':' or ','", i+1)
		}
		for j := range i {
			// The same secret twice would sign its holder in as whichever
			// credential comes first.
			if httpauth.Equal(creds[j].Secret, c.Secret) {
				return nil, fmt.Errorf("console: credentials %d and %d have the same secret: give each its own", j+1, i+1)
			}
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &authenticator{creds: creds, ttl: ttl, now: now, csrfKey: key, sessions: map[string]session{}}, nil
}

// validName reports whether a credential name can be shown and parsed
// back: printable, no separators, at most 64 bytes.
func validName(n string) bool {
	if n == "" || len(n) > 64 || !utf8.ValidString(n) || strings.ContainsAny(n, ":,") {
		return false
	}
	for _, r := range n {
		if !unicode.IsPrint(r) || r == ' ' {
			return false
		}
	}
	return true
}

func (a *authenticator) enabled() bool { return len(a.creds) > 0 }

// match returns the credential whose secret (and name, when name != "")
// matches. Every credential is compared, in constant time (httpauth.Equal).
func (a *authenticator) match(name, secret string) (Credential, bool) {
	var found Credential
	ok := false
	for _, c := range a.creds {
		sm := httpauth.Equal(c.Secret, secret)
		nm := name == "" || httpauth.Equal(c.Name, name)
		if sm && nm && !ok {
			found, ok = c, true
		}
	}
	return found, ok
}

func hashKey(v string) string {
	sum := sha256.Sum256([]byte(v))
	return string(sum[:])
}

func (a *authenticator) newSession(id identity) (string, time.Time) {
	v := randomToken()
	now := a.now()
	exp := now.Add(a.ttl)
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, s := range a.sessions { // prune, so the map stays small
		if !now.Before(s.expires) {
			delete(a.sessions, k)
		}
	}
	a.sessions[hashKey(v)] = session{id: id, expires: exp}
	return v, exp
}

func (a *authenticator) session(v string) (identity, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[hashKey(v)]
	if !ok || !a.now().Before(s.expires) {
		return identity{}, false
	}
	return s.id, true
}

func (a *authenticator) endSession(v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, hashKey(v))
}

// csrfToken is the CSRF token bound to v: the session cookie's value when
// signed in, else the pre-session cookie's. A new session, or signing
// out, changes v and so the token.
func (a *authenticator) csrfToken(v string) string {
	m := hmac.New(sha256.New, a.csrfKey)
	m.Write([]byte("freqcap csrf\x00"))
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

const (
	sessionCookie = "fc_session"
	// preCookie holds a random value that anonymous visitors' CSRF tokens
	// are bound to (the sign-in form); it is replaced at sign-in and
	// sign-out.
	preCookie   = "fc_csrf"
	csrfField   = "_csrf"
	ctxIdentity = "fc.identity"
	ctxCSRF     = "fc.csrf"
	ctxSession  = "fc.session" // the session cookie's value, when valid
)

// hostPrefix is the cookie name prefix used over TLS. Browsers accept a
// "__Host-" cookie only with Secure, Path=/ and no Domain, so on plain
// HTTP (a loopback console, or TLS terminated by a proxy) the cookies go
// without it.
const hostPrefix = "__Host-"

// cookieName is base, with the __Host- prefix when the request came over
// TLS.
func cookieName(c echo.Context, base string) string {
	if c.Request().TLS != nil {
		return hostPrefix + base
	}
	return base
}

func cookieValue(c echo.Context, base string) string {
	if ck, err := c.Cookie(cookieName(c, base)); err == nil {
		return ck.Value
	}
	return ""
}

func setCookie(c echo.Context, base, value string, expires time.Time, maxAge int) {
	c.SetCookie(&http.Cookie{
		Name: cookieName(c, base), Value: value, Path: "/", Expires: expires, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request().TLS != nil,
	})
}

var errBadCredentials = echo.NewHTTPError(http.StatusUnauthorized, "invalid credentials")

// authenticate resolves the request's identity: an Authorization header
// (bearer or basic) first, then the session cookie. With authentication
// off, every request is the local admin. Failed attempts are counted per
// remote address, and basic auth's also per user name tried (see guard):
// past a few, that address or name must wait, however many of its
// attempts succeed in between.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := identity{}
		if !s.auth.enabled() {
			id = identity{Role: RoleAdmin, Name: "local", Method: "none"}
		} else if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
			keys := []lockout.Key{lockout.Addr(c.RealIP())}
			scheme, _, _ := strings.Cut(h, " ")
			user, pass, basicOK := c.Request().BasicAuth()
			if basicOK {
				keys = append(keys, lockout.User(user))
			}
			method := strings.ToLower(scheme)
			var cr Credential
			verify := func() bool {
				var ok bool
				switch method {
				case "bearer":
					tok, _ := httpauth.Bearer(c.Request().Header)
					cr, ok = s.auth.match("", tok)
				case "basic":
					ok = basicOK
					if ok {
						cr, ok = s.auth.match(user, pass)
					}
				}
				return ok
			}
			ok, err := s.judge(c, method, verify, keys)
			if err != nil {
				return err
			}
			if !ok {
				if method == "basic" && basicOK {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="freqcap console", charset="UTF-8"`)
				}
				return errBadCredentials
			}
			id = identity{Role: cr.Role, Name: cr.Name, Method: "token"}
			if method == "basic" {
				id.Method = "basic"
			}
		} else if v := cookieValue(c, sessionCookie); v != "" {
			if sid, ok := s.auth.session(v); ok {
				id = sid
				id.Method = "session"
				c.Set(ctxSession, v)
			}
		}
		c.Set(ctxIdentity, id)
		return next(c)
	}
}

// judge checks one authentication attempt through the guard (see
// Server.tryAuth) and logs a failure. Every failure is logged (the guard
// bounds how many one address can make). The user name tried is not
// logged: people type passwords into it. method names the scheme in the
// log ("bearer", "basic", "sign-in form"; any other is logged as
// "unknown scheme" and always fails).
func (s *Server) judge(c echo.Context, method string, verify func() bool, keys []lockout.Key) (bool, error) {
	v, err := s.tryAuth(c, verify, keys...)
	if err != nil || v.OK {
		return v.OK, err
	}
	switch method {
	case "bearer", "basic", "sign-in form":
	default:
		method = "unknown scheme"
	}
	s.log.Warn("console: failed authentication", "remote", c.RealIP(), "method", method, "path", c.Request().URL.Path, "failures", v.Failures, "locked_for", v.Wait)
	return false, nil
}

func identityOf(c echo.Context) identity {
	id, _ := c.Get(ctxIdentity).(identity)
	return id
}

// require admits requests whose identity has at least role r. Anonymous
// page requests are sent to the sign-in page; anonymous API requests get
// 401; signed-in users without the role get 403.
func (s *Server) require(r Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := identityOf(c)
			switch {
			case id.Role >= r:
				return next(c)
			case id.Role == RoleNone && !isAPI(c) && (c.Request().Method == http.MethodGet || c.Request().Method == http.MethodHead):
				return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.RequestURI()))
			case id.Role == RoleNone:
				return echo.NewHTTPError(http.StatusUnauthorized, "authentication required")
			}
			return forbidden(r, id.Role)
		}
	}
}

func forbidden(need, have Role) error {
	return echo.NewHTTPError(http.StatusForbidden, fmt.Sprintf("forbidden: this needs the %s role; you are signed in as %s", need, have))
}

// checkCSRF guards every state-changing request. Form posts must carry
// the _csrf field, an HMAC of the session cookie (signed in) or of the
// pre-session cookie (signing in, basic auth, auth off): a token is valid
// for one session only and dies at sign-out. API posts must be JSON,
// which a cross-site form cannot send without a CORS preflight the
// console never grants; crossOrigin additionally rejects cross-origin
// browser requests. Page requests get a pre-session cookie when they
// have none, so that pages can embed a token.
func (s *Server) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		bind, _ := c.Get(ctxSession).(string)
		if bind == "" {
			if v := cookieValue(c, preCookie); len(v) >= 32 {
				bind = v
			}
		}
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			if bind == "" && !isAPI(c) {
				bind = randomToken()
				setCookie(c, preCookie, bind, time.Time{}, 0)
			}
		default:
			if strings.HasPrefix(req.URL.Path, "/api/") {
				ct := req.Header.Get(echo.HeaderContentType)
				if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), echo.MIMEApplicationJSON) {
					return echo.NewHTTPError(http.StatusUnsupportedMediaType, "the API accepts application/json only")
				}
				break
			}
			if err := parseForm(c); err != nil {
				return err
			}
			form := req.PostFormValue(csrfField)
			if bind == "" || form == "" || !httpauth.Equal(s.auth.csrfToken(bind), form) {
				return echo.NewHTTPError(http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
			}
		}
		if bind != "" {
			c.Set(ctxCSRF, s.auth.csrfToken(bind))
		}
		return next(c)
	}
}

func csrfOf(c echo.Context) string {
	t, _ := c.Get(ctxCSRF).(string)
	return t
}

// crossOrigin rejects with 403, through the central error handler (JSON
// for the API), the non-safe requests that a browser marks as
// cross-site (Sec-Fetch-Site, Origin), before authentication or a
// handler sees them: net/http's CrossOriginProtection decides.
func (s *Server) crossOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.cop.Check(c.Request()); err != nil {
			return echo.NewHTTPError(http.StatusForbidden, err.Error())
		}
		return next(c)
	}
}

// safeNext returns next if it is a path on this site, else "/". It must
// start with one "/" followed by neither "/" nor "\", and hold no control
// characters or white space, raw or percent-encoded: browsers drop tabs
// and newlines from URLs, so "/%09/evil.example/" would become
// "//evil.example/".
func safeNext(next string) string {
	if len(next) < 1 || next[0] != '/' {
		return "/"
	}
	dec, err := url.PathUnescape(next)
	if err != nil {
		return "/"
	}
	for _, v := range []string{next, dec} {
		if len(v) > 1 && (v[1] == '/' || v[1] == '\\') {
			return "/"
		}
		if !utf8.ValidString(v) {
			return "/"
		}
		for _, r := range v {
			if unicode.IsControl(r) || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) {
				return "/"
			}
		}
	}
	return next
}

func (s *Server) loginPage(c echo.Context) error {
	return render(c, http.StatusOK, views.LoginPage(s.page(c, "login"), safeNext(c.QueryParam("next")), ""))
}

func (s *Server) login(c echo.Context) error {
	next := safeNext(c.FormValue("next"))
	if !s.auth.enabled() {
		return c.Redirect(http.StatusSeeOther, next)
	}
	// The form asks for a token only: it claims no identity beyond the
	// address.
	keys := []lockout.Key{lockout.Addr(c.RealIP())}
	token := c.FormValue("token") // read before the guard's lock: it reads the body
	var cr Credential
	ok, err := s.judge(c, "sign-in form", func() bool {
		var ok bool
		cr, ok = s.auth.match("", token)
		return ok
	}, keys)
	if err != nil {
		return err
	}
	if !ok {
		return render(c, http.StatusUnauthorized, views.LoginPage(s.page(c, "login"), next, "That token is not valid."))
	}
	if old, _ := c.Get(ctxSession).(string); old != "" {
		s.auth.endSession(old)
	}
	v, exp := s.auth.newSession(identity{Role: cr.Role, Name: cr.Name, Method: "token"})
	setCookie(c, sessionCookie, v, exp, 0)
	// The pre-session value is spent: the next anonymous visit gets a new one.
	setCookie(c, preCookie, "", time.Time{}, -1)
	return c.Redirect(http.StatusSeeOther, next)
}

// loginBasic asks the browser for basic-auth credentials, then goes home.
func (s *Server) loginBasic(c echo.Context) error {
	if identityOf(c).Method == "basic" || !s.auth.enabled() {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="freqcap console", charset="UTF-8"`)
	return echo.NewHTTPError(http.StatusUnauthorized, "sign in with your user name and password")
}

// logout ends the session and replaces the pre-session cookie, so no CSRF
// token issued before survives.
func (s *Server) logout(c echo.Context) error {
	if v := cookieValue(c, sessionCookie); v != "" {
		s.auth.endSession(v)
	}
	setCookie(c, sessionCookie, "", time.Time{}, -1)
	setCookie(c, preCookie, randomToken(), time.Time{}, 0)
	return c.Redirect(http.StatusSeeOther, "/login")
}

// ParseCredentials parses credentials given as
// "name:secret:role,name:secret:role" (role viewer, checker or admin):
// the --token and --basic-auth flags. The secret may contain ':' but not
// ','. Errors name the entry by its position and never repeat its text,
// which holds a secret.
func ParseCredentials(s string) ([]Credential, error) {
	var creds []Credential
	for n, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, ":")
		i := strings.LastIndexByte(rest, ':')
		if !ok || i < 0 || name == "" || i == 0 {
			return nil, fmt.Errorf(`console: credential entry %d: want "name:secret:role"`, n+1)
		}
		role, err := ParseRole(rest[i+1:])
		if err != nil {
			return nil, fmt.Errorf(`console: credential entry %d: unknown role, want viewer, checker or admin (format "name:secret:role")`, n+1)
		}
		creds = append(creds, Credential{Role: role, Name: name, Secret: rest[:i]})
	}
	return creds, nil
}

// ParseBasicAuth is ParseCredentials, for --basic-auth.
func ParseBasicAuth(s string) ([]Credential, error) { return ParseCredentials(s) }
