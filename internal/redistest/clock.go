package redistest

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

//go:embed clockshim/clockshim.c
var clockShim []byte

// shimLib is the clock shim built once per test binary (its path), or the
// error building it.
var shimLib struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildShim compiles clockshim.c with cc into a shared library.
func buildShim() (string, error) {
	shimLib.once.Do(func() {
		dir, err := os.MkdirTemp("", "redistest-clock-")
		if err != nil {
			shimLib.err = err
			return
		}
		shared.mu.Lock()
		shared.dirs = append(shared.dirs, dir) // removed by Main
		shared.mu.Unlock()
		src := filepath.Join(dir, "clockshim.c")
		if err := os.WriteFile(src, clockShim, 0o600); err != nil {
			shimLib.err = err
			return
		}
		lib := filepath.Join(dir, "clockshim.so")
		out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput()
		if err != nil {
			shimLib.err = fmt.Errorf("cc clockshim.c: %v: %s", err, lastLines(string(out), 5))
			return
		}
		shimLib.path = lib
	})
	return shimLib.path, shimLib.err
}

// Clock is a wall clock the test sets for the redis-servers it starts
// (Server, Cluster): their TIME, key expiry and everything else that reads
// the wall clock read the Clock, which moves only when the test sets it,
// so a script decides at the instant the test chose, to the microsecond.
// Their event loops keep the real monotonic clock. It works by preloading
// a small library (clockshim/clockshim.c, built with cc on first use) that
// reads the instant from a file the Clock maps shared.
//
// A Clock is a driver.Clock (Now, Sleep), so the same instants can be
// given to a Limiter (sdk.WithClock) and to a Redis backend's own clock.
// It is safe for concurrent use; set it only between requests (a request
// in flight reads whichever instant its server reads first).
type Clock struct {
	file string
	mem  []byte // the file, mapped shared: 8 bytes, Unix µs
	us   *int64 // mem as an int64
	mu   sync.Mutex
}

// NewClock returns a Clock reading start (truncated to the microsecond),
// for the servers Server and Cluster start. It skips the test (or fails it
// under FREQCAP_REQUIRE_SERVERS=1) without redis-server or a C compiler
// (cc), and fails it if the shim does not build. The shim is built once
// per test binary, in a directory Main removes.
func NewClock(t testing.TB, start time.Time) *Clock {
	t.Helper()
	requireBinaries(t, "redis-server", "cc")
	if _, err := buildShim(); err != nil {
		t.Fatalf("redistest: clock: %v", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "clock-")
	if err != nil {
		t.Fatalf("redistest: clock: %v", err)
	}
	defer f.Close()
	if err := f.Truncate(8); err != nil {
		t.Fatalf("redistest: clock: %v", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("redistest: clock: mmap: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	c := &Clock{file: f.Name(), mem: mem, us: (*int64)(unsafe.Pointer(&mem[0]))}
	c.Set(start)
	return c
}

// Now returns the clock's instant.
func (c *Clock) Now() time.Time {
	return time.UnixMicro(atomic.LoadInt64(c.us))
}

// Set sets the clock to t (truncated to the microsecond; after 1970).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	atomic.StoreInt64(c.us, t.UnixMicro())
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	atomic.AddInt64(c.us, d.Microseconds())
}

// Sleep advances the clock by d (if positive) and returns at once, or
// returns ctx's error without advancing if ctx is done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(max(d, 0))
	return nil
}

// env is what a server needs to read the clock.
func (c *Clock) env() []string {
	return []string{"LD_PRELOAD=" + shimLib.path, "FREQCAP_CLOCK_FILE=" + c.file}
}

// clockArgs are the redis-server arguments of a server on a clock:
// jemalloc's background thread sleeps until an instant of the wall clock
// (pthread_cond_timedwait), which the kernel reads: one of the Clock, in
// the past, would wake it at once, again and again.
var clockArgs = []string{"--jemalloc-bg-thread", "no"}

// Server starts a dedicated standalone server on the clock, stopped when
// t ends.
func (c *Clock) Server(t testing.TB) *Server {
	t.Helper()
	s, err := startLike(serverConfig{dir: t.TempDir(), env: c.env(), extra: clockArgs})
	if err != nil {
		t.Fatalf("redistest: start redis-server on a clock: %v", err)
	}
	t.Cleanup(s.kill)
	return s
}

// clusterNodeTimeout is the node timeout of a Cluster on a clock: longer
// than any jump a test makes (the nodes would otherwise find each other
// silent for the jump and fail the cluster).
const clusterNodeTimeout = 10 * 365 * 24 * time.Hour

// Cluster starts a dedicated 3-master Redis Cluster (no replicas) on the
// clock, stopped when t ends, and returns its masters' addresses. Its
// nodes meet on the real clock (a cluster is ok only after seconds of its
// clock have passed), then read the Clock. Their node timeout is ten
// years of the clock: set it as far ahead as needed, but failures are
// never detected.
func (c *Clock) Cluster(t testing.TB) []string {
	t.Helper()
	requireBinaries(t, "redis-cli")
	// A cluster becomes ok only once seconds of its nodes' clock have
	// passed since they met: they meet on the real clock.
	c.mu.Lock()
	prev := atomic.SwapInt64(c.us, 0)
	defer func() {
		atomic.StoreInt64(c.us, prev)
		c.mu.Unlock()
	}()
	nodes, err := startClusterLike(serverConfig{dir: t.TempDir(), cluster: true, env: c.env(),
		extra: append([]string{"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10)}, clockArgs...)}, 3)
	if err != nil {
		t.Fatalf("redistest: cluster on a clock: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}
