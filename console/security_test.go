package console

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/faulty"
	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/internal/lockout"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

const jsonCT = "application/json"

func (f *fixture) api(t *testing.T, method, path, token, body string) (*http.Response, string) {
	t.Helper()
	res := f.do(t, req{method: method, path: path, body: body, bearer: token, header: map[string]string{"Content-Type": jsonCT}})
	return res, readBody(t, res)
}

// TestRoles: viewers and checkers read (a checker is a viewer since POST
// /api/v1/check was retired), admins also reset, audited by name.
func TestRoles(t *testing.T) {
	f := newFixture(t, testCredentials())
	inspect := "/api/v1/inspect?policy=push&user=r1"
	reset := `{"policy":"push","subject":{"user":"r1"}}`
	tests := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"viewer inspects", http.MethodGet, inspect, viewerToken, "", 200},
		{"checker inspects", http.MethodGet, inspect, checkerToken, "", 200},
		{"anonymous may not inspect", http.MethodGet, inspect, "", "", 401},
		{"viewer may not reset", http.MethodPost, "/api/v1/reset", viewerToken, reset, 403},
		{"checker may not reset", http.MethodPost, "/api/v1/reset", checkerToken, reset, 403},
		{"anonymous may not reset", http.MethodPost, "/api/v1/reset", "", reset, 401},
		{"admin resets", http.MethodPost, "/api/v1/reset", adminToken, reset, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body := f.api(t, tc.method, tc.path, tc.token, tc.body)
			if res.StatusCode != tc.status {
				t.Errorf("%s %s = %d, want %d: %s", tc.method, tc.path, res.StatusCode, tc.status, body)
			}
		})
	}
	entries := f.audit.Entries()
	if len(entries) != 1 {
		t.Fatalf("audit log = %+v, want 1 entry (the reset)", entries)
	}
	if e := entries[0]; e.Name != "alice" || e.Action != "reset" || e.Role != "admin" || e.Outcome != "ok" || e.Via != "token" || e.Subject["user"] != "r1" {
		t.Errorf("audit entry = %+v, want alice's reset (admin, token): ok", e)
	}
	// The role is named in the 403.
	if _, body := f.api(t, http.MethodPost, "/api/v1/reset", checkerToken, reset); !strings.Contains(body, "needs the admin role") {
		t.Errorf("checker reset refusal = %s, want it to name the admin role", body)
	}
}

// TestAPIReset: the JSON reset has the form's scoping and is audited.
func TestAPIReset(t *testing.T) {
	f := newFixture(t, testCredentials())
	f.allow(t, "push", push, 2)
	res, body := f.api(t, http.MethodPost, "/api/v1/reset", adminToken, `{"policy":"push","subject":{"user":"`+push["user"]+`"}}`)
	var out ResetJSON
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("POST /api/v1/reset = %d %s, want 200", res.StatusCode, body)
	}
	if strings.Join(out.Reset, ",") != "recv-1m,recv-24h" || strings.Join(out.Kept, ",") != "content-59s,content-59m" {
		t.Errorf("reset = %+v, want the user's rules reset and the content rules kept", out)
	}
	ins, err := f.lim.Admin().Inspect(context.Background(), f.policies["push"], push)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ins.Rules {
		want := int64(0)
		if strings.HasPrefix(r.Rule, "content") {
			want = 2
		}
		if r.Used != want {
			t.Errorf("after the API reset %s used = %d, want %d", r.Rule, r.Used, want)
		}
	}
	e := f.audit.Entries()
	if len(e) != 1 || e[0].Action != "reset" || e[0].Name != "alice" || strings.Join(e[0].Rules, ",") != "recv-1m,recv-24h" {
		t.Errorf("audit = %+v, want alice's reset of recv-1m, recv-24h", e)
	}
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"no policy", `{"subject":{"user":"u"}}`, 400},
		{"unknown policy", `{"policy":"nope","subject":{"user":"u"}}`, 404},
		{"no shard value", `{"policy":"push","subject":{"content":"c"}}`, 400},
		{"unknown dimension", `{"policy":"push","subject":{"user":"u","device":"d"}}`, 400},
		{"trailing data", `{"policy":"push","subject":{"user":"u"}} {}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res, body := f.api(t, http.MethodPost, "/api/v1/reset", adminToken, tc.body); res.StatusCode != tc.status {
				t.Errorf("POST /api/v1/reset %s = %d %s, want %d", tc.body, res.StatusCode, body, tc.status)
			}
		})
	}
	if n := len(f.audit.Entries()); n != 1 {
		t.Errorf("refused resets were audited: %d entries, want 1", n)
	}
}

// TestAuditPage: its own page, filterable, naming people, reloaded from
// the file after a restart.
func TestAuditPage(t *testing.T) {
	f := newFixture(t, testCredentials())
	for _, u := range []string{"a1", "a2"} {
		if res, body := f.api(t, http.MethodPost, "/api/v1/reset", adminToken, `{"policy":"push","subject":{"user":"`+u+`"}}`); res.StatusCode != 200 {
			t.Fatalf("reset %s = %d %s", u, res.StatusCode, body)
		}
	}
	// A check, as audit files written before POST /api/v1/check was
	// retired hold them.
	if err := f.audit.Record(AuditEntry{At: t0, Actor: "billing (checker, token)", Name: "billing", Role: "checker", Via: "token",
		Action: "check", Policy: "api", Subject: sdk.Subject{"user": "a2", "campaign": "x"}, Outcome: "allowed"}); err != nil {
		t.Fatal(err)
	}
	rows := func(body string) int { return strings.Count(body, `<td class="who">`) }
	tests := []struct {
		path string
		rows int
		want string
	}{
		{"/audit", 3, "alice (admin, token)"},
		{"/audit?value=a2", 2, "billing (checker, token)"},
		{"/audit?policy=push&user=a1", 1, "user=a1"},
		{"/audit?who=billing", 1, "check"},
		{"/audit?action=reset", 2, "reset"},
		{"/audit?value=nobody", 0, `id="no-audit"`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			res := f.do(t, req{path: tc.path, bearer: viewerToken})
			body := readBody(t, res)
			if res.StatusCode != 200 || rows(body) != tc.rows || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s = %d with %d rows, want 200 with %d rows containing %q:\n%s", tc.path, res.StatusCode, rows(body), tc.rows, tc.want, body)
			}
		})
	}
	// The subject page lists this subject's entries and links here.
	body := readBody(t, f.do(t, req{path: "/subject?policy=push&user=a1", bearer: viewerToken}))
	if rows(body) != 1 || !strings.Contains(body, `href="/audit?policy=push&amp;user=a1"`) {
		t.Errorf("subject page: %d audit rows, want 1 and a link to /audit:\n%s", rows(body), body)
	}

	// A restart: a new console loads the file the first one wrote.
	restored := NewAuditLog(nil, 0)
	n, bad, err := restored.Load(strings.NewReader(f.auditBuf.String() + "not json\n"))
	if err != nil || n != 3 || bad != 1 {
		t.Fatalf("Load() = %d, %d, %v; want 3 entries and 1 skipped line", n, bad, err)
	}
	g := newFixtureWith(t, testCredentials(), nil, restored)
	body = readBody(t, g.do(t, req{path: "/audit?value=a1", bearer: viewerToken}))
	if rows(body) != 1 || !strings.Contains(body, "alice (admin, token)") {
		t.Errorf("audit page after a restart:\n%s", body)
	}
}

// TestAuditKeepsResetsApart: a flood of checks does not push resets out.
func TestAuditKeepsResetsApart(t *testing.T) {
	a := NewAuditLog(nil, 3)
	_ = a.Record(AuditEntry{At: t0, Action: "reset", Policy: "p"})
	for i := range 10 {
		_ = a.Record(AuditEntry{At: t0.Add(time.Duration(i+1) * time.Second), Action: "check", Policy: "p"})
	}
	e := a.Entries()
	if len(e) != 4 || e[3].Action != "reset" || !e[0].At.Equal(t0.Add(10*time.Second)) {
		t.Errorf("Entries() = %+v, want 3 newest checks then the reset", e)
	}
}

func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/policies", "/policies"},
		{"/subject?policy=push&user=1", "/subject?policy=push&user=1"},
		{"", "/"},
		{"policies", "/"},
		{"//evil.example/", "/"},
		{"/\\evil.example/", "/"},
		{"https://evil.example/", "/"},
		{"/%09/evil.example/", "/"},
		{"/\t/evil.example/", "/"},
		{"/%0a/evil.example/", "/"},
		{"/%2F/evil.example/", "/"},
		{"/%5Cevil.example/", "/"},
		{"/%20/x", "/"},
		{"/a%E2%80%AEb", "/"},
		{"/%zz", "/"},
	} {
		if got := safeNext(tc.in); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCredentialChecks(t *testing.T) {
	const secret = "the-same-secret-123"
	_, err := New(Config{Limiter: sdk.New(memory.New(nil)), Policies: newFixture(t, nil).srv.snap().order, Credentials: []Credential{
		{Role: RoleViewer, Name: "v", Secret: secret}, {Role: RoleAdmin, Name: "a", Secret: secret},
	}})
	if err == nil || !strings.Contains(err.Error(), "same secret") || strings.Contains(err.Error(), secret) {
		t.Errorf("New() with a shared secret = %v, want a refusal that does not show the secret", err)
	}
	for _, in := range []string{"alice:hunter2-password:adm1n", "alice:hunter2-password", "hunter2-password"} {
		_, err := ParseCredentials(in)
		if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "adm1n") || strings.Contains(err.Error(), "password") {
			t.Errorf("ParseCredentials(%q) = %v, want an error without any part of the entry", in, err)
		}
	}
	if _, err := ParseRole("s3cr3t-part"); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("ParseRole() = %v, want an error without the input", err)
	}
}

// TestHostCheck: with authentication off, only loopback host names are
// answered (DNS rebinding); with it on, any.
func TestHostCheck(t *testing.T) {
	off, on := newFixture(t, nil), newFixture(t, testCredentials())
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:8080", true}, {"127.0.0.1", true}, {"127.9.9.9:80", true}, {"localhost:8080", true}, {"LOCALHOST", true},
		{"[::1]:8080", true}, {"[::1]", true},
		{"evil.example", false}, {"evil.example:8080", false}, {"localhost.evil.example", false}, {"10.0.0.1:8080", false}, {"127.0.0.1.evil.example", false},
	} {
		res := off.do(t, req{path: "/api/v1/policies", host: tc.host})
		if got := res.StatusCode == 200; got != tc.ok {
			t.Errorf("auth off, Host %q: GET = %d, want ok=%v", tc.host, res.StatusCode, tc.ok)
		}
		if tc.ok {
			continue
		}
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("auth off, Host %q: status %d, want 421", tc.host, res.StatusCode)
		}
		if res := on.do(t, req{path: "/api/v1/policies", host: tc.host, bearer: viewerToken}); res.StatusCode != 200 {
			t.Errorf("auth on, Host %q: GET = %d, want 200", tc.host, res.StatusCode)
		}
	}
	// A rebinding page cannot reset either.
	res := off.do(t, req{method: http.MethodPost, path: "/api/v1/reset", host: "evil.example", body: `{"policy":"push","subject":{"user":"u"}}`, header: map[string]string{"Content-Type": jsonCT}})
	if res.StatusCode != http.StatusMisdirectedRequest || len(off.audit.Entries()) != 0 {
		t.Errorf("rebinding reset = %d, audit %d entries; want 421 and none", res.StatusCode, len(off.audit.Entries()))
	}
}

// TestSubjectValuesExact: the console and the API take values exactly as
// given, so both see the subject the SDK counted.
func TestSubjectValuesExact(t *testing.T) {
	f := newFixture(t, nil)
	spaced := sdk.Subject{"user": " u1 ", "content": "c"}
	if d, err := f.lim.Take(context.Background(), f.policies["push"], sdk.Attempt{Subject: spaced}); err != nil || !d.Allowed {
		t.Fatalf("Take(%q) = %+v, %v", spaced, d, err)
	}
	body := readBody(t, f.do(t, req{path: "/subject?" + subjectQuery("push", spaced)}))
	if u, _, _ := ruleRow(t, body, "recv-1m"); u != "1" {
		t.Errorf("console lookup of %q: recv-1m used %s, want 1 (the service's subject)", spaced["user"], u)
	}
	if !strings.Contains(body, `id="hidden-chars"`) || !strings.Contains(body, `<mark class="esc" title="invisible, control or direction-changing character">\u0020</mark>u1<mark`) {
		t.Errorf("the spaces around the user are not shown:\n%s", body)
	}
	trimmed := readBody(t, f.do(t, req{path: "/subject?policy=push&user=u1&content=c"}))
	if u, _, _ := ruleRow(t, trimmed, "recv-1m"); u != "0" {
		t.Errorf("console lookup of \"u1\": recv-1m used %s, want 0 (another subject)", u)
	}
	// A reset through the form resets the spaced subject, not "u1".
	cs := f.csrf(t)
	form := url.Values{"policy": {"push"}, "user": {" u1 "}, "confirm": {"yes"}, csrfField: {f.tok(cs)}}
	if res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /reset = %d", res.StatusCode)
	}
	if e := f.audit.Entries(); len(e) < 1 || e[0].Subject["user"] != " u1 " {
		t.Errorf("audit = %+v, want the reset of \" u1 \"", e)
	}
	// Invalid UTF-8 is refused by every door.
	for _, path := range []string{"/subject?policy=push&user=u%FF", "/api/v1/inspect?policy=push&user=u%FF", "/reset?policy=push&user=u%FF", "/subject?policy=push&user=u%EF%BF%BD"} {
		if res := f.do(t, req{path: path}); res.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", path, res.StatusCode)
		}
	}
}

// TestHiddenCharactersShown: bidi controls and invisible characters in
// ids are shown as escapes, never raw (except inside form values, which
// must round-trip).
func TestHiddenCharactersShown(t *testing.T) {
	f := newFixture(t, nil)
	s := sdk.Subject{"user": "user\u202Eexe.txt", "content": "a\u200Bb"}
	f.allow(t, "push", s, 1)
	cs := f.csrf(t)
	form := url.Values{"policy": {"push"}, "user": {s["user"]}, "confirm": {"yes"}, csrfField: {f.tok(cs)}}
	if res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /reset = %d", res.StatusCode)
	}
	attr := regexp.MustCompile(`value="[^"]*"`)
	for _, path := range []string{"/subject?" + subjectQuery("push", s), "/reset?" + subjectQuery("push", s), "/audit", "/live/subject?" + subjectQuery("push", s)} {
		t.Run(path, func(t *testing.T) {
			body := readBody(t, f.do(t, req{path: path}))
			if !strings.Contains(body, `>\u202E</mark>`) {
				t.Errorf("GET %s: no visible \\u202E:\n%s", path, body)
			}
			if outside := attr.ReplaceAllString(body, ""); strings.ContainsAny(outside, "\u202E\u200B") {
				t.Errorf("GET %s: a raw bidi or zero-width character outside form values", path)
			}
		})
	}
}

// TestBruteForce: failed attempts are logged, and past a few the address
// waits (429) however good its next credentials; time, not sleep, lifts it.
func TestBruteForce(t *testing.T) {
	f := newFixture(t, testCredentials())
	bad := func() int { return f.do(t, req{path: "/api/v1/policies", bearer: "wrong-token-xyz"}).StatusCode }
	for i := range lockout.FreeFailures + 1 {
		if got := bad(); got != http.StatusUnauthorized {
			t.Fatalf("bad attempt %d = %d, want 401", i+1, got)
		}
	}
	res := f.do(t, req{path: "/api/v1/policies", bearer: viewerToken})
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("good token while locked out = %d (Retry-After %q), want 429 after 1s", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Basic auth and the sign-in form share the count.
	if got := f.do(t, req{path: "/", basic: [2]string{"alice", adminToken}}).StatusCode; got != http.StatusTooManyRequests {
		t.Errorf("basic auth while locked out = %d, want 429", got)
	}
	f.clock.Advance(time.Second)
	if got := bad(); got != http.StatusUnauthorized {
		t.Fatalf("bad attempt after the lockout = %d, want 401", got)
	}
	if res := f.do(t, req{path: "/api/v1/policies", bearer: viewerToken}); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "2" {
		t.Fatalf("the next lockout = %d (Retry-After %q), want 429 for 2s", res.StatusCode, res.Header.Get("Retry-After"))
	}
	f.clock.Advance(2 * time.Second)
	if got := f.do(t, req{path: "/api/v1/policies", bearer: viewerToken}).StatusCode; got != 200 {
		t.Fatalf("good token after the lockout = %d, want 200", got)
	}
	// The success forgot nothing: the next failure locks for 4s.
	if got := bad(); got != http.StatusUnauthorized {
		t.Errorf("bad attempt after a success = %d, want 401", got)
	}
	if res := f.do(t, req{path: "/api/v1/policies", bearer: viewerToken}); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "4" {
		t.Errorf("after a success and one more failure = %d (Retry-After %q), want 429 for 4s", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// lockout.ForgetAfter without failures forgets the address.
	f.clock.Advance(lockout.ForgetAfter + time.Second)
	for i := range lockout.FreeFailures {
		if got := bad(); got != http.StatusUnauthorized {
			t.Fatalf("bad attempt %d after %v = %d, want 401", i+1, lockout.ForgetAfter, got)
		}
	}
	if got := f.do(t, req{path: "/api/v1/policies", bearer: viewerToken}).StatusCode; got != 200 {
		t.Errorf("good token after %d fresh failures = %d, want 200", lockout.FreeFailures, got)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, `msg="console: failed authentication"`); n != 2*lockout.FreeFailures+3 {
		t.Errorf("%d failed-authentication lines, want %d:\n%s", n, 2*lockout.FreeFailures+3, logs)
	}
	if !strings.Contains(logs, "remote=192.0.2.1") || strings.Contains(logs, "wrong-token-xyz") {
		t.Errorf("log lines must name the address and never the attempted secret:\n%s", logs)
	}
}

// TestLockoutConcurrentGuesses: guesses sent all at once from one
// address get no more checked than the same guesses in a row: the free
// failures, then 429s (each attempt is judged after the failures of
// those before it, not beside them).
func TestLockoutConcurrentGuesses(t *testing.T) {
	f := newFixture(t, testCredentials())
	const n = 200
	codes := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes <- f.do(t, req{path: "/api/v1/policies", bearer: "wrong-token-" + strconv.Itoa(i), remote: "203.0.113.9:5000"}).StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	// The clock does not move: after the free failures the sixth starts a
	// lockout, and every later attempt is refused unchecked.
	if count[http.StatusUnauthorized] != lockout.FreeFailures+1 || count[http.StatusTooManyRequests] != n-lockout.FreeFailures-1 {
		t.Errorf("%d simultaneous guesses from one address: %v, want %d checked (401) and the rest 429", n, count, lockout.FreeFailures+1)
	}
}

// TestLockoutIgnoresSuccesses: good credentials between guesses buy no
// more guesses. The attack of issue 22 (5 wrong bearer tokens, then one
// valid viewer token, over and over) gets 429 after the free failures;
// guesses at one basic-auth user from many addresses lock that user
// name; a legitimate user from a clean address still signs in.
func TestLockoutIgnoresSuccesses(t *testing.T) {
	f := newFixture(t, testCredentials())
	const attacker = "198.51.100.7:4000"
	guess := func(tok, remote string) int {
		return f.do(t, req{path: "/api/v1/policies", bearer: tok, remote: remote}).StatusCode
	}
	var codes []int
	guesses, limited := 0, 0
	for round := range 20 {
		for i := range lockout.FreeFailures {
			code := guess(fmt.Sprintf("guess-%d-%d-admin", round, i), attacker)
			if code == http.StatusUnauthorized {
				guesses++
			}
			if code == http.StatusTooManyRequests {
				limited++
			}
		}
		codes = append(codes, guess(viewerToken, attacker))
	}
	if guesses > lockout.FreeFailures+1 || limited == 0 {
		t.Errorf("alternating attack: %d guesses checked and %d answered 429 (valid-token answers %v), want at most %d checked", guesses, limited, codes, lockout.FreeFailures+1)
	}
	if codes[0] != http.StatusOK || codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Errorf("valid-token answers %v, want 200 first, then 429 once locked", codes)
	}
	// Another address is not affected.
	if got := guess(viewerToken, "203.0.113.9:5000"); got != http.StatusOK {
		t.Errorf("valid token from a clean address = %d, want 200", got)
	}
	// Basic auth: guesses at alice spread over addresses lock the name,
	// not those addresses for others.
	for i := range lockout.FreeFailures + 1 {
		res := f.do(t, req{path: "/api/v1/policies", basic: [2]string{"alice", fmt.Sprintf("wrong-password-%d", i)}, remote: fmt.Sprintf("198.18.0.%d:1", i+1)})
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("basic guess %d at alice = %d, want 401", i+1, res.StatusCode)
		}
	}
	res := f.do(t, req{path: "/api/v1/policies", basic: [2]string{"alice", "another-guess"}, remote: "198.18.0.99:1"})
	if body := readBody(t, res); res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "for this user name") {
		t.Errorf("basic guess at alice from a new address after %d failures = %d %s, want 429 for the user name", lockout.FreeFailures+1, res.StatusCode, body)
	}
	if got := f.do(t, req{path: "/api/v1/policies", bearer: adminToken, remote: "198.18.0.1:1"}).StatusCode; got != http.StatusOK {
		t.Errorf("alice's bearer token from an address that guessed once = %d, want 200", got)
	}
	// The sign-in form shares the address's count.
	form := func(remote, tok string) int {
		pre := f.csrf(t)
		return f.do(t, req{method: http.MethodPost, path: "/login", remote: remote, cookies: []*http.Cookie{pre}, form: url.Values{csrfField: {f.tok(pre)}, "token": {tok}}}).StatusCode
	}
	if got := form(attacker, viewerToken); got != http.StatusTooManyRequests {
		t.Errorf("sign-in form from the locked address = %d, want 429", got)
	}
	if got := form("203.0.113.10:6000", viewerToken); got != http.StatusSeeOther {
		t.Errorf("sign-in form from a clean address = %d, want 303", got)
	}
}

// TestCSRFBoundToSession: a token is valid for one session, dies at
// sign-out, and cookies carry __Host- over TLS.
func TestCSRFBoundToSession(t *testing.T) {
	f := newFixture(t, testCredentials())
	pre := f.csrf(t)
	login := func(token string) *http.Response {
		return f.do(t, req{method: http.MethodPost, path: "/login", form: url.Values{"token": {token}, csrfField: {f.tok(pre)}}, cookies: []*http.Cookie{pre}})
	}
	s1 := cookie(login(adminToken), sessionCookie)
	s2 := cookie(login(adminToken), sessionCookie)
	if s1 == nil || s2 == nil || f.tok(s1) == f.tok(s2) || f.tok(s1) == f.tok(pre) {
		t.Fatalf("sessions %v %v: want two sessions with tokens of their own", s1, s2)
	}
	reset := func(sess *http.Cookie, token string) int {
		form := url.Values{"policy": {"push"}, "user": {"u"}, "confirm": {"yes"}, csrfField: {token}}
		return f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{sess, pre}}).StatusCode
	}
	if got := reset(s1, f.tok(s2)); got != http.StatusForbidden {
		t.Errorf("reset with another session's token = %d, want 403", got)
	}
	if got := reset(s1, f.tok(pre)); got != http.StatusForbidden {
		t.Errorf("reset with the pre-session token = %d, want 403", got)
	}
	// The page embeds the session's token.
	if body := readBody(t, f.do(t, req{path: "/reset?policy=push&user=u", cookies: []*http.Cookie{s1, pre}})); !strings.Contains(body, `value="`+f.tok(s1)+`"`) {
		t.Errorf("reset page does not carry the session's token")
	}
	if got := reset(s1, f.tok(s1)); got != http.StatusSeeOther {
		t.Errorf("reset with the session's token = %d, want 303", got)
	}
	// Sign-out ends the session and replaces the pre-session cookie.
	res := f.do(t, req{method: http.MethodPost, path: "/logout", form: url.Values{csrfField: {f.tok(s1)}}, cookies: []*http.Cookie{s1, pre}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /logout = %d", res.StatusCode)
	}
	if np := cookie(res, preCookie); np == nil || np.Value == pre.Value || len(np.Value) < 32 {
		t.Errorf("sign-out pre-session cookie = %v, want a new one", np)
	}
	if got := reset(s1, f.tok(s1)); got != http.StatusForbidden && got != http.StatusUnauthorized {
		t.Errorf("reset with the ended session's token = %d, want a refusal", got)
	}

	// Over TLS the cookies are __Host- prefixed, Secure, Path=/.
	tlsState := &tls.ConnectionState{}
	res = f.do(t, req{path: "/login", tls: tlsState})
	hp := cookie(res, hostPrefix+preCookie)
	if hp == nil || !hp.Secure || hp.Path != "/" || hp.Domain != "" || cookie(res, preCookie) != nil {
		t.Fatalf("TLS cookies = %v, want %s%s, Secure, Path=/", res.Cookies(), hostPrefix, preCookie)
	}
	res = f.do(t, req{method: http.MethodPost, path: "/login", tls: tlsState, form: url.Values{"token": {adminToken}, csrfField: {f.tok(hp)}}, cookies: []*http.Cookie{hp}})
	hs := cookie(res, hostPrefix+sessionCookie)
	if res.StatusCode != http.StatusSeeOther || hs == nil || !hs.Secure {
		t.Fatalf("TLS sign-in = %d, cookies %v", res.StatusCode, res.Cookies())
	}
	if body := readBody(t, f.do(t, req{path: "/", tls: tlsState, cookies: []*http.Cookie{hs}})); !strings.Contains(body, "alice (admin, session)") {
		t.Errorf("TLS session not recognised")
	}
	// An unprefixed session cookie is not read over TLS.
	plain := &http.Cookie{Name: sessionCookie, Value: hs.Value}
	if res := f.do(t, req{path: "/", tls: tlsState, cookies: []*http.Cookie{plain}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("TLS request with an unprefixed session cookie = %d, want 303 to sign in", res.StatusCode)
	}
}

// errDial is an outage's error: it names a socket address, which must
// stay in the log.
var errDial = errors.New("dial tcp 10.9.8.7:6379: connect: connection refused")

// newFlakyFixture is a fixture whose memory backend can be taken down
// (faulty.Backend): then every call fails with errDial.
func newFlakyFixture(t *testing.T, creds []Credential) (*fixture, *faulty.Backend) {
	t.Helper()
	var fb *faulty.Backend
	f := newFixtureWith(t, creds, func(clk *fakeclock.Clock) *faulty.Backend {
		fb = faulty.New(memory.New(&memory.Options{Clock: clk}))
		return fb
	}, nil)
	return f, fb
}

// TestOutage: backend addresses stay in the log, one line per kind every
// logEvery, and the overview forgets the outage once the backend answers.
func TestOutage(t *testing.T) {
	f, fb := newFlakyFixture(t, testCredentials())
	fb.Fail(errDial)
	const addr = "10.9.8.7"
	pages := []struct {
		name string
		r    req
	}{
		{"inspect", req{path: "/api/v1/inspect?policy=push&user=u", bearer: viewerToken}},
		{"subject page", req{path: "/subject?policy=push&user=u", bearer: viewerToken}},
		{"live subject", req{path: "/live/subject?policy=push&user=u", bearer: viewerToken}},
		{"overview", req{path: "/", bearer: viewerToken}},
		{"api reset", req{method: http.MethodPost, path: "/api/v1/reset", bearer: adminToken, body: `{"policy":"push","subject":{"user":"u"}}`}},
		{"audit", req{path: "/audit", bearer: viewerToken}},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			p.r.header = map[string]string{"Content-Type": jsonCT}
			res := f.do(t, p.r)
			body := readBody(t, res)
			if strings.Contains(body, addr) {
				t.Errorf("%s: the answer (%d) names the backend's address:\n%s", p.name, res.StatusCode, body)
			}
			if res.StatusCode == http.StatusOK && p.name != "overview" && p.name != "audit" && p.name != "live subject" {
				t.Errorf("%s = 200 during an outage", p.name)
			}
		})
	}
	if !strings.Contains(f.logs.String(), addr) {
		t.Errorf("the log lacks the backend error:\n%s", f.logs.String())
	}
	var outcomes []string
	for _, e := range f.audit.Filter(AuditFilter{Action: "reset"}) {
		outcomes = append(outcomes, e.Policy+": "+e.Outcome)
	}
	if got, want := strings.Join(outcomes, "; "), "push: failed: backend error"; got != want {
		t.Errorf("audited resets during the outage = %q, want %q", got, want)
	}
	// A burst of failures: one line per kind, then one with the count.
	f.logs.Reset()
	const inspect = "/api/v1/inspect?policy=push&user=u"
	for range 50 {
		f.api(t, http.MethodGet, inspect, viewerToken, "")
	}
	if n := strings.Count(f.logs.String(), "api inspect failed"); n != 0 {
		t.Errorf("%d lines within logEvery of the last, want 0:\n%s", n, f.logs.String())
	}
	f.clock.Advance(logEvery)
	f.api(t, http.MethodGet, inspect, viewerToken, "")
	if logs := f.logs.String(); strings.Count(logs, "api inspect failed") != 1 || !strings.Contains(logs, "suppressed=50") {
		t.Errorf("after logEvery: want one line with suppressed=50:\n%s", logs)
	}

	// The backend is back: the overview stops showing the outage as soon
	// as it answers a request, without waiting for a cache to expire.
	overview := func() string {
		return html.UnescapeString(readBody(t, f.do(t, req{path: "/", bearer: viewerToken})))
	}
	if !strings.Contains(overview(), backendUnavailable) {
		t.Fatalf("overview during the outage does not say so:\n%s", overview())
	}
	fb.Recover()
	if res := f.do(t, req{path: "/subject?policy=push&user=u", bearer: viewerToken}); res.StatusCode != 200 {
		t.Fatalf("subject page after recovery = %d", res.StatusCode)
	}
	if body := overview(); strings.Contains(body, backendUnavailable) || !strings.Contains(body, "<strong>memory</strong>") {
		t.Errorf("overview after the backend answered still shows the outage:\n%s", body)
	}
	// And without any request in between, within describeErrTTL.
	fb.Fail(errDial)
	f.clock.Advance(describeTTL)
	if !strings.Contains(overview(), backendUnavailable) {
		t.Fatalf("overview during the second outage does not say so")
	}
	fb.Recover()
	f.clock.Advance(describeErrTTL)
	if strings.Contains(overview(), backendUnavailable) {
		t.Errorf("overview %v after recovery still shows the outage", describeErrTTL)
	}
}

// TestHeadAndFavicon: HEAD is answered wherever GET is; the favicon is
// served and linked.
func TestHeadAndFavicon(t *testing.T) {
	f := newFixture(t, nil)
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	for _, path := range []string{"/", "/subject", "/policies", "/audit", "/healthz", "/static/app.js", "/favicon.ico", "/api/v1/policies", "/metrics"} {
		res, err := http.Head(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s = %d, want 200", path, res.StatusCode)
		}
	}
	if res, err := http.Head(ts.URL + "/nope"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("HEAD /nope = %v, %v; want 404", res, err)
	}
	res := f.do(t, req{path: "/favicon.ico"})
	body := readBody(t, res)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg") {
		t.Errorf("GET /favicon.ico = %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if res := f.do(t, req{path: "/static/favicon.svg"}); res.StatusCode != 200 {
		t.Errorf("GET /static/favicon.svg = %d", res.StatusCode)
	}
	if page := readBody(t, f.do(t, req{path: "/"})); !strings.Contains(page, `<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">`) {
		t.Errorf("pages do not link the icon")
	}
}

// TestGCRAShownConsistently: a GCRA rule shows the limit decisions report
// (burst+1) and its window everywhere, with the rate explained.
func TestGCRAShownConsistently(t *testing.T) {
	f := newFixture(t, nil)
	pol := readBody(t, f.do(t, req{path: "/policies"}))
	if !regexp.MustCompile(`<td class="rule"><strong>burst</strong></td><td class="algorithm" data-label="Algorithm"><code>gcra</code><div class="muted">rate 30 per 1m, burst 14: up to 15 at once \(the limit shown\), then one every 2s</div></td><td class="num limit" data-label="Limit">15</td><td class="window" data-label="Window">30s</td>`).MatchString(pol) || !strings.Contains(pol, `id="gcra-note"`) {
		t.Errorf("policies page does not show burst as 15 / 30s:\n%s", pol)
	}
	if ov := readBody(t, f.do(t, req{path: "/"})); !strings.Contains(ov, "burst: 15 / 30s (GCRA 30 per 1m, burst 14)") {
		t.Errorf("overview does not show burst as 15 / 30s:\n%s", ov)
	}
	sub := readBody(t, f.do(t, req{path: "/subject?policy=api&user=g1"}))
	if _, l, _ := ruleRow(t, sub, "burst"); l != "15" {
		t.Errorf("subject page limit of burst = %s, want 15", l)
	}
	var out struct{ Policies []PolicyJSON }
	if err := json.Unmarshal([]byte(readBody(t, f.do(t, req{path: "/api/v1/policies"}))), &out); err != nil {
		t.Fatal(err)
	}
	for _, p := range out.Policies {
		for _, r := range p.Rules {
			if r.Name == "burst" && (r.Quota != 15 || r.QuotaWindowMS != 30000 || r.Limit != 30) {
				t.Errorf("/api/v1/policies burst = %+v, want limit 30, quota 15 over 30000 ms", r)
			}
			if r.Name == "recv-1m" && (r.Quota != 15 || r.QuotaWindowMS != 60000) {
				t.Errorf("/api/v1/policies recv-1m = %+v, want quota = limit, window", r)
			}
		}
	}
}

// TestLogRate: rateLog writes one line per key per interval and reports
// what it held back.
func TestLogRate(t *testing.T) {
	f := newFixture(t, nil)
	r := newRateLog(f.srv.log, f.clock.Now, time.Minute)
	f.logs.Reset()
	for range 5 {
		r.Warn("a", "line a")
		r.Warn("b", "line b")
	}
	f.clock.Advance(time.Minute)
	r.Warn("a", "line a")
	logs := f.logs.String()
	if strings.Count(logs, "line a") != 2 || strings.Count(logs, "line b") != 1 || !strings.Contains(logs, "suppressed=4") {
		t.Errorf("rate-limited log:\n%s", logs)
	}
}
