package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/middleware/httplimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
	"github.com/freqcap/freqcap/serve"
)

// start is the tests' instant: a whole minute, so the fixed window's
// reset is 60 s.
var start = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

// apiPolicy allows 2 requests a minute and 100 an hour per client.
func apiPolicy(t testing.TB, opts ...sdk.PolicyOption) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy("api", []sdk.Rule{
		sdk.FixedWindow("per-minute", 2, time.Minute).By("client"),
		sdk.SlidingWindow("per-hour", 100, time.Hour).By("client"),
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// byHeader keys a request by its X-Client header; a request without
// one has no key; "health" skips the limit.
func byHeader(r *http.Request) (sdk.Subject, error) {
	c, ok := r.Header["X-Client"]
	switch {
	case !ok:
		return nil, errors.New("no X-Client header")
	case c[0] == "health":
		return nil, middleware.ErrSkip
	}
	return sdk.Subject{"client": c[0]}, nil
}

// byCost reads the cost from X-Cost (absent: 1).
func byCost(r *http.Request) (int64, error) {
	s := r.Header.Get("X-Cost")
	if s == "" {
		return 1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// served counts the requests that reached the handler behind the
// middleware.
type served struct{ n atomic.Int64 }

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	_, _ = io.WriteString(w, "hello\n")
}

type response struct {
	status int
	header http.Header // the rate-limit headers and Content-Type only
	body   string
}

func (r response) String() string {
	return fmt.Sprintf("%d %v %q", r.status, r.header, r.body)
}

var shown = []string{"Ratelimit", "Ratelimit-Policy", "Retry-After", "Content-Type"}

func get(t *testing.T, url string, h map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: res.StatusCode, header: http.Header{}, body: string(b)}
	for _, k := range shown {
		if v, ok := res.Header[k]; ok {
			out.header[k] = v
		}
	}
	return out
}

const (
	policyHeader = `"per-minute";q=2;w=60, "per-hour";q=100;w=3600`
	textPlain    = "text/plain; charset=utf-8"
	appJSON      = "application/json"
)

// TestMiddleware runs requests through an httptest server on the memory
// backend at a fixed instant and checks each answer exactly, and that a
// refused key consumes nothing.
func TestMiddleware(t *testing.T) {
	type step struct {
		header map[string]string
		want   response
	}
	okHeaders := func(r int) http.Header {
		return http.Header{"Ratelimit": {fmt.Sprintf(`"per-minute";r=%d;t=60`, r)}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {textPlain}}
	}
	denied := response{
		status: http.StatusTooManyRequests,
		header: http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Retry-After": {"60"}, "Content-Type": {appJSON}},
		body:   `{"error":"rate limited by policy \"api\" (per-minute): retry in 60s","policy":"api","denied":["per-minute"],"retry_after_seconds":60}` + "\n",
	}
	badKey := response{
		status: http.StatusBadRequest,
		header: http.Header{"Content-Type": {appJSON}},
		body:   `{"error":"rate limit: the request does not name a valid subject or cost"}` + "\n",
	}
	tests := []struct {
		name   string
		opts   []httplimit.Option
		steps  []step
		served int64
		used   int64 // per-minute's count for client c1 afterwards
	}{
		{
			name: "allowed twice, then denied",
			steps: []step{
				{map[string]string{"X-Client": "c1"}, response{200, okHeaders(1), "hello\n"}},
				{map[string]string{"X-Client": "c1"}, response{200, okHeaders(0), "hello\n"}},
				{map[string]string{"X-Client": "c1"}, denied},
			},
			served: 2, used: 2,
		},
		{
			name:  "no key: 400, nothing consumed",
			steps: []step{{nil, badKey}},
			used:  0,
		},
		{
			name:  "empty key value refused by the limiter: 400, nothing consumed",
			steps: []step{{map[string]string{"X-Client": ""}, badKey}},
			used:  0,
		},
		{
			name:   "skip: through, no headers, nothing consumed",
			steps:  []step{{map[string]string{"X-Client": "health"}, response{200, http.Header{"Content-Type": {textPlain}}, "hello\n"}}},
			served: 1, used: 0,
		},
		{
			name: "cost",
			opts: []httplimit.Option{httplimit.WithCost(byCost)},
			steps: []step{
				{map[string]string{"X-Client": "c1", "X-Cost": "2"}, response{200, okHeaders(0), "hello\n"}},
				{map[string]string{"X-Client": "c1", "X-Cost": "1"}, denied},
			},
			served: 1, used: 2,
		},
		{
			name: "cost above the limit: 429 without Retry-After",
			opts: []httplimit.Option{httplimit.WithCost(byCost)},
			steps: []step{{map[string]string{"X-Client": "c1", "X-Cost": "3"}, response{
				status: http.StatusTooManyRequests,
				header: http.Header{"Ratelimit": {`"per-minute";r=2;t=0`}, "Ratelimit-Policy": {policyHeader}, "Content-Type": {appJSON}},
				body:   `{"error":"rate limited by policy \"api\" (per-minute): the request costs more than a rule's limit and can never be allowed; do not retry it","policy":"api","denied":["per-minute"]}` + "\n",
			}}},
			used: 0,
		},
		{
			name:  "cost function error: 400, nothing consumed",
			opts:  []httplimit.Option{httplimit.WithCost(byCost)},
			steps: []step{{map[string]string{"X-Client": "c1", "X-Cost": "two"}, badKey}},
			used:  0,
		},
		{
			name:  "negative cost refused by the limiter: 400, nothing consumed",
			opts:  []httplimit.Option{httplimit.WithCost(byCost)},
			steps: []step{{map[string]string{"X-Client": "c1", "X-Cost": "-1"}, badKey}},
			used:  0,
		},
		{
			name: "custom key error handler",
			opts: []httplimit.Option{httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				http.Error(w, "who are you? "+err.Error(), http.StatusUnauthorized)
			})},
			steps: []step{{nil, response{401, http.Header{"Content-Type": {textPlain}}, "who are you? no X-Client header\n"}}},
		},
		{
			name: "custom denied handler gets the headers set",
			opts: []httplimit.Option{httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d sdk.Decision) {
				http.Error(w, fmt.Sprintf("slow down (%v)", d.Denied), http.StatusTeapot)
			})},
			steps: []step{
				{map[string]string{"X-Client": "c1"}, response{200, okHeaders(1), "hello\n"}},
				{map[string]string{"X-Client": "c1"}, response{200, okHeaders(0), "hello\n"}},
				{map[string]string{"X-Client": "c1"}, response{
					status: http.StatusTeapot,
					header: http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Retry-After": {"60"}, "Content-Type": {textPlain}},
					body:   "slow down ([per-minute])\n",
				}},
			},
			served: 2, used: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := apiPolicy(t)
			lim := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
			mw, err := httplimit.New(lim, p, byHeader, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			next := &served{}
			srv := httptest.NewServer(mw.Handler(next))
			defer srv.Close()
			for i, s := range tc.steps {
				if got := get(t, srv.URL, s.header); got.String() != s.want.String() {
					t.Errorf("request %d: GET %v = %v, want %v", i+1, s.header, got, s.want)
				}
			}
			if n := next.n.Load(); n != tc.served {
				t.Errorf("the handler served %d requests, want %d", n, tc.served)
			}
			d, err := lim.Peek(context.Background(), p, sdk.Attempt{Subject: sdk.Subject{"client": "c1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Rules[0].Used != tc.used {
				t.Errorf("per-minute used = %d after the requests, want %d", d.Rules[0].Used, tc.used)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	lim := sdk.New(memory.New(nil))
	p := apiPolicy(t)
	tests := []struct {
		name string
		t    middleware.Taker
		p    *sdk.Policy
		key  httplimit.KeyFunc
	}{
		{"nil limiter", nil, p, byHeader},
		{"nil policy", lim, nil, byHeader},
		{"nil key", lim, p, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := httplimit.New(tc.t, tc.p, tc.key); err == nil {
				t.Errorf("New(%s) = %v, nil; want an error", tc.name, l)
			}
		})
	}
}

// downRedis is a limiter on a Redis server that has been stopped: every
// decision fails (connection refused).
func downRedis(t *testing.T) *sdk.Limiter {
	t.Helper()
	srv := redistest.NewServer(t)
	rdb := goredis.NewUniversalClient(redis.NewClientOptions(srv.Addr()))
	t.Cleanup(func() { _ = rdb.Close() })
	srv.Stop(t)
	return sdk.New(redis.New(rdb, nil), sdk.WithTimeout(10*time.Second))
}

// TestFailure: with the Redis server stopped, requests pass or get 503 as
// the policy or WithFailure says, without rate-limit headers.
func TestFailure(t *testing.T) {
	lim := downRedis(t)
	unavailable := response{
		status: http.StatusServiceUnavailable,
		header: http.Header{"Content-Type": {appJSON}},
		body:   `{"error":"rate limit: could not decide (the limiter is unavailable)"}` + "\n",
	}
	through := response{200, http.Header{"Content-Type": {textPlain}}, "hello\n"}
	var logged atomic.Value
	tests := []struct {
		name   string
		p      *sdk.Policy
		opts   []httplimit.Option
		want   response
		served int64
	}{
		{name: "fail-closed policy: 503", p: apiPolicy(t), want: unavailable},
		{name: "fail-open policy: through", p: apiPolicy(t, sdk.WithFailOpen()), want: through, served: 1},
		{name: "FailOpen over a fail-closed policy: through", p: apiPolicy(t), opts: []httplimit.Option{httplimit.WithFailure(middleware.FailOpen)}, want: through, served: 1},
		{name: "FailClosed over a fail-open policy: 503", p: apiPolicy(t, sdk.WithFailOpen()), opts: []httplimit.Option{httplimit.WithFailure(middleware.FailClosed)}, want: unavailable},
		{
			name: "error handler",
			p:    apiPolicy(t),
			opts: []httplimit.Option{httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				logged.Store(err)
				w.Header().Set("Retry-After", "5")
				http.Error(w, "try later", http.StatusServiceUnavailable)
			})},
			want: response{503, http.Header{"Retry-After": {"5"}, "Content-Type": {textPlain}}, "try later\n"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := httplimit.New(lim, tc.p, byHeader, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			next := &served{}
			srv := httptest.NewServer(mw.Handler(next))
			defer srv.Close()
			if got := get(t, srv.URL, map[string]string{"X-Client": "c1"}); got.String() != tc.want.String() {
				t.Errorf("GET = %v, want %v", got, tc.want)
			}
			if n := next.n.Load(); n != tc.served {
				t.Errorf("the handler served %d requests, want %d", n, tc.served)
			}
		})
	}
	if err, _ := logged.Load().(error); err == nil {
		t.Error("the error handler was not given the limiter's error")
	}
}

// TestRedis: the middleware on a live redis-server: allowed requests get
// the headers, the third is denied with Retry-After equal to RateLimit's
// t, and the count is the server's.
// TestRedis: the same requests answered alike through the in-process
// Limiter on a real redis-server and through the remote client of a
// freqcap serve deciding on that server (middleware.Taker is either).
func TestRedis(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := goredis.NewUniversalClient(redis.NewClientOptions(srv.Addr()))
	defer rdb.Close()
	p := apiPolicy(t)
	lim := sdk.New(redis.New(rdb, nil), sdk.WithPrefix("httplimit-test"), sdk.WithTimeout(10*time.Second))

	// A freqcap serve over the same server, and its remote client.
	ss, err := serve.New(serve.Config{Limiter: lim, Policies: []*sdk.Policy{p}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ss.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ss.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-done
	})
	remote := client.New("http://"+ln.Addr().String(), &client.Options{Timeout: 10 * time.Second})

	for _, tc := range []struct {
		name   string
		taker  middleware.Taker
		client string
	}{
		{"in-process", lim, "redis-c1"},
		{"remote", remote, "redis-c2"},
	} {
		t.Run(tc.name, func(t *testing.T) { redisSequence(t, tc.taker, p, tc.client) })
	}
}

// redisSequence sends three requests of one client through the
// middleware over taker: two allowed, the third denied, each with the
// IETF headers.
func redisSequence(t *testing.T, taker middleware.Taker, p *sdk.Policy, clientID string) {
	mw, err := httplimit.New(taker, p, byHeader)
	if err != nil {
		t.Fatal(err)
	}
	next := &served{}
	hs := httptest.NewServer(mw.Handler(next))
	defer hs.Close()
	rate := regexp.MustCompile(`^"per-minute";r=(\d);t=(\d+)$`)
	for i, want := range []struct {
		status    int
		remaining string
	}{{200, "1"}, {200, "0"}, {429, "0"}} {
		got := get(t, hs.URL, map[string]string{"X-Client": clientID})
		if got.status != want.status {
			t.Fatalf("request %d: status %d, want %d (%v)", i+1, got.status, want.status, got)
		}
		if pol := got.header.Get("Ratelimit-Policy"); pol != policyHeader {
			t.Errorf("request %d: RateLimit-Policy = %q, want %q", i+1, pol, policyHeader)
		}
		m := rate.FindStringSubmatch(got.header.Get("Ratelimit"))
		if m == nil || m[1] != want.remaining {
			t.Fatalf("request %d: RateLimit = %q, want r=%s", i+1, got.header.Get("Ratelimit"), want.remaining)
		}
		if secs, _ := strconv.Atoi(m[2]); secs < 1 || secs > 60 {
			t.Errorf("request %d: RateLimit t=%d, want 1..60", i+1, secs)
		}
		ra, denied := got.header["Retry-After"]
		if denied != (want.status == 429) || (denied && ra[0] != m[2]) {
			t.Errorf("request %d: Retry-After = %v, want %v", i+1, ra, map[bool]string{true: m[2], false: "none"}[want.status == 429])
		}
	}
	if n := next.n.Load(); n != 2 {
		t.Errorf("the handler served %d requests, want 2", n)
	}
}
