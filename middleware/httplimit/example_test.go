package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// Limit a net/http server per API key: two requests a minute.
func Example() {
	api, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.FixedWindow("per-minute", 2, time.Minute).By("client"),
	})
	if err != nil {
		panic(err)
	}
	clock := fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	lim := sdk.New(memory.New(&memory.Options{Clock: clock})) // or the remote client of freqcap serve
	mw, err := httplimit.New(lim, api, func(r *http.Request) (sdk.Subject, error) {
		key := r.Header.Get("X-Api-Key")
		if key == "" {
			return nil, errors.New("no API key") // 400, nothing consumed
		}
		return sdk.Subject{"client": key}, nil
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	handler := mw.Handler(mux) // http.ListenAndServe(addr, handler)

	get := func(key string) {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header()["Ratelimit"], rec.Header()["Retry-After"])
		fmt.Print("  ", rec.Body)
	}
	get("k1")
	get("k1")
	get("k1")
	get("")
	clock.Advance(time.Minute)
	get("k1")
	// Output:
	// 200 ["per-minute";r=1;t=60] []
	//   hello
	// 200 ["per-minute";r=0;t=60] []
	//   hello
	// 429 ["per-minute";r=0;t=60] [60]
	//   {"error":"rate limited by policy \"api\" (per-minute): retry in 60s","policy":"api","denied":["per-minute"],"retry_after_seconds":60}
	// 400 [] []
	//   {"error":"rate limit: the request does not name a valid subject or cost"}
	// 200 ["per-minute";r=1;t=60] []
	//   hello
}

// chi takes the middleware as it is: router-wide with Use, or per route
// with With, where the key function can read chi's URL parameters.
func Example_chi() {
	reports, err := sdk.NewPolicy("reports", []sdk.Rule{
		sdk.FixedWindow("per-hour", 1, time.Hour).By("tenant"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))}))
	perTenant, err := httplimit.New(lim, reports, func(r *http.Request) (sdk.Subject, error) {
		return sdk.Subject{"tenant": chi.URLParam(r, "tenant")}, nil
	})
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.With(perTenant.Handler).Get("/tenants/{tenant}/report", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "report of", chi.URLParam(r, "tenant"))
	})

	for _, path := range []string{"/tenants/acme/report", "/tenants/acme/report", "/tenants/globex/report"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, rec.Header()["Ratelimit"], rec.Header()["Retry-After"])
	}
	// Output:
	// /tenants/acme/report 200 ["per-hour";r=0;t=3600] []
	// /tenants/acme/report 429 ["per-hour";r=0;t=3600] [3600]
	// /tenants/globex/report 200 ["per-hour";r=0;t=3600] []
}
