package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
)

// TestStaticNoListing: /static/ serves its files and never lists a
// directory.
func TestStaticNoListing(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/static/", http.StatusNotFound},
		{http.MethodHead, "/static/", http.StatusNotFound},
		{http.MethodGet, "/static/.", http.StatusNotFound},
		{http.MethodGet, "/static/nope.js", http.StatusNotFound},
		{http.MethodGet, "/static/app.js", http.StatusOK},
		{http.MethodGet, "/static/style.css", http.StatusOK},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			res := f.do(t, req{method: tc.method, path: tc.path})
			body := readBody(t, res)
			if res.StatusCode != tc.want {
				t.Errorf("%s %s = %d, want %d", tc.method, tc.path, res.StatusCode, tc.want)
			}
			if strings.Contains(body, `href="app.js"`) || strings.Contains(body, "<pre>") {
				t.Errorf("%s %s lists the directory:\n%s", tc.method, tc.path, body)
			}
		})
	}
}

// TestCrossOriginJSON: the API's cross-origin 403 has the API's JSON
// error body; a page's is an error page.
func TestCrossOriginJSON(t *testing.T) {
	f := newFixture(t, testCredentials())
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example"},
	} {
		h["Content-Type"] = jsonCT
		res := f.do(t, req{method: http.MethodPost, path: "/api/v1/reset", bearer: adminToken, header: h,
			body: `{"policy":"push","subject":{"user":"u"}}`})
		body := readBody(t, res)
		var e apiError
		if res.StatusCode != http.StatusForbidden || !strings.HasPrefix(res.Header.Get("Content-Type"), jsonCT) ||
			json.Unmarshal([]byte(body), &e) != nil || e.Status != http.StatusForbidden || !strings.Contains(e.Error, "cross-origin") {
			t.Errorf("cross-origin POST /api/v1/reset (%v) = %d %q %s, want 403 with a JSON error", h, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	}
	cs := f.csrf(t)
	res := f.do(t, req{method: http.MethodPost, path: "/logout", cookies: []*http.Cookie{cs}, form: url.Values{csrfField: {f.tok(cs)}},
		header: map[string]string{"Sec-Fetch-Site": "cross-site"}})
	if body := readBody(t, res); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "<html") || res.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("cross-origin POST /logout = %d, want 403 as an error page with the security headers:\n%s", res.StatusCode, body)
	}
	if len(f.audit.Entries()) != 0 {
		t.Errorf("a cross-origin check reached the handler: %+v", f.audit.Entries())
	}
}

// TestBackendDown503: the endpoints and pages that need the backend
// answer 503 when it fails (stats and reset used to answer 500), with
// the generic message; the address goes to the log only. First a real
// Redis server, killed; then a backend whose calls time out.
func TestBackendDown503(t *testing.T) {
	pols, err := seed.Policies()
	if err != nil {
		t.Fatal(err)
	}
	server := redistest.NewServer(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: server.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	var logs bytes.Buffer
	srv, err := New(Config{Limiter: sdk.New(fcredis.New(rdb, nil), sdk.WithPrefix("fc-down503")),
		Fleet: fleetOf(fcredis.New(rdb, nil), &fleet.Options{Prefix: "fc-down503"}), Policies: pols,
		Credentials: testCredentials(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	onRedis := &fixture{srv: srv, logs: &logs}
	flaky, fb := newFlakyFixture(t, testCredentials())
	check := func(t *testing.T, f *fixture, addr string) {
		t.Helper()
		for _, tc := range []struct {
			name string
			r    req
		}{
			{"stats", req{path: "/api/v1/stats?policy=push", bearer: viewerToken}},
			{"api reset", req{method: http.MethodPost, path: "/api/v1/reset", bearer: adminToken, body: `{"policy":"push","subject":{"user":"u"}}`, header: map[string]string{"Content-Type": jsonCT}}},
			{"inspect", req{path: "/api/v1/inspect?policy=push&user=u", bearer: viewerToken}},
		} {
			res := f.do(t, tc.r)
			body := readBody(t, res)
			var e apiError
			if tc.name == "stats" && res.StatusCode == http.StatusNotImplemented {
				continue // the memory backend keeps no statistics
			}
			if res.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, backendUnavailable) || e.Status != 503 {
				t.Errorf("%s with the backend down = %d %s, want 503 saying %q", tc.name, res.StatusCode, body, backendUnavailable)
			}
			if strings.Contains(body, addr) {
				t.Errorf("%s: the answer names the backend's address: %s", tc.name, body)
			}
		}
		cs := f.csrf(t)
		form := url.Values{"policy": {"push"}, "user": {"u"}, "confirm": {"yes"}, csrfField: {f.tok(cs)}}
		res := f.do(t, req{method: http.MethodPost, path: "/reset", form: form, cookies: []*http.Cookie{cs}, basic: [2]string{"alice", adminToken}})
		if body := readBody(t, res); res.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, addr) || !strings.Contains(html.UnescapeString(body), backendUnavailable) {
			t.Errorf("POST /reset with the backend down = %d, want 503 without the address:\n%s", res.StatusCode, body)
		}
		if !strings.Contains(f.logs.String(), addr) {
			t.Errorf("the log lacks the backend's error:\n%s", f.logs.String())
		}
	}
	t.Run("redis killed", func(t *testing.T) {
		if res := onRedis.do(t, req{path: "/api/v1/stats?policy=push", bearer: viewerToken}); res.StatusCode != http.StatusOK {
			t.Fatalf("stats with Redis up = %d", res.StatusCode)
		}
		server.Stop(t)
		check(t, onRedis, server.Addr())
	})
	t.Run("timeout", func(t *testing.T) {
		fb.Fail(fmt.Errorf("dial tcp 10.9.8.7:6379: %w", context.DeadlineExceeded))
		check(t, flaky, "10.9.8.7")
	})
}
