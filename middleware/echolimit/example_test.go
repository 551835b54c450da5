package echolimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/middleware/echolimit"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// The net/http middleware in echo: l's key function for every route, or
// one reading echo's context (here a path parameter) for some.
func Example() {
	api, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.FixedWindow("per-minute", 1, time.Minute).By("client"),
	})
	if err != nil {
		panic(err)
	}
	lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))}))
	mw, err := httplimit.New(lim, api, func(r *http.Request) (sdk.Subject, error) {
		if key := r.Header.Get("X-Api-Key"); key != "" {
			return sdk.Subject{"client": key}, nil
		}
		return nil, errors.New("no API key")
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") }, echolimit.Middleware(mw, nil)) // or e.Use(…)
	byTenant := echolimit.Middleware(mw, func(c echo.Context) (sdk.Subject, error) {
		return sdk.Subject{"client": "tenant:" + c.Param("tenant")}, nil
	})
	e.GET("/tenants/:tenant", func(c echo.Context) error { return c.String(http.StatusOK, c.Param("tenant")) }, byTenant)

	for _, path := range []string{"/hello", "/hello", "/tenants/acme", "/tenants/acme"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("X-Api-Key", "k1")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code, rec.Header()["Ratelimit"], rec.Header()["Retry-After"])
	}
	// Output:
	// /hello 200 ["per-minute";r=0;t=60] []
	// /hello 429 ["per-minute";r=0;t=60] [60]
	// /tenants/acme 200 ["per-minute";r=0;t=60] []
	// /tenants/acme 429 ["per-minute";r=0;t=60] [60]
}
