package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// Role is what a console user may do.
type Role int

const (
	// RoleNone: not signed in.
	RoleNone Role = iota
	// RoleViewer reads every page, the metrics, and uses the JSON API
	// (check and inspect), but cannot reset a subject.
	RoleViewer
	// RoleAdmin can also reset a subject.
	RoleAdmin
)

// String returns "viewer", "admin" or "none".
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses "viewer" or "admin".
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return RoleViewer, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("console: unknown role %q (want viewer or admin)", s)
}

// Credential is one accepted secret. It is accepted as a bearer token
// (Authorization: Bearer SECRET), in the console's sign-in form, and as
// HTTP basic auth with user Name and password Secret.
type Credential struct {
	Role Role
	// Name identifies the holder in the audit log, e.g. "alice" or
	// "admin-token".
	Name string
	// Secret is the token or password; at least 8 bytes.
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
	creds []Credential
	ttl   time.Duration
	now   func() time.Time

	mu       sync.Mutex
	sessions map[string]session // key: sha256 of the cookie value
}

func newAuthenticator(creds []Credential, ttl time.Duration, now func() time.Time) (*authenticator, error) {
	for i, c := range creds {
		if c.Role != RoleViewer && c.Role != RoleAdmin {
			return nil, fmt.Errorf("console: credential %d: role must be viewer or admin", i)
		}
		if len(c.Secret) < 8 {
			return nil, fmt.Errorf("console: credential %d (%s): secret shorter than 8 bytes", i, c.Role)
		}
		if c.Name == "" {
			creds[i].Name = c.Role.String()
		}
		if strings.ContainsAny(c.Name, ":\n") {
			return nil, fmt.Errorf("console: credential %d: name must not contain ':' or a newline", i)
		}
	}
	return &authenticator{creds: creds, ttl: ttl, now: now, sessions: map[string]session{}}, nil
}

func (a *authenticator) enabled() bool { return len(a.creds) > 0 }

// match returns the credential whose secret (and name, when name != "")
// matches. Every credential is compared, in constant time.
func (a *authenticator) match(name, secret string) (Credential, bool) {
	var found Credential
	ok := false
	for _, c := range a.creds {
		sm := subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) == 1
		nm := name == "" || subtle.ConstantTimeCompare([]byte(c.Name), []byte(name)) == 1
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

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

const (
	sessionCookie = "fc_session"
	csrfCookie    = "fc_csrf"
	csrfField     = "_csrf"
	ctxIdentity   = "fc.identity"
	ctxCSRF       = "fc.csrf"
)

var errBadCredentials = echo.NewHTTPError(http.StatusUnauthorized, "invalid credentials")

// authenticate resolves the request's identity: an Authorization header
// (bearer or basic) first, then the session cookie. With authentication
// off, every request is the local admin.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := identity{}
		if !s.auth.enabled() {
			id = identity{Role: RoleAdmin, Name: "local", Method: "none"}
		} else if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
			scheme, rest, _ := strings.Cut(h, " ")
			switch strings.ToLower(scheme) {
			case "bearer":
				cr, ok := s.auth.match("", strings.TrimSpace(rest))
				if !ok {
					return errBadCredentials
				}
				id = identity{Role: cr.Role, Name: cr.Name, Method: "token"}
			case "basic":
				user, pass, ok := c.Request().BasicAuth()
				if !ok {
					return errBadCredentials
				}
				cr, ok := s.auth.match(user, pass)
				if !ok {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="freqcap console", charset="UTF-8"`)
					return errBadCredentials
				}
				id = identity{Role: cr.Role, Name: cr.Name, Method: "basic"}
			default:
				return errBadCredentials
			}
		} else if ck, err := c.Cookie(sessionCookie); err == nil {
			if sid, ok := s.auth.session(ck.Value); ok {
				id = sid
				id.Method = "session"
			}
		}
		c.Set(ctxIdentity, id)
		return next(c)
	}
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
			case id.Role == RoleNone && !isAPI(c) && c.Request().Method == http.MethodGet:
				return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.RequestURI()))
			case id.Role == RoleNone:
				return echo.NewHTTPError(http.StatusUnauthorized, "authentication required")
			}
			return echo.NewHTTPError(http.StatusForbidden, fmt.Sprintf("forbidden: this needs the %s role; you are signed in as %s", r, id.Role))
		}
	}
}

// checkCSRF guards every state-changing request. Form posts must carry
// the _csrf field equal to the fc_csrf cookie (double submit; the cookie
// is SameSite=Strict and HttpOnly). API posts must be JSON, which a
// cross-site form cannot send without a CORS preflight the console never
// grants; crossOrigin additionally rejects cross-origin browser requests.
// Safe methods get a CSRF cookie, so that pages can embed the token.
func (s *Server) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		token := ""
		if ck, err := c.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
			token = ck.Value
		}
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			if token == "" && !isAPI(c) {
				token = randomToken()
				c.SetCookie(&http.Cookie{Name: csrfCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil})
			}
		default:
			if strings.HasPrefix(req.URL.Path, "/api/") {
				ct := req.Header.Get(echo.HeaderContentType)
				if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), echo.MIMEApplicationJSON) {
					return echo.NewHTTPError(http.StatusUnsupportedMediaType, "the API accepts application/json only")
				}
				break
			}
			req.Body = http.MaxBytesReader(c.Response(), req.Body, maxBody)
			form := req.PostFormValue(csrfField)
			if token == "" || form == "" || subtle.ConstantTimeCompare([]byte(token), []byte(form)) != 1 {
				return echo.NewHTTPError(http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
			}
		}
		c.Set(ctxCSRF, token)
		return next(c)
	}
}

func csrfOf(c echo.Context) string {
	t, _ := c.Get(ctxCSRF).(string)
	return t
}

// crossOrigin wraps h in net/http's cross-origin protection: non-safe
// requests that a browser marks as cross-site (Sec-Fetch-Site, Origin) are
// rejected with 403 before they reach a handler.
func crossOrigin(h http.Handler) http.Handler {
	return http.NewCrossOriginProtection().Handler(h)
}

// safeNext returns next if it is a local path, else "/".
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/"
	}
	return next
}

func (s *Server) loginPage(c echo.Context) error {
	return render(c, http.StatusOK, LoginPage(s.page(c, "login"), safeNext(c.QueryParam("next")), ""))
}

func (s *Server) login(c echo.Context) error {
	next := safeNext(c.FormValue("next"))
	if !s.auth.enabled() {
		return c.Redirect(http.StatusSeeOther, next)
	}
	cr, ok := s.auth.match("", c.FormValue("token"))
	if !ok {
		s.log.Warn("console: failed sign-in", "remote", c.RealIP())
		return render(c, http.StatusUnauthorized, LoginPage(s.page(c, "login"), next, "That token is not valid."))
	}
	v, exp := s.auth.newSession(identity{Role: cr.Role, Name: cr.Name, Method: "token"})
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: v, Path: "/", Expires: exp, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request().TLS != nil})
	// A fresh CSRF token for the new session.
	c.SetCookie(&http.Cookie{Name: csrfCookie, Value: randomToken(), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request().TLS != nil})
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

func (s *Server) logout(c echo.Context) error {
	if ck, err := c.Cookie(sessionCookie); err == nil {
		s.auth.endSession(ck.Value)
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/login")
}

// ParseBasicAuth parses basic-auth users given as
// "name:password:role,name:password:role" (role viewer or admin). The
// password may contain ':' but not ','.
func ParseBasicAuth(s string) ([]Credential, error) {
	var creds []Credential
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, ":")
		i := strings.LastIndexByte(rest, ':')
		if !ok || i < 0 || name == "" || i == 0 {
			return nil, errors.New(`console: basic auth: want "name:password:role"`)
		}
		role, err := ParseRole(rest[i+1:])
		if err != nil {
			return nil, err
		}
		creds = append(creds, Credential{Role: role, Name: name, Secret: rest[:i]})
	}
	return creds, nil
}
