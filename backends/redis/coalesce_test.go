package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// coalescing returns a backend with Options.Coalesce n on addr, and its
// client, capabilities detected.
func coalescing(t *testing.T, addr string, n int) (*Backend, *goredis.Client) {
	t.Helper()
	c := goredis.NewClient(testserver.Patient(NewClientOptions(addr)).Simple())
	t.Cleanup(func() { c.Close() })
	b := New(c, &Options{Coalesce: n})
	if b.co == nil {
		t.Fatalf("New(standalone, Coalesce %d): coalescing off", n)
	}
	if _, err := b.Capabilities(context.Background()); err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	return b, c
}

// evalshaCalls reads cmdstat_evalsha's calls from INFO commandstats.
func evalshaCalls(t *testing.T, c goredis.UniversalClient) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	v := infoField(info, "cmdstat_evalsha")
	if v == "" {
		return 0
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.ParseInt(calls, 10, 64)
	if err != nil {
		t.Fatalf("cmdstat_evalsha = %q, want calls=N,…", v)
	}
	return n
}

// queued reports how many calls wait in the coalescer's queue.
func (c *coalescer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// TestCoalesceOneSubject: 64 goroutines × 50 coalesced Takes of cost 1 on
// one subject admit exactly what the limit allows, and Peek then shows
// every admitted unit counted once; the server ran fewer EVALSHAs than
// decisions (INFO commandstats on a server of the test's own).
func TestCoalesceOneSubject(t *testing.T) {
	const workers, takes = 64, 50
	for _, tc := range []struct {
		name  string
		limit int64
		want  int64 // admitted
	}{
		{"limit 1000: 1000 of 3200 admitted", 1000, 1000},
		{"limit 10000: all 3200 admitted", 10000, workers * takes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c := coalescing(t, redistest.NewServer(t).Addr(), 2)
			if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
				t.Fatalf("CONFIG RESETSTAT: %v", err)
			}
			s := newSubject(t, "co1")
			f := s.fixed("f", tc.limit, time.Hour)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				admitted int64
				firstErr error
			)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range takes {
						res, err := b.Take(context.Background(), s.request(opTake, 1, f).Request)
						mu.Lock()
						if err != nil && firstErr == nil {
							firstErr = err
						}
						if res.Allowed {
							admitted++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("Take error: %v", firstErr)
			}
			if admitted != tc.want {
				t.Errorf("%d coalesced Takes admitted %d, want %d", workers*takes, admitted, tc.want)
			}
			scripts := evalshaCalls(t, c)
			if scripts >= workers*takes || scripts < 1 {
				t.Errorf("cmdstat_evalsha calls = %d for %d decisions, want fewer (and some)", scripts, workers*takes)
			}
			t.Logf("%d decisions in %d EVALSHAs (%.1f attempts per script)", workers*takes, scripts, float64(workers*takes)/float64(scripts))
			checkRule(t, "Peek after the Takes", take(t, b, s.request(opPeek, 1, f)).Rules[0], tc.want < tc.limit, tc.want, tc.limit)
		})
	}
}

// manyStep is one call of TestCoalesceManySubjects's sequence.
type manyStep struct {
	op   op
	cost int64
	id   string // reservation id (op reserve)
	idem string // idempotency key suffix
}

// TestCoalesceManySubjects: 64 subjects, each driven by its own
// goroutine through a sequence of every op (takes, a peek, a reserve, an
// idempotent take and its replay, an inspect) under coalescing, give the
// Results the same sequence gives without coalescing on twin subjects:
// each decision is its request's own.
func TestCoalesceManySubjects(t *testing.T) {
	addr := redistest.Standalone(t)
	co, _ := coalescing(t, addr, 2)
	plain, _ := standalone(t)
	// Fixed 5/h, sliding 7/h, log 9/h: the third take of 2 is denied by
	// the fixed rule, which the reservation fills; step 7 replays step 6.
	steps := []manyStep{
		{op: opTake, cost: 2}, {op: opTake, cost: 2}, {op: opPeek, cost: 1}, {op: opTake, cost: 2},
		{op: opReserve, cost: 1, id: "r1"}, {op: opTake, cost: 1},
		{op: opTake, cost: 1, idem: "k"}, {op: opTake, cost: 1, idem: "k"},
		{op: opTake, cost: 9}, {op: opInspect},
	}
	requests := func(s subject) []request {
		rules := []driver.Rule{s.fixed("f", 5, time.Hour), s.sliding("s", 7, time.Hour, 6), s.log("l", 9, time.Hour)}
		out := make([]request, len(steps))
		for i, st := range steps {
			r := s.request(st.op, st.cost, rules...)
			if st.id != "" {
				r.ReservationID, r.ReservationTTL = st.id, time.Hour
			}
			if st.idem != "" {
				r.IdempotencyKey, r.IdempotencyTTL = s.base+"!i:"+st.idem, time.Hour
			}
			out[i] = r
		}
		return out
	}
	const subjects = 64
	got := make([][]driver.Result, subjects)
	want := make([][]driver.Result, subjects)
	errs := make(chan error, 2*subjects)
	var wg sync.WaitGroup
	for j := range subjects {
		for _, side := range []struct {
			b   *Backend
			out [][]driver.Result
			tag string
		}{{co, got, "co"}, {plain, want, "pl"}} {
			s := newSubject(t, fmt.Sprintf("%s%d", side.tag, j))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range requests(s) {
					res, err := side.b.do(context.Background(), r)
					if err != nil {
						errs <- fmt.Errorf("%s subject %d: %v: %w", side.tag, j, r.op, err)
						return
					}
					side.out[j] = append(side.out[j], res)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for j := range subjects {
		for i, st := range steps {
			g, w := got[j][i], want[j][i]
			if g.Allowed != w.Allowed || g.Replayed != w.Replayed || g.ReservationID != w.ReservationID || g.NonAtomic != w.NonAtomic || len(g.Trail) != len(w.Trail) {
				t.Errorf("subject %d step %d (%v): coalesced {allowed %v replayed %v id %q trail %d}, want {%v %v %q %d}",
					j, i, st.op, g.Allowed, g.Replayed, g.ReservationID, len(g.Trail), w.Allowed, w.Replayed, w.ReservationID, len(w.Trail))
			}
			for k := range w.Rules {
				gr, wr := g.Rules[k], w.Rules[k]
				gr.ResetAfter, gr.RetryAfter, wr.ResetAfter, wr.RetryAfter = 0, 0, 0, 0 // clock-dependent
				if gr != wr {
					t.Errorf("subject %d step %d (%v) rule %d: coalesced %+v, want %+v", j, i, st.op, k, gr, wr)
				}
			}
		}
	}
	// The sequence means what it says (checked once, on the plain side).
	w := want[0]
	if w[3].Allowed || w[4].ReservationID != "r1" || !w[7].Replayed || !w[8].Rules[0].CostTooHigh || len(w[9].Trail) == 0 {
		t.Errorf("plain sequence = %+v; want step 3 denied, 4 reserved r1, 7 replayed, 8 too high, 9 a trail", w)
	}
}

// gate is a go-redis hook holding each script pipeline until the test
// releases it, reporting the attempts of its scripts (ARGV[1]).
type gate struct {
	entered chan []int64  // attempts per script of a pipeline held
	release chan struct{} // one receive lets one pipeline go
	sha     chan string   // the SHA1 of the first script of each held (the first 16)
}

func newGate() gate {
	return gate{entered: make(chan []int64, 16), release: make(chan struct{}), sha: make(chan string, 16)}
}

func (g gate) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (g gate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if g.hold([]goredis.Cmder{cmd}) {
			<-g.release
		}
		return next(ctx, cmd)
	}
}

func (g gate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if g.hold(cmds) {
			<-g.release
		}
		return next(ctx, cmds)
	}
}

// hold reports the attempts of cmds' scripts, if they are scripts (a
// fast script alone, take.lua's in pipelines), and says whether to hold
// them.
func (g gate) hold(cmds []goredis.Cmder) bool {
	if n := cmds[0].Name(); n != "evalsha" && n != "eval" {
		return false
	}
	var attempts []int64
	for _, cmd := range cmds {
		a := cmd.Args()
		nk, _ := a[2].(int)
		m, _ := a[3+nk].(int)
		attempts = append(attempts, int64(m))
	}
	sha, _ := cmds[0].Args()[1].(string)
	if cmds[0].Name() == "eval" {
		sha = goredis.NewScript(sha).Hash()
	}
	select {
	case g.sha <- sha: // tests that do not read them drop the rest
	default:
	}
	g.entered <- attempts
	return true
}

// gated returns a backend with Options.Coalesce 1 whose scripts wait at
// g: take.lua's only, or (fast) the fast scripts too, with the fast
// script of a rule fixed("f", 10, time.Hour) and take.lua loaded, so that
// no script meets NOSCRIPT.
func gated(t *testing.T, fast bool) (*Backend, gate) {
	t.Helper()
	b, c := coalescing(t, redistest.Standalone(t), 1)
	if fast {
		s := newSubject(t, "warm")
		take(t, b, s.request(opPeek, 1, s.fixed("f", 10, time.Hour)))
		if err := c.ScriptLoad(context.Background(), lua.Take).Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		b.noFast = true
	}
	g := newGate()
	c.AddHook(g)
	return b, g
}

// outcome is a call's Result and error.
type outcome struct {
	res driver.Result
	err error
}

// async runs r on b in a goroutine; its outcome arrives on the channel.
func async(ctx context.Context, b *Backend, r request) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := b.do(ctx, r)
		ch <- outcome{res, err}
	}()
	return ch
}

// waitQueued polls until n calls wait in b's coalescer.
func waitQueued(t *testing.T, b *Backend, n int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d calls queued", n), func() bool { return b.co.queued() == n })
}

// holdFirst starts a Take on a subject of its own that becomes the
// flusher and waits at g with its one-attempt script: the calls after it
// queue.
func holdFirst(t *testing.T, b *Backend, g gate) <-chan outcome {
	t.Helper()
	s := newSubject(t, "first")
	ch := async(context.Background(), b, s.request(opTake, 1, s.fixed("f", 10, time.Hour)))
	// It found a free slot and nobody queued: it went out alone, as an
	// uncoalesced call would (one script; the short form reads as 0
	// attempts here, take.lua's as 1).
	if got := <-g.entered; len(got) != 1 || got[0] > 1 {
		t.Fatalf("first script = attempts %v, want one script of one attempt", got)
	}
	return ch
}

// TestCoalesceErrorPerCaller: three calls queued behind a script in
// flight go out in one three-attempt script; the one on a key holding a
// foreign value fails alone, the others are decided.
func TestCoalesceErrorPerCaller(t *testing.T) {
	for _, fast := range []bool{false, true} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) { testCoalesceErrorPerCaller(t, fast) })
	}
}

// testCoalesceErrorPerCaller: with fast scripts or take.lua alone
// (fast false).
func testCoalesceErrorPerCaller(t *testing.T, fast bool) {
	b, g := gated(t, fast)
	c := b.c.(*goredis.Client)
	first := holdFirst(t, b, g)

	good1, bad, good2 := newSubject(t, "good1"), newSubject(t, "bad"), newSubject(t, "good2")
	if err := c.Set(context.Background(), bad.key("f"), "not freqcap's", time.Hour).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	var chs []<-chan outcome
	for k, s := range []subject{good1, bad, good2} {
		chs = append(chs, async(context.Background(), b, s.request(opTake, 2, s.fixed("f", 10, time.Hour))))
		waitQueued(t, b, k+1)
	}
	g.release <- struct{}{}
	if o := <-first; o.err != nil || !o.res.Allowed {
		t.Fatalf("first Take = %+v, %v; want allowed", o.res, o.err)
	}
	if got := <-g.entered; len(got) != 1 || got[0] != 3 {
		t.Fatalf("second script = attempts %v, want [3]", got)
	}
	<-g.sha // the first script's
	want := takeScript.Hash()
	if fast {
		want = decidingScript(t, b, good1.request(opTake, 2, good1.fixed("f", 10, time.Hour)))
	}
	if got := <-g.sha; got != want {
		t.Fatalf("second script = %s, want %s (fast %v)", got, want, fast)
	}
	g.release <- struct{}{}
	for k, ch := range chs {
		o := <-ch
		if k == 1 {
			if o.err == nil || !strings.Contains(o.err.Error(), "did not write") || !strings.HasPrefix(o.err.Error(), "redis: take: ") {
				t.Errorf("Take(foreign key) = %v, want the script's refusal, as Take reports it", o.err)
			}
			continue
		}
		if o.err != nil {
			t.Fatalf("Take(good %d) = %v, want nil", k, o.err)
		}
		checkRule(t, fmt.Sprintf("Take(good %d)", k), o.res.Rules[0], true, 2, 10)
		if o.res.Rules[0].Strategy == "" {
			t.Errorf("Take(good %d).Rules[0].Strategy = \"\", want the rule's strategy", k)
		}
	}
}

// TestCoalesceCancel: a call whose ctx ends while it waits returns the
// ctx's error at once; unsent, it consumes nothing and the calls queued
// after it are still carried out; sent, its attempt runs (as after a lost
// reply). A sender whose ctx ends does not fail the attempts it carries.
func TestCoalesceCancel(t *testing.T) {
	peek := func(t *testing.T, b *Backend, s subject) int64 {
		t.Helper()
		return take(t, b, s.request(opPeek, 1, s.fixed("f", 10, time.Hour))).Rules[0].Used
	}
	t.Run("queued", func(t *testing.T) {
		b, g := gated(t, false)
		first := holdFirst(t, b, g)
		gone, kept := newSubject(t, "gone"), newSubject(t, "kept")
		ctx, cancel := context.WithCancel(context.Background())
		goneCh := async(ctx, b, gone.request(opTake, 1, gone.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 1)
		keptCh := async(context.Background(), b, kept.request(opTake, 1, kept.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 2)
		cancel()
		if o := <-goneCh; !errors.Is(o.err, context.Canceled) {
			t.Errorf("cancelled Take = %v, want %v", o.err, context.Canceled)
		}
		waitQueued(t, b, 1)
		g.release <- struct{}{}
		<-first
		if got := <-g.entered; len(got) != 1 || got[0] != 1 {
			t.Fatalf("second script pipeline = attempts %v, want [1] (the cancelled call left)", got)
		}
		g.release <- struct{}{}
		if o := <-keptCh; o.err != nil || !o.res.Allowed {
			t.Errorf("Take queued after the cancelled one = %+v, %v; want allowed", o.res, o.err)
		}
		go func() { g.release <- struct{}{} }() // the peeks below
		if got := peek(t, b, gone); got != 0 {
			t.Errorf("used after a cancelled, unsent Take = %d, want 0", got)
		}
		<-g.entered
	})
	t.Run("sent", func(t *testing.T) {
		b, g := gated(t, false)
		first := holdFirst(t, b, g)
		lead, gone := newSubject(t, "lead"), newSubject(t, "gone")
		leadCh := async(context.Background(), b, lead.request(opTake, 1, lead.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 1)
		ctx, cancel := context.WithCancel(context.Background())
		goneCh := async(ctx, b, gone.request(opTake, 1, gone.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 2)
		g.release <- struct{}{}
		<-first
		if got := <-g.entered; len(got) != 1 || got[0] != 2 {
			t.Fatalf("second script pipeline = attempts %v, want [2]", got)
		}
		cancel() // its attempt is on its way
		if o := <-goneCh; !errors.Is(o.err, context.Canceled) {
			t.Errorf("cancelled Take = %v, want %v", o.err, context.Canceled)
		}
		g.release <- struct{}{}
		if o := <-leadCh; o.err != nil || !o.res.Allowed {
			t.Errorf("Take sent with the cancelled one = %+v, %v; want allowed", o.res, o.err)
		}
		go func() { g.release <- struct{}{} }()
		if got := peek(t, b, gone); got != 1 {
			t.Errorf("used after a cancelled, sent Take = %d, want 1 (its attempt ran)", got)
		}
		<-g.entered
	})
	t.Run("sender", func(t *testing.T) {
		b, g := gated(t, false)
		first := holdFirst(t, b, g)
		lead, other := newSubject(t, "lead"), newSubject(t, "other")
		ctx, cancel := context.WithCancel(context.Background())
		leadCh := async(ctx, b, lead.request(opTake, 1, lead.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 1)
		otherCh := async(context.Background(), b, other.request(opTake, 1, other.fixed("f", 10, time.Hour)))
		waitQueued(t, b, 2)
		g.release <- struct{}{}
		<-first
		if got := <-g.entered; len(got) != 1 || got[0] != 2 {
			t.Fatalf("second script pipeline = attempts %v, want [2]", got)
		}
		cancel() // the sender's caller gives up while its script is held
		g.release <- struct{}{}
		if o := <-otherCh; o.err != nil || !o.res.Allowed {
			t.Errorf("Take carried by a cancelled sender = %+v, %v; want allowed", o.res, o.err)
		}
		if o := <-leadCh; o.err != nil && !errors.Is(o.err, context.Canceled) {
			t.Errorf("cancelled sender's Take = %v, want its decision or %v", o.err, context.Canceled)
		}
	})
}

// TestCoalesceNoScript: coalesced calls meeting an empty script cache
// are carried out, each exactly once.
func TestCoalesceNoScript(t *testing.T) {
	b, c := coalescing(t, redistest.NewServer(t).Addr(), 2)
	s := newSubject(t, "noscript")
	f := s.fixed("f", 1000, time.Hour)
	take(t, b, s.request(opTake, 1, f))
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Take(context.Background(), s.request(opTake, 1, f).Request); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Take after SCRIPT FLUSH = %v, want nil", err)
	}
	checkRule(t, "Peek", take(t, b, s.request(opPeek, 1, f)).Rules[0], true, 33, 1000)
}

// TestCoalesceApplies: coalescing is on only for a standalone or Sentinel
// client and a positive Options.Coalesce, and Describe says which.
func TestCoalesceApplies(t *testing.T) {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	sc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer sc.Close()
	for _, tc := range []struct {
		name string
		c    goredis.UniversalClient
		n    int
		on   bool
	}{
		{"standalone, 2", sc, 2, true},
		{"standalone, 0 (the default)", sc, 0, true},
		{"standalone, -1", sc, -1, false},
		{"cluster, 2", cc, 2, false},
		{"ring, 2", ring, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if on := New(tc.c, &Options{Coalesce: tc.n}).co != nil; on != tc.on {
				t.Errorf("New(%s, Coalesce %d): coalescing %v, want %v", tc.name, tc.n, on, tc.on)
			}
		})
	}
	t.Run("describe", func(t *testing.T) {
		b, _ := coalescing(t, redistest.Standalone(t), 2)
		d, err := b.Describe(context.Background())
		if err != nil {
			t.Fatalf("Describe = %v", err)
		}
		if !strings.Contains(strings.Join(d.Notes, "\n"), "coalescing: concurrent single decisions share multi-attempt scripts of up to 128 attempts, at most 2 in flight") {
			t.Errorf("Describe().Notes = %q, want the coalescing note", d.Notes)
		}
	})
}

// lone records whether each script went out alone (Process) or in a
// pipeline, and its first argument after the keys (of a fast script's
// head, its first byte: the op).
type lone struct{ calls chan string }

func (l lone) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (l lone) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if a := cmd.Args(); cmd.Name() == "evalsha" {
			nk, _ := a[2].(int)
			v := a[3+nk]
			if h, ok := v.(string); ok && len(h) > 0 { // a fast head (fastAttempt.args)
				v = h[:1]
			}
			l.calls <- fmt.Sprintf("alone %v", v)
		}
		return next(ctx, cmd)
	}
}

func (l lone) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if cmds[0].Name() == "evalsha" {
			l.calls <- "pipeline"
		}
		return next(ctx, cmds)
	}
}

// TestCoalesceLoneCall: with the default options (coalescing on) a call
// that finds nothing in flight goes out at once, alone, in the short
// form of its fast script: what an uncoalesced call sends, so a lone
// caller pays nothing for coalescing.
func TestCoalesceLoneCall(t *testing.T) {
	c := goredis.NewClient(testserver.Patient(NewClientOptions(redistest.Standalone(t))).Simple())
	t.Cleanup(func() { c.Close() })
	b := New(c, nil)
	if b.co == nil || b.opts.Coalesce != DefaultCoalesce {
		t.Fatalf("New(standalone, nil): coalesce %d (on %v), want DefaultCoalesce %d", b.opts.Coalesce, b.co != nil, DefaultCoalesce)
	}
	s := newSubject(t, "lone")
	f := s.fixed("f", 10, time.Hour)
	take(t, b, s.request(opPeek, 1, f)) // detection and script loading first
	l := lone{calls: make(chan string, 16)}
	c.AddHook(l)
	for i := range 3 {
		checkRule(t, fmt.Sprintf("Take %d", i+1), take(t, b, s.request(opTake, 1, f)).Rules[0], true, int64(i+1), 10)
		if got := <-l.calls; got != "alone t" {
			t.Errorf("Take %d went out as %q, want one EVALSHA alone in the short form (\"alone t\")", i+1, got)
		}
	}
	if n := b.co.queued(); n != 0 {
		t.Errorf("queued after the calls = %d, want 0", n)
	}
}

// TestCoalesceJoinsInFlight: a call that finds a script in flight (a
// slot held) and a free slot does not go out alone: it takes the slot,
// yields, and goes out in a multi-attempt script (a pipeline), with the
// calls queued meanwhile.
func TestCoalesceJoinsInFlight(t *testing.T) {
	c := goredis.NewClient(testserver.Patient(NewClientOptions(redistest.Standalone(t))).Simple())
	t.Cleanup(func() { c.Close() })
	b := New(c, nil)
	s := newSubject(t, "join")
	f := s.fixed("f", 10, time.Hour)
	take(t, b, s.request(opPeek, 1, f)) // detection and script loading first
	l := lone{calls: make(chan string, 16)}
	c.AddHook(l)
	b.co.mu.Lock()
	b.co.slots++ // a script in flight
	b.co.mu.Unlock()
	checkRule(t, "Take while a script is in flight", take(t, b, s.request(opTake, 1, f)).Rules[0], true, 1, 10)
	if got := <-l.calls; got != "pipeline" {
		t.Errorf("Take while a script is in flight went out as %q, want a multi-attempt script (\"pipeline\")", got)
	}
	b.co.mu.Lock()
	b.co.slots-- // the script in flight ends
	held := b.co.slots
	b.co.mu.Unlock()
	if held != 0 {
		t.Errorf("slots held after the call = %d, want 0 (its slot freed)", held)
	}
	checkRule(t, "Take with nothing in flight", take(t, b, s.request(opTake, 1, f)).Rules[0], true, 2, 10)
	if got := <-l.calls; got != "alone t" {
		t.Errorf("Take with nothing in flight went out as %q, want alone in the short form (\"alone t\")", got)
	}
}

// TestCoalesceBatch: a TakeBatch of a few requests that finds a script in
// flight queues as one, and goes out with a single call queued after it
// in one script (its requests first, in input order: the second request
// on its subject sees the first's unit); alone, it goes out at once; a
// batch above batchAttempts goes in scripts of its own.
func TestCoalesceBatch(t *testing.T) {
	b, g := gated(t, true) // scripts loaded: none meets NOSCRIPT
	first := holdFirst(t, b, g)
	s1, s2 := newSubject(t, "batch1"), newSubject(t, "single")
	f1, f2 := s1.fixed("f", 10, time.Hour), s2.fixed("f", 10, time.Hour)
	bch := make(chan []driver.BatchResult, 1)
	go func() {
		bch <- b.TakeBatch(context.Background(), []driver.Request{s1.request(opTake, 1, f1).Request, s1.request(opTake, 2, f1).Request})
	}()
	waitQueued(t, b, 1)
	single := async(context.Background(), b, s2.request(opTake, 3, f2))
	waitQueued(t, b, 2)
	g.release <- struct{}{}
	if o := <-first; o.err != nil || !o.res.Allowed {
		t.Fatalf("first Take = %+v, %v; want allowed", o.res, o.err)
	}
	if got := <-g.entered; len(got) != 1 || got[0] != 3 {
		t.Fatalf("second script = attempts %v, want [3] (the batch's 2 and the single call)", got)
	}
	g.release <- struct{}{}
	rs := <-bch
	for k, want := range []int64{1, 3} {
		if rs[k].Err != nil {
			t.Fatalf("TakeBatch[%d] = %v", k, rs[k].Err)
		}
		checkRule(t, fmt.Sprintf("TakeBatch[%d]", k), rs[k].Result.Rules[0], true, want, 10)
	}
	if o := <-single; o.err != nil {
		t.Fatalf("Take(single) = %v", o.err)
	} else {
		checkRule(t, "Take(single)", o.res.Rules[0], true, 3, 10)
	}

	// Alone: at once, one script.
	done := make(chan []driver.BatchResult, 1)
	go func() {
		done <- b.TakeBatch(context.Background(), []driver.Request{s1.request(opTake, 1, f1).Request, s2.request(opTake, 1, f2).Request})
	}()
	if got := <-g.entered; len(got) != 1 || got[0] != 2 {
		t.Fatalf("lone batch = attempts %v, want [2]", got)
	}
	g.release <- struct{}{}
	for k, r := range <-done {
		if r.Err != nil || !r.Result.Allowed {
			t.Fatalf("lone TakeBatch[%d] = %+v, %v", k, r.Result, r.Err)
		}
	}
	if n := b.co.queued(); n != 0 {
		t.Errorf("queued after the calls = %d, want 0", n)
	}

	// Above batchAttempts: scripts of its own, outside the coalescer.
	big := make([]driver.Request, batchAttempts+1)
	for i := range big {
		big[i] = s1.request(opPeek, 1, f1).Request
	}
	done = make(chan []driver.BatchResult, 1)
	go func() { done <- b.PeekBatch(context.Background(), big) }()
	if got := <-g.entered; len(got) != 2 || got[0] != batchAttempts || got[1] != 1 {
		t.Fatalf("big batch = attempts %v, want [%d 1]", got, batchAttempts)
	}
	b.co.mu.Lock()
	slots := b.co.slots
	b.co.mu.Unlock()
	if slots != 0 {
		t.Errorf("slots held while a big batch is in flight = %d, want 0 (it does not use the coalescer)", slots)
	}
	g.release <- struct{}{}
	for k, r := range <-done {
		if r.Err != nil {
			t.Fatalf("PeekBatch[%d] = %v", k, r.Err)
		}
	}
}
