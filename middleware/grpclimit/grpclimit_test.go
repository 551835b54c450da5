package grpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/middleware/grpclimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

var start = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

const policyHeader = `"per-minute";q=2;w=60, "per-hour";q=100;w=3600`

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

// byMetadata keys a call by its x-client metadata; "health" skips.
func byMetadata(ctx context.Context, method string, req any) (sdk.Subject, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c := md.Get("x-client")
	switch {
	case len(c) == 0:
		return nil, errors.New("no x-client metadata")
	case c[0] == "health":
		return nil, middleware.ErrSkip
	}
	return sdk.Subject{"client": c[0]}, nil
}

// byCost reads the cost from x-cost (absent: 1).
func byCost(ctx context.Context, method string, req any) (int64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c := md.Get("x-cost")
	if len(c) == 0 {
		return 1, nil
	}
	return strconv.ParseInt(c[0], 10, 64)
}

// serve starts a gRPC server on a loopback port with the health service
// (Check is unary, Watch a server stream) behind the interceptors, and
// returns a client of it.
func serve(t *testing.T, lim *grpclimit.Limiter) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// answer is what a call got: its code, message, the rate-limit header
// metadata and the RetryInfo delay of its status.
type answer struct {
	code    codes.Code
	msg     string
	md      metadata.MD
	retryIn time.Duration
}

func (a answer) String() string {
	return fmt.Sprintf("%v %q %v retry-info=%v", a.code, a.msg, map[string][]string(a.md), a.retryIn)
}

func newAnswer(err error, hdr metadata.MD) answer {
	st := status.Convert(err)
	a := answer{code: st.Code(), md: metadata.MD{}}
	if err != nil {
		a.msg = st.Message()
	}
	for _, k := range []string{"ratelimit", "ratelimit-policy", "retry-after"} {
		if v := hdr.Get(k); len(v) > 0 {
			a.md[k] = v
		}
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			a.retryIn = ri.GetRetryDelay().AsDuration()
		}
	}
	return a
}

func check(ctx context.Context, hc healthpb.HealthClient, md ...string) answer {
	var hdr metadata.MD
	_, err := hc.Check(metadata.AppendToOutgoingContext(ctx, md...), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return newAnswer(err, hdr)
}

// watch opens a Watch stream and reads its first message.
func watch(ctx context.Context, hc healthpb.HealthClient, md ...string) answer {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, md...))
	defer cancel()
	st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return newAnswer(err, nil)
	}
	_, err = st.Recv()
	hdr, _ := st.Header()
	return newAnswer(err, hdr)
}

func allowedMD(r int) metadata.MD {
	return metadata.MD{"ratelimit": {fmt.Sprintf(`"per-minute";r=%d;t=60`, r)}, "ratelimit-policy": {policyHeader}}
}

var (
	deniedAnswer = answer{
		code:    codes.ResourceExhausted,
		msg:     `rate limited by policy "api" (per-minute): retry in 60s`,
		md:      metadata.MD{"ratelimit": {`"per-minute";r=0;t=60`}, "ratelimit-policy": {policyHeader}, "retry-after": {"60"}},
		retryIn: 60 * time.Second,
	}
	badKeyAnswer = answer{code: codes.InvalidArgument, msg: "rate limit: the request does not name a valid subject or cost", md: metadata.MD{}}
)

// TestInterceptors runs unary and stream calls through a real gRPC
// server on the memory backend at a fixed instant, checks each answer
// exactly, and that a refused key consumes nothing.
func TestInterceptors(t *testing.T) {
	type call struct {
		stream bool
		md     []string
		want   answer
	}
	tests := []struct {
		name  string
		opts  []grpclimit.Option
		calls []call
		used  int64 // per-minute's count for client c1 afterwards
	}{
		{
			name: "unary: allowed twice, then denied",
			calls: []call{
				{false, []string{"x-client", "c1"}, answer{code: codes.OK, md: allowedMD(1)}},
				{false, []string{"x-client", "c1"}, answer{code: codes.OK, md: allowedMD(0)}},
				{false, []string{"x-client", "c1"}, deniedAnswer},
			},
			used: 2,
		},
		{
			name: "stream: allowed twice, then denied",
			calls: []call{
				{true, []string{"x-client", "c1"}, answer{code: codes.OK, md: allowedMD(1)}},
				{true, []string{"x-client", "c1"}, answer{code: codes.OK, md: allowedMD(0)}},
				{true, []string{"x-client", "c1"}, deniedAnswer},
			},
			used: 2,
		},
		{name: "unary: no key", calls: []call{{false, nil, badKeyAnswer}}},
		{name: "stream: no key", calls: []call{{true, nil, badKeyAnswer}}},
		{name: "empty key value refused by the limiter", calls: []call{{false, []string{"x-client", ""}, badKeyAnswer}}},
		{name: "skip", calls: []call{{false, []string{"x-client", "health"}, answer{code: codes.OK, md: metadata.MD{}}}}},
		{
			name: "cost",
			opts: []grpclimit.Option{grpclimit.WithCost(byCost)},
			calls: []call{
				{false, []string{"x-client", "c1", "x-cost", "2"}, answer{code: codes.OK, md: allowedMD(0)}},
				{false, []string{"x-client", "c1"}, deniedAnswer},
			},
			used: 2,
		},
		{
			name: "cost above the limit: no retry-after, no RetryInfo",
			opts: []grpclimit.Option{grpclimit.WithCost(byCost)},
			calls: []call{{false, []string{"x-client", "c1", "x-cost", "3"}, answer{
				code: codes.ResourceExhausted,
				msg:  `rate limited by policy "api" (per-minute): the request costs more than a rule's limit and can never be allowed; do not retry it`,
				md:   metadata.MD{"ratelimit": {`"per-minute";r=2;t=0`}, "ratelimit-policy": {policyHeader}},
			}}},
		},
		{name: "cost function error", opts: []grpclimit.Option{grpclimit.WithCost(byCost)}, calls: []call{{false, []string{"x-client", "c1", "x-cost", "two"}, badKeyAnswer}}},
		{
			name: "custom key error",
			opts: []grpclimit.Option{grpclimit.WithKeyError(func(ctx context.Context, err error) error {
				return status.Error(codes.Unauthenticated, "who are you? "+err.Error())
			})},
			calls: []call{{false, nil, answer{code: codes.Unauthenticated, msg: "who are you? no x-client metadata", md: metadata.MD{}}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p := apiPolicy(t)
			sl := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
			lim, err := grpclimit.New(sl, p, byMetadata, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			hc := serve(t, lim)
			for i, c := range tc.calls {
				var got answer
				name := "Check"
				if c.stream {
					got, name = watch(ctx, hc, c.md...), "Watch"
				} else {
					got = check(ctx, hc, c.md...)
				}
				if got.String() != c.want.String() {
					t.Errorf("call %d: %s(%v) = %v, want %v", i+1, name, c.md, got, c.want)
				}
			}
			d, err := sl.Peek(ctx, p, sdk.Attempt{Subject: sdk.Subject{"client": "c1"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Rules[0].Used != tc.used {
				t.Errorf("per-minute used = %d after the calls, want %d", d.Rules[0].Used, tc.used)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	sl := sdk.New(memory.New(nil))
	p := apiPolicy(t)
	tests := []struct {
		name string
		t    middleware.Taker
		p    *sdk.Policy
		key  grpclimit.KeyFunc
	}{
		{"nil limiter", nil, p, byMetadata},
		{"nil policy", sl, nil, byMetadata},
		{"nil key", sl, p, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := grpclimit.New(tc.t, tc.p, tc.key); err == nil {
				t.Errorf("New(%s) = %v, nil; want an error", tc.name, l)
			}
		})
	}
}

// TestFailure: with the Redis server stopped, calls go through or get
// codes.Unavailable as the policy or WithFailure says, without headers.
func TestFailure(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := goredis.NewUniversalClient(redis.NewClientOptions(srv.Addr()))
	defer rdb.Close()
	srv.Stop(t)
	sl := sdk.New(redis.New(rdb, nil), sdk.WithTimeout(10*time.Second))
	unavailable := answer{code: codes.Unavailable, msg: "rate limit: could not decide (the limiter is unavailable)", md: metadata.MD{}}
	through := answer{code: codes.OK, md: metadata.MD{}}
	tests := []struct {
		name   string
		p      *sdk.Policy
		opts   []grpclimit.Option
		stream bool
		want   answer
	}{
		{name: "fail-closed policy", p: apiPolicy(t), want: unavailable},
		{name: "fail-closed policy, stream", p: apiPolicy(t), stream: true, want: unavailable},
		{name: "fail-open policy", p: apiPolicy(t, sdk.WithFailOpen()), want: through},
		{name: "fail-open policy, stream", p: apiPolicy(t, sdk.WithFailOpen()), stream: true, want: through},
		{name: "FailOpen over a fail-closed policy", p: apiPolicy(t), opts: []grpclimit.Option{grpclimit.WithFailure(middleware.FailOpen)}, want: through},
		{name: "FailClosed over a fail-open policy", p: apiPolicy(t, sdk.WithFailOpen()), opts: []grpclimit.Option{grpclimit.WithFailure(middleware.FailClosed)}, want: unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lim, err := grpclimit.New(sl, tc.p, byMetadata, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			hc := serve(t, lim)
			var got answer
			if tc.stream {
				got = watch(ctx, hc, "x-client", "c1")
			} else {
				got = check(ctx, hc, "x-client", "c1")
			}
			if got.String() != tc.want.String() {
				t.Errorf("call = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDeniedHeadersFrame reads calls over plain HTTP/2, as any gRPC
// client sees them: the rate-limit metadata arrive as response headers,
// denials included, and the status in the trailers after them.
func TestDeniedHeadersFrame(t *testing.T) {
	sl := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
	lim, err := grpclimit.New(sl, apiPolicy(t), byMetadata)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	for i, want := range []string{"0", "0", "8"} { // grpc-status: OK, OK, RESOURCE_EXHAUSTED
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/grpc.health.v1.Health/Check", bytes.NewReader(make([]byte, 5))) // one empty message
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("X-Client", "c1")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := res.Trailer.Get("Grpc-Status"); got != want || res.Header.Get("Grpc-Status") != "" {
			t.Errorf("call %d: grpc-status %q in the trailers, %q in the headers; want %q in the trailers only", i+1, got, res.Header.Get("Grpc-Status"), want)
		}
		if res.Header.Get("Ratelimit") == "" || res.Header.Get("Ratelimit-Policy") != policyHeader || res.Trailer.Get("Ratelimit") != "" {
			t.Errorf("call %d: headers %v, trailers %v; want RateLimit and RateLimit-Policy in the headers", i+1, res.Header, res.Trailer)
		}
		if ra := res.Header.Get("Retry-After"); (ra == "60") != (want == "8") {
			t.Errorf("call %d: Retry-After = %q in the headers, want 60 on the denial only", i+1, ra)
		}
	}
}
