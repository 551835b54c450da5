package docker_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/conformance/containers"
)

// TestPause freezes the Redis container during a decision loop. Every call
// must return within the configured timeout (plus scheduling slack):
// fail-open policies answer allowed + degraded, fail-closed ones an error.
// No goroutine may be left behind, and once the container is unpaused the
// decisions are exact again.
func TestPause(t *testing.T) {
	const (
		ioTimeout  = 250 * time.Millisecond // go-redis dial/read/write
		sdkTimeout = 400 * time.Millisecond // sdk.WithTimeout, per call
		slack      = 600 * time.Millisecond // scheduling under -race on a small machine
		workers    = 4
		perWorker  = 6
	)
	srv := containers.Start(t, containers.Spec{})
	baseOurs, _ := ourGoroutines()
	rdb := goredis.NewClient(func() *goredis.Options {
		o := fcredis.NewClientOptions(srv.Addr()).Simple()
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = ioTimeout, ioTimeout, ioTimeout, ioTimeout
		o.PoolSize = 2 * workers
		return o
	}())
	closed := false
	defer func() {
		if !closed {
			rdb.Close()
		}
	}()
	lim := sdk.New(fcredis.New(rdb, nil), sdk.WithTimeout(sdkTimeout))
	open := policy(t, unique("open"), 3, true)
	shut := policy(t, unique("closed"), 3, false)

	// Warm up: every worker's connection exists, the script is cached.
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = lim.Allow(context.Background(), open, sdk.Subject{"user": unique("warm")})
		}()
	}
	wg.Wait()
	expectExact(t, lim, open, sdk.Subject{"user": unique("before")}, 3)
	warmOurs, _ := ourGoroutines()
	warmAll := runtime.NumGoroutine()

	srv.Pause(t)
	type result struct {
		open    bool
		d       sdk.Decision
		err     error
		elapsed time.Duration
	}
	var (
		mu      sync.Mutex
		results []result
	)
	loopStart := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				p, isOpen := shut, false
				if (w+i)%2 == 0 {
					p, isOpen = open, true
				}
				start := time.Now()
				d, err := lim.Allow(context.Background(), p, sdk.Subject{"user": unique("paused")})
				r := result{open: isOpen, d: d, err: err, elapsed: time.Since(start)}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	loopTime := time.Since(loopStart)

	bound := sdkTimeout + slack
	var slowest time.Duration
	for i, r := range results {
		slowest = max(slowest, r.elapsed)
		if r.elapsed > bound {
			t.Errorf("call %d while paused took %v, want <= %v (timeout %v)", i, r.elapsed, bound, sdkTimeout)
		}
		switch {
		case r.open && (r.err != nil || !r.d.Allowed || !r.d.Degraded || r.d.Err == nil):
			t.Errorf("fail-open Allow while paused = allowed %v degraded %v err %v (decision err %v), want allowed, degraded, no error",
				r.d.Allowed, r.d.Degraded, r.err, r.d.Err)
		case !r.open && r.err == nil:
			t.Errorf("fail-closed Allow while paused = allowed %v degraded %v, want an error", r.d.Allowed, r.d.Degraded)
		}
	}
	t.Logf("%d calls while paused in %v; slowest %v (bound %v)", len(results), loopTime, slowest, bound)
	if len(results) != workers*perWorker {
		t.Fatalf("got %d results, want %d", len(results), workers*perWorker)
	}

	// Still paused: the calls have returned, so nothing of ours may still
	// be waiting on the server.
	settleGoroutines(t, warmOurs, warmAll+2, 5*time.Second)

	srv.Unpause(t)
	took := pollDecision(t, lim, shut, sdk.Subject{"user": unique("recover")}, 10*time.Second)
	t.Logf("decisions resumed %v after unpause", took)
	expectExact(t, lim, open, sdk.Subject{"user": unique("after")}, 3)
	expectExact(t, lim, shut, sdk.Subject{"user": unique("after")}, 3)

	rdb.Close()
	closed = true
	settleGoroutines(t, baseOurs, warmAll+2, 5*time.Second)
}

// cachedScripts reads number_of_cached_scripts from INFO memory.
func cachedScripts(t *testing.T, addr string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatalf("INFO memory: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "number_of_cached_scripts:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("number_of_cached_scripts %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no number_of_cached_scripts:\n%s", info)
	return 0
}

// TestStopRestart stops the Redis server (a process, then a container)
// and starts it again: while it is down calls fail fast (or degrade),
// afterwards decisions resume on the same client, the scripts are loaded again (the restarted server's cache
// is empty: EVALSHA gets NOSCRIPT, the backend falls back to EVAL) and,
// the server having no persistence, counting starts afresh.
func TestStopRestart(t *testing.T) {
	for _, l := range launchers {
		t.Run(l.Name(), func(t *testing.T) { testStopRestart(t, l.Server(t)) })
	}
}

func testStopRestart(t *testing.T, srv testserver.Server) {
	const sdkTimeout = time.Second
	rdb := newStandaloneClient(t, srv.Addr(), 500*time.Millisecond)
	lim := sdk.New(fcredis.New(rdb, nil), sdk.WithTimeout(sdkTimeout))
	shut := policy(t, unique("closed"), 3, false)
	open := policy(t, unique("open"), 3, true)
	a := sdk.Subject{"user": unique("a")}

	expectExact(t, lim, shut, a, 3)
	if n := cachedScripts(t, srv.Addr()); n < 1 {
		t.Fatalf("number_of_cached_scripts after decisions = %d, want >= 1", n)
	}

	srv.Stop(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		p    *sdk.Policy
	}{{"fail-closed", shut}, {"fail-open", open}} {
		start := time.Now()
		d, err := lim.Allow(ctx, tc.p, a)
		if el := time.Since(start); el > sdkTimeout+500*time.Millisecond {
			t.Errorf("%s Allow while stopped took %v, want <= %v", tc.name, el, sdkTimeout+500*time.Millisecond)
		}
		if tc.p == shut && err == nil {
			t.Errorf("fail-closed Allow while stopped = %+v, want an error", d)
		}
		if tc.p == open && (err != nil || !d.Allowed || !d.Degraded) {
			t.Errorf("fail-open Allow while stopped = allowed %v degraded %v err %v, want allowed + degraded", d.Allowed, d.Degraded, err)
		}
	}

	srv.Restart(t)
	if n := cachedScripts(t, srv.Addr()); n != 0 {
		t.Fatalf("number_of_cached_scripts after restart = %d, want 0", n)
	}
	took := pollDecision(t, lim, shut, sdk.Subject{"user": unique("recover")}, 10*time.Second)
	t.Logf("decisions resumed %v after restart", took)
	if n := cachedScripts(t, srv.Addr()); n < 1 {
		t.Errorf("number_of_cached_scripts after the first decision = %d, want >= 1 (reloaded)", n)
	}
	expectExact(t, lim, shut, sdk.Subject{"user": unique("b")}, 3)
	// No persistence: a's counters are gone with the old process.
	expectExact(t, lim, shut, a, 3)
}

// TestClusterFailover kills the master serving a subject's slot; its replica
// must be promoted and decisions for that subject resume within 15 s, exact
// on fresh keys in the same slot.
func TestClusterFailover(t *testing.T) {
	const (
		resumeBound = 15 * time.Second
		sdkTimeout  = time.Second
	)
	cl := containers.StartCluster(t, containers.ClusterSpec{Masters: 3, Replicas: 1, NodeTimeout: time.Second})
	o := fcredis.NewClientOptions(cl.Addrs()...).Cluster()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	// go-redis' default periodic reload (60 s) is left alone: decisions are
	// never retried, and the backend itself asks for a reload whenever a
	// decision fails without a reply, which is what must bring it to the
	// promoted replica within the bound below.
	rdb := goredis.NewClusterClient(o)
	t.Cleanup(func() { rdb.Close() })
	lim := sdk.New(fcredis.New(rdb, nil), sdk.WithTimeout(sdkTimeout))
	p := policy(t, unique("failover"), 1000, false)
	s := sdk.Subject{"user": unique("victim")}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 5; i++ {
		if d, err := lim.Allow(ctx, p, s); err != nil || !d.Allowed {
			t.Fatalf("Allow #%d before the failover = %v, %v, want allowed", i+1, d.Allowed, err)
		}
	}
	key := lim.Admin().KeyLayout(p, s).Sets[0].Key
	master, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("MasterForKey(%q): %v", key, err)
	}
	masterAddr := master.Options().Addr
	victim := cl.Node(masterAddr)
	if victim == nil {
		t.Fatalf("master %s is not a cluster node %v", masterAddr, cl.Addrs())
	}
	replicaAddr := replicaOf(t, cl, masterAddr)

	victim.Kill(t)
	killed := time.Now()
	took := pollDecision(t, lim, p, s, resumeBound)
	t.Logf("decisions resumed %v after killing master %s (replica %s)", took, masterAddr, replicaAddr)

	// The replica is the slot's master now, in the cluster's own view.
	for {
		nodes, err := cl.ClusterNodes(replicaAddr)
		if err == nil && isMaster(nodes, replicaAddr) {
			break
		}
		if time.Since(killed) > resumeBound {
			t.Fatalf("replica %s not promoted within %v (CLUSTER NODES: %+v, %v)", replicaAddr, resumeBound, nodes, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Fresh keys in the same slot (same hash tag: same subject, another
	// policy) are counted exactly on the new master.
	p2 := policy(t, unique("after"), 3, false)
	if m, err := rdb.MasterForKey(ctx, lim.Admin().KeyLayout(p2, s).Sets[0].Key); err != nil || m.Options().Addr != replicaAddr {
		t.Errorf("the slot's master after failover = %v, %v; want %s", addrOf(m), err, replicaAddr)
	}
	expectExact(t, lim, p2, s, 3)
}

// replicaOf returns the address of a replica of the master at addr.
func replicaOf(t *testing.T, cl *containers.Cluster, addr string) string {
	t.Helper()
	nodes, err := cl.ClusterNodes(addr)
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	var id string
	for _, n := range nodes {
		if n.Addr == addr {
			id = n.ID
		}
	}
	for _, n := range nodes {
		if id != "" && n.MasterID == id {
			return n.Addr
		}
	}
	t.Fatalf("master %s has no replica: %+v", addr, nodes)
	return ""
}

func isMaster(nodes []containers.ClusterNode, addr string) bool {
	for _, n := range nodes {
		if n.Addr == addr {
			return n.Master && !n.Fail
		}
	}
	return false
}

func addrOf(c *goredis.Client) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprint(c.Options().Addr)
}
