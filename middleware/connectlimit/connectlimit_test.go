package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/middleware/connectlimit"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

var start = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

const (
	policyHeader = `"per-minute";q=2;w=60, "per-hour";q=100;w=3600`
	pingProc     = "/test.v1.TestService/Ping"
	watchProc    = "/test.v1.TestService/Watch"
	failProc     = "/test.v1.TestService/Fail"
)

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

func byHeader(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header) (sdk.Subject, error) {
	c, ok := h["X-Client"]
	switch {
	case !ok:
		return nil, errors.New("no X-Client header")
	case c[0] == "health":
		return nil, middleware.ErrSkip
	}
	return sdk.Subject{"client": c[0]}, nil
}

func byCost(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header) (int64, error) {
	s := h.Get("X-Cost")
	if s == "" {
		return 1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// serve starts an h2c server with a unary and a server-stream procedure
// behind the interceptor.
func serve(t *testing.T, i *connectlimit.Interceptor) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(pingProc, connect.NewUnaryHandler(pingProc, func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return connect.NewResponse(&emptypb.Empty{}), nil
	}, connect.WithInterceptors(i)))
	mux.Handle(failProc, connect.NewUnaryHandler(failProc, func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such thing"))
	}, connect.WithInterceptors(i)))
	mux.Handle(watchProc, connect.NewServerStreamHandler(watchProc, func(ctx context.Context, _ *connect.Request[emptypb.Empty], st *connect.ServerStream[emptypb.Empty]) error {
		return st.Send(&emptypb.Empty{})
	}, connect.WithInterceptors(i)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func h2c(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

type answer struct {
	code    connect.Code // 0: OK
	msg     string
	header  http.Header // the rate-limit headers only
	retryIn time.Duration
}

func (a answer) String() string {
	return fmt.Sprintf("%v %q %v retry-info=%v", a.code, a.msg, a.header, a.retryIn)
}

func newAnswer(err error, h http.Header) answer {
	a := answer{header: http.Header{}}
	var ce *connect.Error
	if errors.As(err, &ce) {
		a.code, a.msg, h = ce.Code(), ce.Message(), ce.Meta()
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					a.retryIn = ri.GetRetryDelay().AsDuration()
				}
			}
		}
	} else if err != nil {
		a.msg = err.Error()
	}
	for _, k := range []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"} {
		if v := h.Values(k); len(v) > 0 {
			a.header[k] = v
		}
	}
	return a
}

func call(ctx context.Context, c *connect.Client[emptypb.Empty, emptypb.Empty], stream bool, hdr map[string]string) answer {
	req := connect.NewRequest(&emptypb.Empty{})
	for k, v := range hdr {
		req.Header().Set(k, v)
	}
	if !stream {
		res, err := c.CallUnary(ctx, req)
		if err != nil {
			return newAnswer(err, nil)
		}
		return newAnswer(nil, res.Header())
	}
	st, err := c.CallServerStream(ctx, req)
	if err != nil {
		return newAnswer(err, nil)
	}
	defer st.Close()
	for st.Receive() {
	}
	return newAnswer(st.Err(), st.ResponseHeader())
}

func allowed(r int) answer {
	return answer{header: http.Header{"Ratelimit": {fmt.Sprintf(`"per-minute";r=%d;t=60`, r)}, "Ratelimit-Policy": {policyHeader}}}
}

var (
	denied = answer{
		code:    connect.CodeResourceExhausted,
		msg:     `rate limited by policy "api" (per-minute): retry in 60s`,
		header:  http.Header{"Ratelimit": {`"per-minute";r=0;t=60`}, "Ratelimit-Policy": {policyHeader}, "Retry-After": {"60"}},
		retryIn: time.Minute,
	}
	badKey = answer{code: connect.CodeInvalidArgument, msg: "rate limit: the request does not name a valid subject or cost", header: http.Header{}}
)

var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// TestInterceptor runs unary and stream calls over each protocol through
// an h2c server on the memory backend at a fixed instant, checks each
// answer exactly, and that a refused key consumes nothing.
func TestInterceptor(t *testing.T) {
	type step struct {
		proc   string // default: pingProc, or watchProc for a stream
		stream bool
		hdr    map[string]string
		want   answer
	}
	c1 := map[string]string{"X-Client": "c1"}
	tests := []struct {
		name  string
		opts  []connectlimit.Option
		steps []step
		used  int64
	}{
		{name: "unary", steps: []step{{"", false, c1, allowed(1)}, {"", false, c1, allowed(0)}, {"", false, c1, denied}}, used: 2},
		{name: "stream", steps: []step{{"", true, c1, allowed(1)}, {"", true, c1, allowed(0)}, {"", true, c1, denied}}, used: 2},
		{
			name: "an allowed call whose handler fails keeps the headers",
			steps: []step{
				{failProc, false, c1, answer{code: connect.CodeNotFound, msg: "no such thing", header: allowed(1).header}},
				{"", false, c1, allowed(0)},
			},
			used: 2,
		},
		{name: "no key", steps: []step{{"", false, nil, badKey}, {"", true, nil, badKey}}},
		{name: "empty key value", steps: []step{{"", false, map[string]string{"X-Client": ""}, badKey}}},
		{name: "skip", steps: []step{{"", false, map[string]string{"X-Client": "health"}, answer{header: http.Header{}}}}},
		{
			name: "cost above the limit",
			opts: []connectlimit.Option{connectlimit.WithCost(byCost)},
			steps: []step{{"", false, map[string]string{"X-Client": "c1", "X-Cost": "3"}, answer{
				code:   connect.CodeResourceExhausted,
				msg:    `rate limited by policy "api" (per-minute): the request costs more than a rule's limit and can never be allowed; do not retry it`,
				header: http.Header{"Ratelimit": {`"per-minute";r=2;t=0`}, "Ratelimit-Policy": {policyHeader}},
			}}},
		},
		{
			name: "custom key error",
			opts: []connectlimit.Option{connectlimit.WithKeyError(func(ctx context.Context, err error) error {
				return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("who are you? %w", err))
			})},
			steps: []step{{"", false, nil, answer{code: connect.CodeUnauthenticated, msg: "who are you? no X-Client header", header: http.Header{}}}},
		},
	}
	for _, proto := range protocols {
		for _, tc := range tests {
			t.Run(proto.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				p := apiPolicy(t)
				sl := sdk.New(memory.New(&memory.Options{Clock: fakeclock.New(start)}))
				i, err := connectlimit.New(sl, p, byHeader, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				url := serve(t, i)
				hc := h2c(t)
				ping := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, url+pingProc, proto.opts...)
				watch := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, url+watchProc, proto.opts...)
				fail := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, url+failProc, proto.opts...)
				for n, s := range tc.steps {
					c := ping
					switch {
					case s.proc == failProc:
						c = fail
					case s.stream:
						c = watch
					}
					if got := call(ctx, c, s.stream, s.hdr); got.String() != s.want.String() {
						t.Errorf("call %d (stream %v, %v) = %v, want %v", n+1, s.stream, s.hdr, got, s.want)
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
}

// TestFailure: with the Redis server stopped, calls go through or get
// CodeUnavailable as the policy or WithFailure says.
func TestFailure(t *testing.T) {
	srv := redistest.NewServer(t)
	rdb := goredis.NewUniversalClient(redis.NewClientOptions(srv.Addr()))
	defer rdb.Close()
	srv.Stop(t)
	sl := sdk.New(redis.New(rdb, nil), sdk.WithTimeout(10*time.Second))
	unavailable := answer{code: connect.CodeUnavailable, msg: "rate limit: could not decide (the limiter is unavailable)", header: http.Header{}}
	through := answer{header: http.Header{}}
	tests := []struct {
		name string
		p    *sdk.Policy
		opts []connectlimit.Option
		want answer
	}{
		{name: "fail-closed policy", p: apiPolicy(t), want: unavailable},
		{name: "fail-open policy", p: apiPolicy(t, sdk.WithFailOpen()), want: through},
		{name: "FailOpen over a fail-closed policy", p: apiPolicy(t), opts: []connectlimit.Option{connectlimit.WithFailure(middleware.FailOpen)}, want: through},
		{name: "FailClosed over a fail-open policy", p: apiPolicy(t, sdk.WithFailOpen()), opts: []connectlimit.Option{connectlimit.WithFailure(middleware.FailClosed)}, want: unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			i, err := connectlimit.New(sl, tc.p, byHeader, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := connect.NewClient[emptypb.Empty, emptypb.Empty](h2c(t), serve(t, i)+pingProc)
			if got := call(ctx, c, false, map[string]string{"X-Client": "c1"}); got.String() != tc.want.String() {
				t.Errorf("call = %v, want %v", got, tc.want)
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
		key  connectlimit.KeyFunc
	}{
		{"nil limiter", nil, p, byHeader},
		{"nil policy", sl, nil, byHeader},
		{"nil key", sl, p, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if i, err := connectlimit.New(tc.t, tc.p, tc.key); err == nil {
				t.Errorf("New(%s) = %v, nil; want an error", tc.name, i)
			}
		})
	}
}
