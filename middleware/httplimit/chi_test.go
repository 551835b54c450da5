package httplimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestChi: chi takes the net/http middleware as it is, router-wide
// (r.Use) or per route (r.With), where chi's URL parameters are already
// known to the key function.
func TestChi(t *testing.T) {
	p := apiPolicy(t)
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
	byHeaderMW, err := httplimit.New(lim, p, byHeader)
	if err != nil {
		t.Fatal(err)
	}
	byTenantMW, err := httplimit.New(lim, p, func(r *http.Request) (sdk.Subject, error) {
		tenant := chi.URLParam(r, "tenant")
		if tenant == "" {
			return nil, errors.New("no tenant in the path")
		}
		return sdk.Subject{"client": "tenant-" + tenant}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(byHeaderMW.Handler)
		r.Get("/ping", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "pong\n") })
	})
	r.With(byTenantMW.Handler).Get("/tenants/{tenant}/report", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "report of "+chi.URLParam(r, "tenant")+"\n")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	tests := []struct {
		name   string
		path   string
		header map[string]string
		want   response
	}{
		{"ping 1", "/ping", map[string]string{"X-Client": "c1"}, response{200, http.Header{"Ratelimit": {`"per-minute";r=1;t=60`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}, "pong\n"}},
		{"ping without key", "/ping", nil, response{400, http.Header{"Content-Type": {appJSON}}, `{"error":"rate limit: the request does not name a valid subject or cost"}` + "\n"}},
		{"report 1", "/tenants/acme/report", nil, response{200, http.Header{"Ratelimit": {`"per-minute";r=1;t=60`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}, "report of acme\n"}},
		{"report 2", "/tenants/acme/report", nil, response{200, http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}, "report of acme\n"}},
		{"report 3", "/tenants/acme/report", nil, response{429, http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Retry-After": {"60"}, "Content-Type": {appJSON}},
			`{"error":"rate limited by policy \"api\" (per-minute): retry in 60s","policy":"api","denied":["per-minute"],"retry_after_seconds":60}` + "\n"}},
		{"another tenant", "/tenants/globex/report", nil, response{200, http.Header{"Ratelimit": {`"per-minute";r=1;t=60`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}, "report of globex\n"}},
		{"ping 2: its own count", "/ping", map[string]string{"X-Client": "c1"}, response{200, http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}, "pong\n"}},
	}
	for _, tc := range tests {
		if got := get(t, srv.URL+tc.path, tc.header); got.String() != tc.want.String() {
			t.Errorf("%s: GET %s = %v, want %v", tc.name, tc.path, got, tc.want)
		}
	}
}
