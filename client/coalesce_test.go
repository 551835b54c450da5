package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// rpcs is serve's handler that counts the RPCs of each method ("Take",
// "TakeBatch", …), holds those of a gated method until its gate opens,
// and loses the replies of the first drop calls of a method (as lossy
// does).
type rpcs struct {
	h       http.Handler
	arrived chan string // each RPC's method, as it arrives

	mu    sync.Mutex
	calls map[string]int
	gates map[string]chan struct{}
	drop  map[string]int
}

func (r *rpcs) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	m := path.Base(req.URL.Path)
	r.mu.Lock()
	r.calls[m]++
	gate := r.gates[m]
	lose := r.drop[m] > 0
	if lose {
		r.drop[m]--
	}
	r.mu.Unlock()
	select {
	case r.arrived <- m:
	default:
	}
	if gate != nil {
		<-gate
	}
	if lose {
		r.h.ServeHTTP(&sink{h: http.Header{}}, req) // decided: the reply goes nowhere
		panic(http.ErrAbortHandler)
	}
	r.h.ServeHTTP(w, req)
}

// hold closes m's gate: its RPCs wait until the func returned is called.
func (r *rpcs) hold(m string) (open func()) {
	g := make(chan struct{})
	r.mu.Lock()
	r.gates[m] = g
	r.mu.Unlock()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		delete(r.gates, m)
		r.mu.Unlock()
		close(g)
	})
}

func (r *rpcs) count(m string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[m]
}

// coEnv is serve on the memory backend behind rpcs, serving push (100 a
// day per user) and other (the same rule), and the limiter it decides
// with.
type coEnv struct {
	url         string
	lim         *sdk.Limiter
	push, other *sdk.Policy
	r           *rpcs
}

func startCounted(t testing.TB) *coEnv {
	t.Helper()
	var ps []*sdk.Policy
	for _, n := range []string{"push", "other"} {
		p, err := sdk.NewPolicy(n, []sdk.Rule{sdk.FixedWindow("daily", 100, 24*time.Hour).By("user")})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	lim := sdk.New(memory.New(nil))
	srv, err := serve.New(serve.Config{Limiter: lim, Policies: ps})
	if err != nil {
		t.Fatal(err)
	}
	r := &rpcs{h: srv.Handler(), arrived: make(chan string, 1024), calls: map[string]int{}, gates: map[string]chan struct{}{}, drop: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: r, Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return &coEnv{url: "http://" + ln.Addr().String(), lim: lim, push: ps[0], other: ps[1], r: r}
}

func (e *coEnv) used(t *testing.T, p *sdk.Policy, user string) int64 {
	t.Helper()
	in, err := e.lim.Admin().Inspect(context.Background(), p, sdk.Subject{"user": user})
	if err != nil {
		t.Fatal(err)
	}
	return in.Rules[0].Used
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// arrive waits for the next RPC to reach the server and returns its
// method.
func (e *coEnv) arrive(t *testing.T) string {
	t.Helper()
	select {
	case m := <-e.r.arrived:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for an RPC")
		return ""
	}
}

type outcome struct {
	d   sdk.Decision
	err error
}

// takeAsync starts Take(ctx, p, a) and returns where its outcome comes.
func takeAsync(ctx context.Context, c *client.Client, p *sdk.Policy, a sdk.Attempt) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		d, err := c.Take(ctx, p, a)
		ch <- outcome{d, err}
	}()
	return ch
}

// holdLone sends one Take under p and holds it at the server (the lone
// call that makes the next ones queue, with InFlight 1); the Take gate's
// opener is returned with the held call's outcome.
func (e *coEnv) holdLone(t *testing.T, c *client.Client, p *sdk.Policy) (open func(), lone <-chan outcome) {
	t.Helper()
	for len(e.r.arrived) > 0 { // earlier RPCs'
		<-e.r.arrived
	}
	open = e.r.hold("Take")
	lone = takeAsync(context.Background(), c, p, sdk.Attempt{Subject: sdk.Subject{"user": "lone"}})
	if m := e.arrive(t); m != "Take" {
		t.Fatalf("the lone call arrived as %s, want Take", m)
	}
	return open, lone
}

// TestCoalesceConcurrent: many goroutines taking at once decide what
// they would one by one: each user's allowed decisions are its limit,
// and the backend counted exactly those; they sent fewer RPCs than
// calls.
func TestCoalesceConcurrent(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			e := startCounted(t)
			c := client.New(e.url, &client.Options{Protocol: pr.p})
			const users, goroutines, each = 4, 50, 3 // 150 takes per user, 100 allowed
			allowed := make([]int64, users)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for g := range goroutines * users {
				wg.Add(1)
				go func() {
					defer wg.Done()
					u := g % users
					for range each {
						d, err := c.Allow(context.Background(), e.push, sdk.Subject{"user": fmt.Sprint("u", u)})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							mu.Lock()
							allowed[u]++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			for u := range users {
				if got := e.used(t, e.push, fmt.Sprint("u", u)); allowed[u] != 100 || got != 100 {
					t.Errorf("user u%d: %d allowed, %d counted; want 100 and 100", u, allowed[u], got)
				}
			}
			calls := users * goroutines * each
			if n := e.r.count("Take") + e.r.count("TakeBatch"); n >= calls || e.r.count("TakeBatch") == 0 {
				t.Errorf("%d concurrent takes sent %d Take and %d TakeBatch RPCs, want batches and fewer RPCs than calls", calls, e.r.count("Take"), e.r.count("TakeBatch"))
			}
		})
	}
}

// TestCoalesceLoneCaller: calls one at a time go as Take and Peek RPCs,
// never batches, and a call that finds one in flight (with InFlight 2,
// the default) is sent at once, beside it.
func TestCoalesceLoneCaller(t *testing.T) {
	e := startCounted(t)
	c := client.New(e.url, nil)
	ctx := context.Background()
	s := sdk.Subject{"user": "a"}
	for range 3 {
		if _, err := c.Take(ctx, e.push, sdk.Attempt{Subject: s}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Peek(ctx, e.push, sdk.Attempt{Subject: s}); err != nil {
			t.Fatal(err)
		}
	}
	if e.r.count("Take") != 3 || e.r.count("Peek") != 3 || e.r.count("TakeBatch") != 0 || e.r.count("PeekBatch") != 0 {
		t.Errorf("3 lone Takes and Peeks sent %v, want 3 Take and 3 Peek RPCs", e.r.calls)
	}
	open, first := e.holdLone(t, c, e.push)
	second := takeAsync(ctx, c, e.push, sdk.Attempt{Subject: s})
	if m := e.arrive(t); m != "Take" { // while the first is held
		t.Errorf("a call beside one in flight arrived as %s, want Take", m)
	}
	open()
	for _, ch := range []<-chan outcome{first, second} {
		if o := <-ch; o.err != nil || !o.d.Allowed {
			t.Errorf("Take = %+v, %v; want allowed", o.d, o.err)
		}
	}
}

// TestCoalesceBatches: calls queued while a call is in flight go in
// TakeBatch RPCs of at most MaxBatch calls, one policy each, and decide
// as they would alone.
func TestCoalesceBatches(t *testing.T) {
	e := startCounted(t)
	c := client.New(e.url, &client.Options{Coalesce: &client.Coalesce{InFlight: 1, MaxBatch: 4}})
	open, lone := e.holdLone(t, c, e.push)
	var outs []<-chan outcome
	for i := range 10 {
		p := e.push
		if i%2 == 1 {
			p = e.other
		}
		outs = append(outs, takeAsync(context.Background(), c, p, sdk.Attempt{Subject: sdk.Subject{"user": "b"}, Cost: 2}))
	}
	// other's first call went alone, and is held too.
	waitFor(t, "4 calls of other and 5 of push queued", func() bool {
		return client.Queued(c, "other") == 4 && client.Queued(c, "push") == 5
	})
	open()
	if o := <-lone; o.err != nil || !o.d.Allowed {
		t.Errorf("the lone Take = %+v, %v; want allowed", o.d, o.err)
	}
	for i, ch := range outs {
		want := "push"
		if i%2 == 1 {
			want = "other"
		}
		if o := <-ch; o.err != nil || !o.d.Allowed || o.d.Policy != want || o.d.Replayed {
			t.Errorf("queued Take #%d = %+v, %v; want allowed under %s", i, o.d, o.err, want)
		}
	}
	// push: 5 queued in batches of 4 and 1 (alone: a Take); other: 4.
	if e.r.count("TakeBatch") != 2 || e.r.count("Take") != 3 {
		t.Errorf("RPCs = %v, want 3 Take (2 lone, 1 batch of one) and 2 TakeBatch", e.r.calls)
	}
	if got := e.used(t, e.push, "b"); got != 10 {
		t.Errorf("push counted %d for b, want 10", got)
	}
	if got := e.used(t, e.other, "b"); got != 10 {
		t.Errorf("other counted %d for b, want 10", got)
	}
}

// TestCoalesceDeadlines: a call never waits past its own deadline,
// queued (it is then never sent) or sent in a batch (its attempt may
// still be decided); a batch RPC lives to the latest deadline of its
// calls, so a shorter one does not fail the others.
func TestCoalesceDeadlines(t *testing.T) {
	e := startCounted(t)
	c := client.New(e.url, &client.Options{Coalesce: &client.Coalesce{InFlight: 1}, Retry: &client.Retry{Tries: 1}})
	open, lone := e.holdLone(t, c, e.push)
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s := sdk.Subject{"user": "d"}
	o := <-takeAsync(short, c, e.push, sdk.Attempt{Subject: s}) // while the lone call is held
	if connect.CodeOf(o.err) != connect.CodeDeadlineExceeded {
		t.Errorf("a queued call past its deadline = %+v, %v; want deadline_exceeded", o.d, o.err)
	}
	if n := client.Queued(c, "push"); n != 0 {
		t.Errorf("%d calls queued after the only one gave up, want 0", n)
	}

	// A batch of a short and a long deadline, held at the server.
	openBatch := e.r.hold("TakeBatch")
	defer openBatch()
	short2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	long, cancel3 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel3()
	shortOut := takeAsync(short2, c, e.push, sdk.Attempt{Subject: s})
	longOut := takeAsync(long, c, e.push, sdk.Attempt{Subject: s})
	waitFor(t, "2 calls queued", func() bool { return client.Queued(c, "push") == 2 })
	open()
	<-lone
	if m := e.arrive(t); m != "TakeBatch" {
		t.Fatalf("the queued calls arrived as %s, want TakeBatch", m)
	}
	if o := <-shortOut; connect.CodeOf(o.err) != connect.CodeDeadlineExceeded {
		t.Errorf("a sent call past its deadline = %+v, %v; want deadline_exceeded", o.d, o.err)
	}
	openBatch()
	if o := <-longOut; o.err != nil || !o.d.Allowed {
		t.Errorf("the longer call of the batch = %+v, %v; want allowed (the batch outlives the shorter deadline)", o.d, o.err)
	}
	if got := e.used(t, e.push, "d"); got != 2 {
		t.Errorf("counted %d for d, want 2: the call that gave up once sent was decided all the same", got)
	}
}

// TestCoalesceErrorsPerAttempt: in a batch, an attempt the server
// refuses fails alone, with the error it would get alone, and is not
// re-sent; a refusal of the whole RPC is every call's.
func TestCoalesceErrorsPerAttempt(t *testing.T) {
	e := startCounted(t)
	c := client.New(e.url, &client.Options{Coalesce: &client.Coalesce{InFlight: 1}, Retry: fastRetry})
	open, lone := e.holdLone(t, c, e.push)
	cases := []struct {
		a    sdk.Attempt
		want error
	}{
		{sdk.Attempt{Subject: sdk.Subject{"user": "e"}}, nil},
		{sdk.Attempt{Subject: sdk.Subject{"user": "e", "colour": "red"}}, sdk.ErrInvalidSubject},
		{sdk.Attempt{Subject: sdk.Subject{"user": "e"}, Cost: -1}, sdk.ErrInvalidCost},
		{sdk.Attempt{Subject: sdk.Subject{}}, sdk.ErrInvalidSubject},
		{sdk.Attempt{Subject: sdk.Subject{"user": "e"}, Cost: 3}, nil},
	}
	var outs []<-chan outcome
	for _, tc := range cases {
		outs = append(outs, takeAsync(context.Background(), c, e.push, tc.a))
		waitFor(t, "the call queued", func() bool { return client.Queued(c, "push") == len(outs) })
	}
	open()
	<-lone
	for i, tc := range cases {
		o := <-outs[i]
		if !errors.Is(o.err, tc.want) || (tc.want == nil) != o.d.Allowed {
			t.Errorf("attempt #%d = %+v, %v; want %v", i, o.d, o.err, tc.want)
		}
		if tc.want != nil && connect.CodeOf(o.err) != connect.CodeInvalidArgument {
			t.Errorf("attempt #%d: code %v, want invalid_argument", i, connect.CodeOf(o.err))
		}
	}
	if e.r.count("TakeBatch") != 1 {
		t.Errorf("TakeBatch sent %d times, want once (refusals are not re-sent)", e.r.count("TakeBatch"))
	}
	if got := e.used(t, e.push, "e"); got != 4 {
		t.Errorf("counted %d for e, want 4", got)
	}

	// A policy the server does not serve: the whole RPC is refused.
	nope, err := sdk.NewPolicy("nope", []sdk.Rule{sdk.FixedWindow("daily", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	open, lone = e.holdLone(t, c, nope)
	outs = outs[:0]
	for range 3 {
		outs = append(outs, takeAsync(context.Background(), c, nope, sdk.Attempt{Subject: sdk.Subject{"user": "e"}}))
	}
	waitFor(t, "3 calls queued", func() bool { return client.Queued(c, "nope") == 3 })
	open()
	outs = append(outs, lone)
	for _, ch := range outs {
		if o := <-ch; !errors.Is(o.err, sdk.ErrInvalidPolicy) || connect.CodeOf(o.err) != connect.CodeNotFound {
			t.Errorf("Take under a policy the server lacks = %v, want not_found wrapping sdk.ErrInvalidPolicy", o.err)
		}
	}
}

// TestCoalesceRetry: a batch whose reply is lost is re-sent call by call,
// each with its idempotency key: every call decided once, its answer
// the first decision, replayed.
func TestCoalesceRetry(t *testing.T) {
	for _, pr := range protocols {
		t.Run(pr.name, func(t *testing.T) {
			e := startCounted(t)
			e.r.drop["TakeBatch"] = 1
			c := client.New(e.url, &client.Options{Protocol: pr.p, Coalesce: &client.Coalesce{InFlight: 1}, Retry: fastRetry})
			open, lone := e.holdLone(t, c, e.push)
			var outs []<-chan outcome
			for i := range 5 {
				a := sdk.Attempt{Subject: sdk.Subject{"user": "r"}, Cost: 2}
				if i == 0 {
					a.IdempotencyKey = "message-1" // the caller's own
				}
				outs = append(outs, takeAsync(context.Background(), c, e.push, a))
			}
			waitFor(t, "5 calls queued", func() bool { return client.Queued(c, "push") == 5 })
			open()
			<-lone
			for i, ch := range outs {
				if o := <-ch; o.err != nil || !o.d.Allowed || !o.d.Replayed {
					t.Errorf("Take #%d after its batch's reply was lost = %+v, %v; want allowed and replayed", i, o.d, o.err)
				}
			}
			if got := e.used(t, e.push, "r"); got != 10 {
				t.Errorf("counted %d for r, want 10 (5 takes of 2, each decided once)", got)
			}
			if n := e.r.count("TakeBatch"); n < 1 {
				t.Errorf("TakeBatch sent %d times, want at least 1", n)
			}
		})
	}
}

// TestCoalesceOff: with Coalesce.Off every call is an RPC of its own,
// sent at once however many are in flight.
func TestCoalesceOff(t *testing.T) {
	e := startCounted(t)
	c := client.New(e.url, &client.Options{Coalesce: &client.Coalesce{Off: true}})
	open := e.r.hold("Take")
	var outs []<-chan outcome
	for range 4 {
		outs = append(outs, takeAsync(context.Background(), c, e.push, sdk.Attempt{Subject: sdk.Subject{"user": "o"}}))
	}
	for range 4 {
		if m := e.arrive(t); m != "Take" {
			t.Errorf("a call arrived as %s, want Take", m)
		}
	}
	open()
	for _, ch := range outs {
		if o := <-ch; o.err != nil || !o.d.Allowed {
			t.Errorf("Take = %+v, %v; want allowed", o.d, o.err)
		}
	}
	if n := e.r.count("TakeBatch"); n != 0 {
		t.Errorf("TakeBatch sent %d times with coalescing off, want 0", n)
	}
}

// BenchmarkLoneTake: one caller's Takes through serve on the memory
// backend, coalescing on (each goes alone, as a Take) and off: what
// coalescing costs a lone caller.
func BenchmarkLoneTake(b *testing.B) {
	for _, bc := range []struct {
		name string
		co   *client.Coalesce
	}{{"coalesce", nil}, {"off", &client.Coalesce{Off: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			e := startCounted(b)
			c := client.New(e.url, &client.Options{Coalesce: bc.co, Retry: &client.Retry{Tries: 1}})
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := c.Take(ctx, e.push, sdk.Attempt{Subject: sdk.Subject{"user": fmt.Sprint(i % 1000)}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
