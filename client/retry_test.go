package client_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// lossy is serve's handler that decides the first drop calls of method
// (e.g. "/Take") and then loses their replies: the server did the work,
// the client sees its stream reset (HTTP/2) or its connection closed
// (HTTP/1.1), as when serve is killed between deciding and answering.
type lossy struct {
	h      http.Handler
	method string
	drop   atomic.Int64 // replies still to lose
	calls  atomic.Int64 // calls of method received
}

// sink swallows a reply.
type sink struct{ h http.Header }

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(b []byte) (int, error) { return len(b), nil }
func (s *sink) WriteHeader(int)             {}

func (l *lossy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, l.method) {
		l.h.ServeHTTP(w, r)
		return
	}
	l.calls.Add(1)
	if l.drop.Add(-1) < 0 {
		l.h.ServeHTTP(w, r)
		return
	}
	l.h.ServeHTTP(&sink{h: http.Header{}}, r) // decided: the reply goes nowhere
	panic(http.ErrAbortHandler)               // reset the stream, or close the connection
}

// retryEnv is serve on the memory backend behind a lossy handler, and
// the limiter it decides with (counts read directly).
type retryEnv struct {
	url  string
	lim  *sdk.Limiter
	push *sdk.Policy
	l    *lossy
}

func startLossy(t *testing.T, method string, drop int64) *retryEnv {
	t.Helper()
	push, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("daily", 100, 24*time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(memory.New(nil))
	srv, err := serve.New(serve.Config{Limiter: lim, Policies: []*sdk.Policy{push}})
	if err != nil {
		t.Fatal(err)
	}
	l := &lossy{h: srv.Handler(), method: method}
	l.drop.Store(drop)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: l, Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return &retryEnv{url: "http://" + ln.Addr().String(), lim: lim, push: push, l: l}
}

func (e *retryEnv) used(t *testing.T, user string) int64 {
	t.Helper()
	in, err := e.lim.Admin().Inspect(context.Background(), e.push, sdk.Subject{"user": user})
	if err != nil {
		t.Fatal(err)
	}
	return in.Rules[0].Used
}

var protocols = []struct {
	name string
	p    client.Protocol
}{{"grpc", client.GRPC}, {"json", client.ConnectJSON}}

// fastRetry re-sends at once, for tests.
var fastRetry = &client.Retry{Tries: 5, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}

// A consuming call whose replies are lost is sent again with the same
// idempotency key (the client's when the caller gave none): it is
// decided once, and its answer is the first decision, replayed.
func TestRetryLostReply(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, tc := range []struct {
				name, method string
				call         func(c *client.Client, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error)
			}{
				{"take", "/Take", func(c *client.Client, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error) {
					return c.Take(ctx, p, sdk.Attempt{Subject: s, Cost: 3})
				}},
				{"take with the caller's key", "/Take", func(c *client.Client, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error) {
					return c.Take(ctx, p, sdk.Attempt{Subject: s, Cost: 3, IdempotencyKey: "message-1"})
				}},
				{"reserve", "/Reserve", func(c *client.Client, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error) {
					d, r, err := c.Reserve(ctx, p, sdk.Attempt{Subject: s, Cost: 3}, time.Minute)
					if err == nil && r.ID() == "" {
						t.Errorf("Reserve = %+v, no reservation", d)
					}
					return d, err
				}},
				{"take batch", "/TakeBatch", func(c *client.Client, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error) {
					rs := c.TakeBatch(ctx, p, []sdk.Attempt{{Subject: s, Cost: 1}, {Subject: s, Cost: 2}})
					if len(rs) != 2 {
						t.Fatalf("TakeBatch = %d results, want 2", len(rs))
					}
					if rs[0].Err != nil || !rs[0].Decision.Allowed || !rs[0].Decision.Replayed {
						t.Errorf("TakeBatch[0] = %+v, %v, want allowed and replayed", rs[0].Decision, rs[0].Err)
					}
					return rs[1].Decision, rs[1].Err
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := startLossy(t, tc.method, 2)
					c := client.New(e.url, &client.Options{Protocol: pr.p, Retry: fastRetry})
					d, err := tc.call(c, e.push, sdk.Subject{"user": "u"})
					if err != nil {
						t.Fatalf("%s with 2 replies lost: %v", tc.name, err)
					}
					if !d.Allowed || !d.Replayed {
						t.Errorf("%s with 2 replies lost = allowed %v, replayed %v, want both", tc.name, d.Allowed, d.Replayed)
					}
					if got := e.l.calls.Load(); got != 3 {
						t.Errorf("%s sent %d times, want 3", tc.name, got)
					}
					if got := e.used(t, "u"); got != 3 {
						t.Errorf("%s with 2 replies lost counted %d, want 3 (decided once)", tc.name, got)
					}
				})
			}
		})
	}
}

// Without retries (Tries 1) a lost reply is the caller's error, and the
// attempt was counted all the same: what the retries are for.
func TestRetryOff(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			e := startLossy(t, "/Take", 1)
			c := client.New(e.url, &client.Options{Protocol: pr.p, Retry: &client.Retry{Tries: 1}})
			_, err := c.Take(context.Background(), e.push, sdk.Attempt{Subject: sdk.Subject{"user": "u"}})
			if err == nil {
				t.Fatal("Take with its reply lost and Tries 1 = nil error")
			}
			if got := e.l.calls.Load(); got != 1 {
				t.Errorf("Take sent %d times with Tries 1, want 1", got)
			}
			if got := e.used(t, "u"); got != 1 {
				t.Errorf("the lost take counted %d, want 1", got)
			}
			// Without a key, a second take is a second decision.
			d, err := c.Take(context.Background(), e.push, sdk.Attempt{Subject: sdk.Subject{"user": "u"}})
			if err != nil || d.Replayed {
				t.Fatalf("second Take = %+v, %v, want a new decision", d, err)
			}
		})
	}
}

// Refusals are answers: sent once, whatever Retry says.
func TestRetryRefusalsSentOnce(t *testing.T) {
	e := startLossy(t, "/Take", 0)
	c := client.New(e.url, &client.Options{Retry: fastRetry})
	other, err := sdk.NewPolicy("nope", []sdk.Rule{sdk.FixedWindow("daily", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *sdk.Policy
		s    sdk.Subject
		code connect.Code
	}{
		{"unknown policy", other, sdk.Subject{"user": "u"}, connect.CodeNotFound},
		{"unknown dimension", e.push, sdk.Subject{"user": "u", "colour": "red"}, connect.CodeInvalidArgument},
	} {
		before := e.l.calls.Load()
		_, err := c.Take(context.Background(), tc.p, sdk.Attempt{Subject: tc.s})
		if connect.CodeOf(err) != tc.code {
			t.Errorf("%s: Take = %v, want %v", tc.name, err, tc.code)
		}
		if got := e.l.calls.Load() - before; got != 1 {
			t.Errorf("%s: Take sent %d times, want 1", tc.name, got)
		}
	}
}

// Re-sends stop at the caller's deadline: a call whose every reply is
// lost returns its error by then, not after, and a server that does not
// answer at all is re-sent to within PerTry.
func TestRetryWithinDeadline(t *testing.T) {
	e := startLossy(t, "/Take", 1<<40)
	c := client.New(e.url, &client.Options{Retry: &client.Retry{Tries: 1000, Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Take(ctx, e.push, sdk.Attempt{Subject: sdk.Subject{"user": "u"}})
	took := time.Since(start)
	if err == nil {
		t.Fatal("Take with every reply lost = nil error")
	}
	if dl, _ := ctx.Deadline(); time.Since(dl) > 200*time.Millisecond {
		t.Errorf("Take returned %v after its deadline", time.Since(dl))
	}
	if n := e.l.calls.Load(); n < 2 {
		t.Errorf("Take sent %d times in %v, want re-sends", n, took)
	}
	if got := e.used(t, "u"); got != 1 {
		t.Errorf("%d sends counted %d, want 1", e.l.calls.Load(), got)
	}

	// A server that accepts connections and never answers: PerTry cuts
	// each send short, the deadline bounds them all.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stuck := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			stuck <- conn // held open, never answered
		}
	}()
	defer func() {
		for len(stuck) > 0 {
			(<-stuck).Close()
		}
	}()
	c = client.New("http://"+ln.Addr().String(), &client.Options{Retry: &client.Retry{Tries: 3, Backoff: time.Millisecond, PerTry: 100 * time.Millisecond}})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	start = time.Now()
	_, err = c.Take(ctx2, e.push, sdk.Attempt{Subject: sdk.Subject{"user": "u"}})
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || time.Since(start) > 3*time.Second {
		t.Errorf("Take to a silent server = %v after %v, want deadline_exceeded after 3 sends of 100ms", err, time.Since(start))
	}
	if errors.Is(ctx2.Err(), context.DeadlineExceeded) {
		t.Errorf("the caller's deadline passed: PerTry did not bound the sends")
	}
}
