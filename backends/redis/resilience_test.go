package redis

import (
	"context"
	"net"
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
	take(t, b, s.request(opTake, 1, r)) // load the script, open a connection
	control := goredis.NewScript(`return redis.call('INCR', KEYS[1])`)
	control.Run(ctx, c, []string{s.key("control")})

	busy := func(f func() error) (int64, error) { return whileBusy(t, addr, blocker, dials, f) }
	d, err := busy(func() error { _, err := b.do(ctx, s.request(opTake, 1, r)); return err })
	if err == nil {
		t.Fatal("the decision did not time out while the server ran a busy script: the replay check has nothing to check")
	}
	if d != 0 {
		t.Errorf("Take timed out (%v) and the client dialed %d times during it, want 0 (no replay)", err, d)
	}
	if n := counter(t, blocker, r); n < 1 || n > 2 {
		t.Errorf("counter = %d after one timed-out decision, want 1 or 2 (sent at most once)", n)
	}
	d, err = busy(func() error { return control.Run(ctx, c, []string{s.key("control")}).Err() })
	if d == 0 {
		t.Errorf("control: go-redis Script.Run with MaxRetries 3 dialed %d times during a timed-out call (err %v), want a retry: without one, the no-dial check above proves nothing", d, err)
	}
}

// replayClients returns a client with the risky settings the backend must
// neutralise (MaxRetries 3, a 50 ms read timeout) that counts its dials —
// a replay needs a new connection after a timeout — and a second client
// with a long timeout for blocking the server. Both close with the test.
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
	blocker = goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { blocker.Close() })
	return c, dials, blocker
}

// whileBusy makes the server at addr run a script busy for about 1.5 s
// (sent by blocker; see busyIterations), polls until the server is seen
// busy — a probe PING gets no answer within 150 ms, which a loaded
// machine alone does not cause (a 20 ms probe was fooled by load) — runs
// f meanwhile, and returns f's error and the dials counted while f ran.
func whileBusy(t *testing.T, addr string, blocker *goredis.Client, dials *atomic.Int64, f func() error) (int64, error) {
	t.Helper()
	ctx := context.Background()
	n := busyIterations(t, addr, blocker, 1500*time.Millisecond)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- blocker.Eval(ctx, busyScript, nil, n).Err()
	}()
	probe := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 150 * time.Millisecond})
	defer probe.Close()
	for deadline := time.Now().Add(time.Second); ; {
		if err := probe.Ping(ctx).Err(); err != nil {
			break // no answer in 150 ms: the script is running
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never looked busy while the busy script was sent")
		}
	}
	before := dials.Load()
	err := f()
	d := dials.Load() - before
	if berr := <-done; berr != nil {
		t.Fatalf("busy script: %v", berr)
	}
	t.Logf("busy script: %d iterations, %v from send to reply", n, time.Since(start).Round(time.Millisecond))
	return d, err
}

// busyScript loops ARGV[1] times in plain Lua and returns 1. It keeps the
// server busy without reading TIME (which does not advance inside a
// script on Redis 7.4 and Valkey 8) and without DEBUG (often disabled).
const busyScript = `local n, x = tonumber(ARGV[1]), 0
for i = 1, n do x = x + i end
return 1`

// busyRates holds the iterations per second of busyScript, by server
// address (measured once per server and test binary).
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
