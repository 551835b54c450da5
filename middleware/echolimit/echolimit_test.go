package echolimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/echolimit"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

const policyHeader = `"per-minute";q=2;w=60`

// TestMiddleware: echo routes limited by the request's header (the
// Limiter's key function) and by an echo path parameter (the adapter's).
func TestMiddleware(t *testing.T) {
	p, err := sdk.NewPolicy("api", []sdk.Rule{sdk.FixedWindow("per-minute", 2, time.Minute).By("client")})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))}))
	mw, err := httplimit.New(lim, p, func(r *http.Request) (sdk.Subject, error) {
		c := r.Header.Get("X-Client")
		if c == "" {
			return nil, errors.New("no X-Client header")
		}
		return sdk.Subject{"client": c}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var served int
	hello := func(c echo.Context) error { served++; return c.String(http.StatusOK, "hello "+c.Param("tenant")) }
	e := echo.New()
	e.GET("/ping", hello, echolimit.Middleware(mw, nil))
	e.GET("/tenants/:tenant", hello, echolimit.Middleware(mw, func(c echo.Context) (sdk.Subject, error) {
		return sdk.Subject{"client": "tenant-" + c.Param("tenant")}, nil
	}))
	srv := httptest.NewServer(e)
	defer srv.Close()

	denied := `{"error":"rate limited by policy \"api\" (per-minute): retry in 60s","policy":"api","denied":["per-minute"],"retry_after_seconds":60}` + "\n"
	tests := []struct {
		path, client     string
		status           int
		rateLimit, retry string
		body             string
	}{
		{"/ping", "c1", 200, `"per-minute";r=1;t=60`, "", "hello "},
		{"/ping", "", 400, "", "", `{"error":"rate limit: the request does not name a valid subject or cost"}` + "\n"},
		{"/ping", "c1", 200, `"per-minute";r=0;t=60`, "", "hello "},
		{"/ping", "c1", 429, `"per-minute";r=0;t=60`, "60", denied},
		{"/tenants/acme", "", 200, `"per-minute";r=1;t=60`, "", "hello acme"},
		{"/tenants/acme", "", 200, `"per-minute";r=0;t=60`, "", "hello acme"},
		{"/tenants/acme", "", 429, `"per-minute";r=0;t=60`, "60", denied},
	}
	for i, tc := range tests {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
		if tc.client != "" {
			req.Header.Set("X-Client", tc.client)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantPolicy := policyHeader
		if tc.rateLimit == "" {
			wantPolicy = ""
		}
		if res.StatusCode != tc.status || res.Header.Get("RateLimit") != tc.rateLimit || res.Header.Get("RateLimit-Policy") != wantPolicy ||
			res.Header.Get("Retry-After") != tc.retry || string(b) != tc.body {
			t.Errorf("request %d: GET %s = %d RateLimit %q RateLimit-Policy %q Retry-After %q %q, want %d %q %q %q %q", i+1, tc.path,
				res.StatusCode, res.Header.Get("RateLimit"), res.Header.Get("RateLimit-Policy"), res.Header.Get("Retry-After"), b,
				tc.status, tc.rateLimit, wantPolicy, tc.retry, tc.body)
		}
	}
	if served != 4 {
		t.Errorf("the handlers served %d requests, want 4", served)
	}
}
