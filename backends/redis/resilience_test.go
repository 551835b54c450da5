package redis

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
)

func TestScriptFlush(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	s := newSubject(t, "flush")
	r := s.fixed("f", 10, time.Hour)
	for i := int64(1); i <= 3; i++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		res := take(t, b, s.request(opTake, 1, r))
		checkRule(t, "take after SCRIPT FLUSH", res.Rules[0], true, i, 10)
	}
	// Cancel after a flush too.
	req := s.request(opReserve, 1, r)
	req.ReservationID, req.ReservationTTL = "h", time.Hour
	take(t, b, req)
	c.ScriptFlush(ctx)
	if err := b.Cancel(ctx, s.reservations(), "h"); err != nil {
		t.Errorf("Cancel after SCRIPT FLUSH: %v", err)
	}
}

func TestServerRestart(t *testing.T) {
	srv := redistest.NewServer(t)
	o := NewClientOptions(srv.Addr()).Simple()
	c := goredis.NewClient(o)
	defer c.Close()
	b := New(c, nil)
	s := newSubject(t, "restart")
	r := s.sliding("s", 1000, time.Hour, 10)
	ctx := context.Background()

	// Several workers decide while the server restarts under them.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok, bad int
	)
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := b.do(ctx, s.request(opTake, 1, r))
				mu.Lock()
				if err != nil {
					bad++
				} else {
					ok++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // back off while the server is down
				}
			}
		}()
	}
	eventually(t, 5*time.Second, "decisions before the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok > 20
	})
	srv.Restart(t)
	mu.Lock()
	before := ok
	mu.Unlock()
	eventually(t, 5*time.Second, "decisions after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok > before+50
	})
	close(stop)
	wg.Wait()
	t.Logf("decisions: %d ok, %d failed around the restart", ok, bad)
}

// A decision whose reply is late must not be sent again, even by a client
// configured to retry: the server would count it twice. A retry needs a
// new connection (the timed-out one is discarded), so the test counts dials
// during the call; a control call through go-redis' own Script.Run shows
// that the client would otherwise retry.
func TestNoReplayAfterTimeout(t *testing.T) {
	addr := redistest.Standalone(t)
	c, dials, blocker := replayClients(t, addr)
	b := New(c, nil)
	s := newSubject(t, "replay")
	r := s.fixed("f", 100, time.Hour)
	ctx := context.Background()
	// Load the script, detect, and leave an idle connection in the pool;
	// a call slower than the 50 ms timeout on a loaded machine is tried
	// again (it may have counted: the check below takes the counter after).
	untilDone(t, "the first decision", func() error { _, err := b.do(ctx, s.request(opTake, 1, r)); return err })
	control := goredis.NewScript(`return redis.call('INCR', KEYS[1])`)
	untilDone(t, "the first control call", func() error { return control.Run(ctx, c, []string{s.key("control")}).Err() })

	var before int64
	d, err := busyTry(t, addr, blocker, dials, func() { before = counter(t, blocker, r) },
		func() error { _, err := b.do(ctx, s.request(opTake, 1, r)); return err },
		func(_ int64, err error) bool { return err != nil })
	if err == nil {
		t.Fatal("the decision did not time out while the server ran a busy script: the replay check has nothing to check")
	}
	if d != 0 {
		t.Errorf("Take timed out (%v) and the client dialed %d times during it, want 0 (no replay)", err, d)
	}
	if n := counter(t, blocker, r); n < before || n > before+1 {
		t.Errorf("counter = %d after one timed-out decision, %d before it; want %d or %d (sent at most once)", n, before, before, before+1)
	}
	d, err = busyTry(t, addr, blocker, dials, func() {},
		func() error { return control.Run(ctx, c, []string{s.key("control")}).Err() },
		func(d int64, _ error) bool { return d > 0 })
	if d == 0 {
		t.Errorf("control: go-redis Script.Run with MaxRetries 3 dialed %d times during a timed-out call (err %v), want a retry: without one, the no-dial check above proves nothing", d, err)
	}
}

// replayClients returns a client with the risky settings the backend must
// neutralise (MaxRetries 3, a 50 ms read timeout) that counts its dials —
// a replay needs a new connection after a timeout — and a second client
// for blocking the server, which waits for a reply as long as a busy
// script can last on a loaded machine and never sends a command twice (a
// busy script sent again would run twice, or meet BUSY). Both close with
// the test.
func replayClients(t *testing.T, addr string) (c *goredis.Client, dials *atomic.Int64, blocker *goredis.Client) {
	t.Helper()
	dials = new(atomic.Int64)
	c = goredis.NewClient(&goredis.Options{
		Addr:        addr,
		MaxRetries:  3,
		ReadTimeout: 50 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { c.Close() })
	blocker = goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: busyPatience})
	t.Cleanup(func() { blocker.Close() })
	return c, dials, blocker
}

// busyPatience is how long a busy script may last. It is calibrated for
// about 1.5 s of an idle server's time, but a loaded machine stretches it
// (up to 13.6 s seen beside three CPU hogs on a 2-core machine already
// busy with other tests). Past the server's
// busy-reply-threshold (5 s by default) the server answers BUSY at once to
// every other client instead of queueing its commands, the decision under
// test included: whileBusy raises the threshold to busyPatience for the
// script, and the blocker waits as long.
const busyPatience = time.Minute

// busyTry runs f while the server is busy (whileBusy) and returns the
// dials counted and f's error. It tries again, with a script twice as
// long, at most twice, while ok(dials, err) is false and f returned after
// the busy script had ended: a script calibrated while the machine was
// slower than it is now ends too soon to say anything about f. before
// runs ahead of each try.
func busyTry(t *testing.T, addr string, blocker *goredis.Client, dials *atomic.Int64, before func(), f func() error, ok func(int64, error) bool) (int64, error) {
	t.Helper()
	for try := 1; ; try++ {
		before()
		run := whileBusy(t, addr, blocker, dials, f)
		switch {
		case run.missed && try == 3:
			t.Fatal("the server never looked busy while the busy script was sent (3 tries, each script twice as long)")
		case run.missed:
			t.Logf("the server never looked busy while the busy script was sent (try %d): again with a script twice as long", try)
		case run.held || ok(run.dials, run.err) || try == 3:
			return run.dials, run.err
		default:
			t.Logf("the busy script ended before the call under test returned (try %d): again with a script twice as long", try)
		}
	}
}

// busyRun is what whileBusy saw: the dials counted while f ran, f's
// error, and whether the busy script still ran when f returned; missed
// when the server never looked busy and f did not run.
type busyRun struct {
	dials  int64
	err    error
	held   bool
	missed bool
}

// whileBusy makes the server at addr run a script busy for about 1.5 s
// (sent by blocker; see busyIterations), polls until the server is seen
// busy — a probe PING gets no answer within 150 ms, which a loaded
// machine alone does not cause (a 20 ms probe was fooled by load) — and
// runs f meanwhile (or not at all where the server was not seen busy
// within a second). Where the script's reply came before f returned, or
// f did not run, the server's rate is taken as twice what it was, for the
// next script. The
// server queues other clients' commands until the script ends, for up to
// busyPatience; a script still running then is killed, so that no later
// test meets BUSY.
func whileBusy(t *testing.T, addr string, blocker *goredis.Client, dials *atomic.Int64, f func() error) busyRun {
	t.Helper()
	ctx := context.Background()
	n := busyIterations(t, addr, blocker, 1500*time.Millisecond)
	restore := busyRepliesAfter(t, blocker, busyPatience)
	done := make(chan error, 1)
	var (
		berr  error
		ended bool
	)
	defer func() {
		if !ended {
			berr = <-done
		}
		if berr != nil {
			killScript(t, addr)
		}
		restore()
	}()
	start := time.Now()
	go func() {
		done <- blocker.Eval(ctx, busyScript, nil, n).Err()
	}()
	probe := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 150 * time.Millisecond})
	defer probe.Close()
	var run busyRun
	for deadline := time.Now().Add(time.Second); ; {
		if err := probe.Ping(ctx).Err(); err != nil {
			break // no answer in 150 ms: the script is running
		}
		if time.Now().After(deadline) {
			run.missed = true
			break
		}
	}
	if !run.missed {
		before := dials.Load()
		run.err = f()
		run.dials = dials.Load() - before
		select {
		case berr = <-done:
		default:
			run.held = true
			berr = <-done
		}
	} else {
		berr = <-done
	}
	ended = true
	if berr != nil {
		t.Fatalf("busy script: %v", berr)
	}
	if !run.held {
		if r, ok := busyRates.Load(addr); ok {
			busyRates.Store(addr, 2*r.(float64))
		}
	}
	t.Logf("busy script: %d iterations, %v from send to reply; running until the call returned: %v", n, time.Since(start).Round(time.Millisecond), run.held)
	return run
}

// killScript ends a script still running on the server at addr (SCRIPT
// KILL, answered once the script has run past the busy-reply threshold),
// or finds none (NOTBUSY).
func killScript(t *testing.T, addr string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 2 * busyPatience})
	defer c.Close()
	if err := c.ScriptKill(context.Background()).Err(); err != nil && !strings.HasPrefix(err.Error(), "NOTBUSY") {
		t.Errorf("SCRIPT KILL (ending the busy script): %v", err)
	}
}

// busyRepliesAfter sets the server's busy-reply-threshold to d (by its
// older name lua-time-limit, which every Redis and Valkey the tests run
// accepts) and returns a function that sets it back.
func busyRepliesAfter(t *testing.T, c *goredis.Client, d time.Duration) (restore func()) {
	t.Helper()
	ctx := context.Background()
	cfg, err := c.ConfigGet(ctx, "lua-time-limit").Result()
	if err != nil || len(cfg) != 1 {
		t.Fatalf("CONFIG GET lua-time-limit = %v, %v: the busy script needs the server's busy-reply threshold raised", cfg, err)
	}
	var old string
	for _, v := range cfg {
		old = v
	}
	if err := c.ConfigSet(ctx, "lua-time-limit", strconv.FormatInt(d.Milliseconds(), 10)).Err(); err != nil {
		t.Fatalf("CONFIG SET lua-time-limit: %v", err)
	}
	return func() {
		if err := c.ConfigSet(ctx, "lua-time-limit", old).Err(); err != nil {
			t.Errorf("CONFIG SET lua-time-limit %s (restoring): %v", old, err)
		}
	}
}

// untilDone calls f until it returns nil, for at most a minute: a setup
// call through a client with a short timeout, which a loaded machine can
// exceed.
func untilDone(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after a minute: %v", what, err)
		}
		t.Logf("%s: %v; again", what, err)
	}
}

// busyScript loops ARGV[1] times in plain Lua and returns 1. It keeps the
// server busy without reading TIME (which does not advance inside a
// script on Redis 7.4 and Valkey 8) and without DEBUG (often disabled).
const busyScript = `local n, x = tonumber(ARGV[1]), 0
for i = 1, n do x = x + i end
return 1`

// busyRates holds the iterations per second of busyScript, by server
// address (measured once per server and test binary, doubled by whileBusy
// where a script ended too soon).
var busyRates sync.Map

// busyIterations returns how many iterations of busyScript keep the server
// at addr busy for about d. The first call for a server calibrates: it
// times ever longer runs from the client until one takes 50 ms, then
// keeps the fastest of three runs of that length (a run slowed by a busy
// machine would make the busy script too short; a fast estimate only
// makes it longer).
func busyIterations(t *testing.T, addr string, c *goredis.Client, d time.Duration) int64 {
	t.Helper()
	if r, ok := busyRates.Load(addr); ok {
		return int64(r.(float64) * d.Seconds())
	}
	ctx := context.Background()
	run := func(n int64) time.Duration {
		start := time.Now()
		if err := c.Eval(ctx, busyScript, nil, n).Err(); err != nil {
			t.Fatalf("busy script calibration (%d iterations): %v", n, err)
		}
		return time.Since(start)
	}
	n := int64(1 << 16)
	for run(n) < 50*time.Millisecond {
		if n >= 1<<36 {
			t.Fatalf("busy script calibration: %d iterations took under 50ms", n)
		}
		n *= 4
	}
	best := run(n)
	for range 2 {
		best = min(best, run(n))
	}
	rate := float64(n) / best.Seconds()
	busyRates.Store(addr, rate)
	t.Logf("busy script on %s: %.0f iterations/s (fastest of 3 runs of %d: %v)", addr, rate, n, best)
	return int64(rate * d.Seconds())
}
