package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// policyKey returns a store key of its own for one test.
func policyKey(t testing.TB) string {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	return "fct:{!policies-" + hex.EncodeToString(r[:]) + "}"
}

// storeTargets are the deployments the policy store is tested on.
var storeTargets = []struct {
	name string
	new  func(t *testing.T) (*Backend, goredis.UniversalClient)
}{
	{"standalone", func(t *testing.T) (*Backend, goredis.UniversalClient) { return standalone(t) }},
	{"cluster", func(t *testing.T) (*Backend, goredis.UniversalClient) { return cluster(t) }},
}

// newStoreClient returns a backend on a client of its own for the same
// deployment as c (a separate process would have one).
func newStoreClient(t *testing.T, c goredis.UniversalClient) *Backend {
	t.Helper()
	var n goredis.UniversalClient
	switch c := c.(type) {
	case *goredis.ClusterClient:
		n = goredis.NewClusterClient(testserver.Patient(NewClientOptions(c.Options().Addrs...)).Cluster())
	case *goredis.Client:
		n = goredis.NewClient(testserver.Patient(NewClientOptions(c.Options().Addr)).Simple())
	default:
		t.Fatalf("client %T", c)
	}
	t.Cleanup(func() { n.Close() })
	return New(n, nil)
}

func storePut(t *testing.T, b *Backend, key string, prev int64, doc string) driver.PolicyVersion {
	t.Helper()
	v, err := b.PutPolicies(context.Background(), key, prev, driver.PolicyVersion{Document: []byte(doc), By: "ann", Reason: "r-" + doc})
	if err != nil {
		t.Fatalf("PutPolicies(prev %d) error: %v", prev, err)
	}
	if v.Version != prev+1 {
		t.Fatalf("PutPolicies(prev %d) = version %d, want %d", prev, v.Version, prev+1)
	}
	return v
}

func TestPolicyStore(t *testing.T) {
	for _, target := range storeTargets {
		t.Run(target.name, func(t *testing.T) {
			b, c := target.new(t)
			ctx := context.Background()
			key := policyKey(t)

			if _, err := b.GetPolicies(ctx, key, 0); !errors.Is(err, driver.ErrNoPolicyVersion) {
				t.Errorf("GetPolicies(0) on an empty store = %v, want ErrNoPolicyVersion", err)
			}
			if h, err := b.PolicyHistory(ctx, key, 0); err != nil || len(h) != 0 {
				t.Errorf("PolicyHistory on an empty store = %v, %v, want none", h, err)
			}
			before := serverNow(t, c).Truncate(time.Microsecond)
			v1 := storePut(t, b, key, 0, "one")
			after := serverNow(t, c)
			if v1.At.Before(before) || v1.At.After(after) || v1.By != "ann" || v1.Reason != "r-one" {
				t.Errorf("PutPolicies = {at %v by %q reason %q}, want at in [%v, %v] (server TIME), by ann, reason r-one", v1.At, v1.By, v1.Reason, before, after)
			}
			storePut(t, b, key, 1, "two")
			storePut(t, b, key, 2, "three")
			for _, prev := range []int64{0, 2, 4} {
				if _, err := b.PutPolicies(ctx, key, prev, driver.PolicyVersion{Document: []byte("late")}); !errors.Is(err, driver.ErrVersionConflict) {
					t.Errorf("PutPolicies(prev %d) with current 3 = %v, want ErrVersionConflict", prev, err)
				}
			}
			big := make([]byte, driver.MaxPolicyDocument+1)
			if _, err := b.PutPolicies(ctx, key, 3, driver.PolicyVersion{Document: big}); err == nil || errors.Is(err, driver.ErrVersionConflict) {
				t.Errorf("PutPolicies of MaxPolicyDocument+1 bytes = %v, want a size error", err)
			}
			// The largest document round-trips byte for byte.
			full := make([]byte, driver.MaxPolicyDocument)
			for i := range full {
				full[i] = byte(i * 7)
			}
			storePut(t, b, key, 3, string(full))
			if v, err := b.GetPolicies(ctx, key, 4); err != nil || string(v.Document) != string(full) {
				t.Errorf("GetPolicies(4) of a MaxPolicyDocument document: %d bytes, %v; want it unchanged", len(v.Document), err)
			}
			storePut(t, b, key, 4, "five")

			for _, tc := range []struct {
				n    int64
				want string
			}{{0, "five"}, {1, "one"}, {2, "two"}, {3, "three"}, {5, "five"}} {
				v, err := b.GetPolicies(ctx, key, tc.n)
				if err != nil || string(v.Document) != tc.want || v.Reason != "r-"+tc.want || v.By != "ann" || v.At.IsZero() {
					t.Errorf("GetPolicies(%d) = {%q reason %q by %q at %v}, %v, want %q", tc.n, v.Document, v.Reason, v.By, v.At, err, tc.want)
				}
			}
			if v, _ := b.GetPolicies(ctx, key, 1); !v.At.Equal(v1.At) {
				t.Errorf("GetPolicies(1).At = %v, want %v as PutPolicies returned", v.At, v1.At)
			}
			for _, n := range []int64{-1, 6, 1000} {
				if _, err := b.GetPolicies(ctx, key, n); !errors.Is(err, driver.ErrNoPolicyVersion) {
					t.Errorf("GetPolicies(%d) = %v, want ErrNoPolicyVersion", n, err)
				}
			}
			for _, tc := range []struct {
				max  int
				want []int64
			}{{0, []int64{5, 4, 3, 2, 1}}, {-1, []int64{5, 4, 3, 2, 1}}, {2, []int64{5, 4}}, {9, []int64{5, 4, 3, 2, 1}}} {
				h, err := b.PolicyHistory(ctx, key, tc.max)
				var got []int64
				for _, v := range h {
					got = append(got, v.Version)
				}
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("PolicyHistory(%d) = %v, %v, want %v", tc.max, got, err, tc.want)
				}
			}

			for _, bad := range []string{"fct:policies", "fct:{}policies"} {
				if _, err := b.PutPolicies(ctx, bad, 0, driver.PolicyVersion{}); err == nil || !strings.Contains(err.Error(), "hash tag") {
					t.Errorf("PutPolicies on key %q = %v, want an error naming the hash tag", bad, err)
				}
			}
		})
	}
}

// TestPolicyStoreHistoryChunks: a history longer than one pipeline.
func TestPolicyStoreHistoryChunks(t *testing.T) {
	b, _ := standalone(t)
	key := policyKey(t)
	for prev := range int64(150) {
		storePut(t, b, key, prev, fmt.Sprint(prev+1))
	}
	h, err := b.PolicyHistory(context.Background(), key, 0)
	if err != nil || len(h) != 150 {
		t.Fatalf("PolicyHistory = %d versions, %v, want 150", len(h), err)
	}
	for i, v := range h {
		if want := int64(150 - i); v.Version != want || string(v.Document) != fmt.Sprint(want) {
			t.Fatalf("PolicyHistory[%d] = version %d %q, want %d", i, v.Version, v.Document, want)
		}
	}
	if h, _ := b.PolicyHistory(context.Background(), key, 70); len(h) != 70 || h[69].Version != 81 {
		t.Errorf("PolicyHistory(70) = %d versions, want 70 ending at 81", len(h))
	}
}

// TestPolicyStoreConcurrentPuts: puts from separate clients on the same
// previous version: exactly one wins per version.
func TestPolicyStoreConcurrentPuts(t *testing.T) {
	for _, target := range storeTargets {
		t.Run(target.name, func(t *testing.T) {
			_, c := target.new(t)
			const writers, rounds = 6, 10
			bs := make([]*Backend, writers)
			for i := range bs {
				bs[i] = newStoreClient(t, c)
			}
			key := policyKey(t)
			for round := int64(0); round < rounds; round++ {
				var (
					wg        sync.WaitGroup
					mu        sync.Mutex
					won, lost int
				)
				start := make(chan struct{})
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						_, err := bs[w].PutPolicies(context.Background(), key, round, driver.PolicyVersion{Document: []byte(fmt.Sprint(w))})
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							won++
						case errors.Is(err, driver.ErrVersionConflict):
							lost++
						default:
							t.Errorf("PutPolicies error: %v", err)
						}
					}()
				}
				close(start)
				wg.Wait()
				if won != 1 || lost != writers-1 {
					t.Fatalf("round %d: %d puts won, %d conflicted; want 1 and %d", round, won, lost, writers-1)
				}
			}
			if h, err := bs[0].PolicyHistory(context.Background(), key, 0); err != nil || len(h) != rounds {
				t.Errorf("PolicyHistory = %d versions, %v; want %d", len(h), err, rounds)
			}
		})
	}
}

// receiveVersion reads ch until it yields want, failing on a closed
// channel, a number beyond want, or nothing within a generous deadline.
func receiveVersion(t *testing.T, what string, ch <-chan int64, want int64) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed, want version %d", what, want)
			}
			if v == want {
				return
			}
			if v > want {
				t.Fatalf("%s: received %d, want %d", what, v, want)
			}
		case <-deadline:
			t.Fatalf("%s: version %d not received within 15s", what, want)
		}
	}
}

// waitClosed fails unless ch is closed (after draining) within a deadline.
func waitClosed(t *testing.T, what string, ch <-chan int64) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: channel not closed within 15s of cancel", what)
		}
	}
}

// TestPolicyWatch: two watchers on clients of their own see every put's
// version (one by one), and their channels close on cancel with no
// goroutine left behind.
func TestPolicyWatch(t *testing.T) {
	for _, target := range storeTargets {
		t.Run(target.name, func(t *testing.T) {
			writer, c := target.new(t)
			key := policyKey(t)
			storePut(t, writer, key, 0, "one")
			w1, w2 := newStoreClient(t, c), newStoreClient(t, c)
			// Warm the clients' pools, then count goroutines.
			for _, w := range []*Backend{w1, w2} {
				if _, err := w.GetPolicies(context.Background(), key, 0); err != nil {
					t.Fatal(err)
				}
			}
			base := runtime.NumGoroutine()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var chans []<-chan int64
			for _, w := range []*Backend{w1, w2} {
				ch, err := w.WatchPolicies(ctx, key)
				if err != nil {
					t.Fatalf("WatchPolicies: %v", err)
				}
				chans = append(chans, ch)
			}
			for i, ch := range chans {
				receiveVersion(t, fmt.Sprintf("watcher %d, at start", i), ch, 1)
			}
			for prev := int64(1); prev <= 5; prev++ {
				storePut(t, writer, key, prev, "next")
				for i, ch := range chans {
					receiveVersion(t, fmt.Sprintf("watcher %d after put %d", i, prev+1), ch, prev+1)
				}
			}
			cancel()
			for i, ch := range chans {
				waitClosed(t, fmt.Sprintf("watcher %d", i), ch)
			}
			eventually(t, 10*time.Second, "watch goroutines ended", func() bool { return runtime.NumGoroutine() <= base })
		})
	}
}

// TestPolicyWatchClusterNodes: on a Cluster, a put's PUBLISH reaches
// subscribers on every master, not only the one owning the store's slot.
func TestPolicyWatchClusterNodes(t *testing.T) {
	b, c := cluster(t)
	ctx := context.Background()
	key := policyKey(t)
	var (
		mu   sync.Mutex
		subs []*goredis.PubSub
	)
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		ps := m.Subscribe(ctx, policyChannel(key))
		mu.Lock()
		subs = append(subs, ps)
		mu.Unlock()
		_, err := ps.ReceiveTimeout(ctx, 10*time.Second)
		return err
	})
	for _, ps := range subs {
		defer ps.Close()
	}
	if err != nil || len(subs) != 3 {
		t.Fatalf("subscribed on %d masters (%v), want 3", len(subs), err)
	}
	storePut(t, b, key, 0, "one")
	for i, ps := range subs {
		m, err := ps.ReceiveTimeout(ctx, 10*time.Second)
		msg, ok := m.(*goredis.Message)
		if err != nil || !ok || msg.Payload != "1" {
			t.Errorf("master %d: received %v, %v; want the message 1", i, m, err)
		}
	}
}

// TestPolicyWatchReconnect: a watcher whose connection is killed, or
// whose server restarts, reconnects and catches up on the version it
// missed.
func TestPolicyWatchReconnect(t *testing.T) {
	srv := redistest.NewServer(t)
	o := testserver.Patient(NewClientOptions(srv.Addr())).Simple()
	wc, pc := goredis.NewClient(o), goredis.NewClient(o)
	defer wc.Close()
	defer pc.Close()
	watcher, writer := New(wc, nil), New(pc, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := policyKey(t)
	// Put first, then watch: the watcher's only read is the one after
	// its subscription, so once it delivered 1 it reads nothing more
	// until a message or a resubscription.
	storePut(t, writer, key, 0, "one")
	ch, err := watcher.WatchPolicies(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	receiveVersion(t, "at start", ch, 1)

	// A put whose notification the watcher misses: published elsewhere.
	keys := []string{key, policyVersionKey(key, 2)}
	if _, err := writer.run(ctx, putPoliciesScript, putPoliciesSrc, false, keys, append(keyArgs(keys, 5), 1, "two", "ann", "", "elsewhere")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-ch:
		t.Fatalf("received %d for an unpublished put, want nothing (the catch-up below would prove nothing)", v)
	default:
	}
	if n, err := pc.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v, want 1 connection", n, err)
	}
	receiveVersion(t, "after the connection was killed", ch, 2)
	storePut(t, writer, key, 2, "three")
	receiveVersion(t, "after put 3 on the new connection", ch, 3)

	// A restart without persistence empties the store: the next put is
	// version 1 again, and the watcher sees it, whether by its message or
	// by the catch-up after it resubscribes.
	srv.Restart(t)
	var v driver.PolicyVersion
	eventually(t, 15*time.Second, "a put after the restart", func() bool {
		v, err = writer.PutPolicies(ctx, key, 0, driver.PolicyVersion{Document: []byte("again")})
		return err == nil
	})
	receiveVersion(t, "after the restart", ch, v.Version)
	storePut(t, writer, key, 1, "again-2")
	receiveVersion(t, "after the restart, next put", ch, 2)

	cancel()
	waitClosed(t, "watcher", ch)
}

// TestPolicyWatchSubscribeFails: a watch on an unreachable server fails
// at once and starts nothing.
func TestPolicyWatchSubscribeFails(t *testing.T) {
	srv := redistest.NewServer(t)
	c := goredis.NewClient(NewClientOptions(srv.Addr()).Simple())
	defer c.Close()
	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ch, err := New(c, nil).WatchPolicies(ctx, policyKey(t)); err == nil {
		t.Errorf("WatchPolicies on a stopped server = %v, nil error; want an error", ch)
	}
}

// BenchmarkPolicyNotify measures the time from a put's return to the
// moment all of 10 watchers (10 clients) hold its version: p50, p99 and
// max in ms over b.N puts, on one server and on the 3-master cluster.
func BenchmarkPolicyNotify(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		o := NewClientOptions(redistest.Standalone(b)).Simple()
		benchNotify(b, func() goredis.UniversalClient { return goredis.NewClient(o) })
	})
	b.Run("cluster", func(b *testing.B) {
		o := NewClientOptions(redistest.Cluster(b)...).Cluster()
		benchNotify(b, func() goredis.UniversalClient { return goredis.NewClusterClient(o) })
	})
}

func benchNotify(b *testing.B, newClient func() goredis.UniversalClient) {
	wc := newClient()
	defer wc.Close()
	writer := New(wc, nil)
	key := policyKey(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type got struct {
		v  int64
		at time.Time
	}
	const watchers = 10
	recv := make(chan got, 1024)
	var wg sync.WaitGroup
	for range watchers {
		c := newClient()
		defer c.Close()
		ch, err := New(c, nil).WatchPolicies(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range ch {
				recv <- got{v, time.Now()}
			}
		}()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range int64(b.N) {
		if _, err := writer.PutPolicies(ctx, key, i, driver.PolicyVersion{Document: []byte("doc")}); err != nil {
			b.Fatal(err)
		}
		done := time.Now()
		var last time.Time
		for n := 0; n < watchers; {
			select {
			case g := <-recv:
				if g.v == i+1 {
					n++
					if g.at.After(last) {
						last = g.at
					}
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("put %d: %d of %d watchers notified within 10s", i+1, n, watchers)
			}
		}
		lat = append(lat, max(last.Sub(done), 0))
	}
	b.StopTimer()
	cancel()
	go func() {
		for range recv { // drain until the watchers are gone
		}
	}()
	wg.Wait()
	close(recv)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
}

// TestPolicyStoreSentinel: the store through a Sentinel client, and a
// watcher that follows a failover: versions written before it survive
// (replicated), and a put on the new master reaches the watcher.
func TestPolicyStoreSentinel(t *testing.T) {
	z := redistest.NewSentinel(t)
	writer, _ := sentinelBackend(t, z)
	watcher, _ := sentinelBackend(t, z)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := policyKey(t)
	ch, err := watcher.WatchPolicies(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	storePut(t, writer, key, 0, "one")
	receiveVersion(t, "before the failover", ch, 1)
	if _, err := writer.PutPolicies(ctx, key, 0, driver.PolicyVersion{}); !errors.Is(err, driver.ErrVersionConflict) {
		t.Errorf("PutPolicies(prev 0) with current 1 = %v, want ErrVersionConflict", err)
	}

	z.WaitSynced(t)
	z.Failover(t)
	var v driver.PolicyVersion
	eventually(t, 30*time.Second, "a put on the new master", func() bool {
		v, err = writer.PutPolicies(ctx, key, 1, driver.PolicyVersion{Document: []byte("two")})
		return err == nil
	})
	if v.Version != 2 {
		t.Fatalf("the put after the failover = version %d, want 2 (version 1 replicated)", v.Version)
	}
	receiveVersion(t, "after the failover", ch, 2)
	if h, err := writer.PolicyHistory(ctx, key, 0); err != nil || len(h) != 2 || string(h[0].Document) != "two" || string(h[1].Document) != "one" {
		t.Errorf("PolicyHistory after the failover = %v, %v, want two, one", h, err)
	}
	cancel()
	waitClosed(t, "watcher", ch)
}

// blackHole is a TCP proxy to a server whose connections can be made to
// drop all traffic silently, as behind a lost route: the sockets stay
// open, nothing arrives either way. Connections made later work.
type blackHole struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*holeConn
}

type holeConn struct {
	client, server net.Conn
	dead           atomic.Bool
}

func newBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &blackHole{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			c.client.Close()
			c.server.Close()
		}
	})
	go func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				cc.Close()
				continue
			}
			c := &holeConn{client: cc, server: sc}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					if !c.dead.Load() {
						if _, err := dst.Write(buf[:n]); err != nil {
							src.Close()
							return
						}
					}
				}
			}
			go pipe(sc, cc)
			go pipe(cc, sc)
		}
	}()
	return h
}

func (h *blackHole) Addr() string { return h.ln.Addr().String() }

// drop makes every connection open now drop its traffic.
func (h *blackHole) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.dead.Store(true)
	}
}

// TestPolicyWatchSilentDeath: a watcher whose connection stops carrying
// anything, without an error, notices the missing pong, subscribes anew
// and catches up on the version it missed.
func TestPolicyWatchSilentDeath(t *testing.T) {
	addr := redistest.Standalone(t)
	h := newBlackHole(t, addr)
	wc := goredis.NewClient(NewClientOptions(h.Addr()).Simple())
	defer wc.Close()
	writer, _ := standalone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := policyKey(t)
	storePut(t, writer, key, 0, "one")
	tm := watchTimings{ping: 200 * time.Millisecond, backoffMin: 20 * time.Millisecond, backoffMax: 200 * time.Millisecond}
	ch, err := New(wc, nil).watchPolicies(ctx, key, tm)
	if err != nil {
		t.Fatal(err)
	}
	receiveVersion(t, "at start", ch, 1)
	h.drop()
	storePut(t, writer, key, 1, "two") // its PUBLISH is lost in the hole
	receiveVersion(t, "after the connection went silent", ch, 2)
	storePut(t, writer, key, 2, "three")
	receiveVersion(t, "on the new connection", ch, 3)
	cancel()
	waitClosed(t, "watcher", ch)
}
