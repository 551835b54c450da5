package redistest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// ConfigSet runs CONFIG SET name value on the server at addr (e.g.
// "maxmemory" "3mb", "maxmemory-policy" "allkeys-lru"), failing t on an
// error.
func ConfigSet(t testing.TB, addr, name, value string) {
	t.Helper()
	if r, err := command(addr, "CONFIG", "SET", name, value); err != nil || r != "OK" {
		t.Fatalf("redistest: %s: CONFIG SET %s %s = %q, %v", addr, name, value, r, err)
	}
}

// Memory sets the server's maxmemory and maxmemory-policy (CONFIG SET),
// e.g. s.Memory(t, "3mb", "allkeys-lru"), for eviction tests.
func (s *Server) Memory(t testing.TB, maxmemory, policy string) {
	t.Helper()
	ConfigSet(t, s.Addr(), "maxmemory-policy", policy)
	ConfigSet(t, s.Addr(), "maxmemory", maxmemory)
}

// NewCluster starts a dedicated 3-master Redis Cluster (no replicas),
// stopped when t ends, for tests that change its configuration (CONFIG
// SET). It returns the masters' addresses.
func NewCluster(t testing.TB) []string {
	t.Helper()
	requireBinaries(t, "redis-server", "redis-cli")
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	nodes, err := startCluster(dir, 3)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("redistest: cluster: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
		_ = os.RemoveAll(dir)
	})
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// NextLRUTick returns once the server's LRU clock, which ticks once a
// second, has moved past every key written before the call: keys written
// after it are younger, so an allkeys-lru server evicts the older ones
// first (written on the same tick, a key is as likely to go as the ones
// before it). It polls OBJECT IDLETIME of a marker key until it reads 1 s,
// for at most 10 s. The server must accept a write (not full under
// noeviction).
func (s *Server) NextLRUTick(t testing.TB) {
	t.Helper()
	marker := "redistest-lru-marker-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if r, err := command(s.Addr(), "SET", marker, "x", "EX", "60"); err != nil || r != "OK" {
		t.Fatalf("redistest: %s: SET %s = %q, %v", s.Addr(), marker, r, err)
	}
	defer command(s.Addr(), "DEL", marker) //nolint:errcheck // a 60 s marker
	for deadline := time.Now().Add(10 * time.Second); ; {
		r, err := command(s.Addr(), "OBJECT", "IDLETIME", marker)
		if err != nil {
			t.Fatalf("redistest: %s: OBJECT IDLETIME: %v", s.Addr(), err)
		}
		if idle, _ := strconv.Atoi(r); idle >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: the LRU clock did not tick within 10 s (idle %q)", s.Addr(), r)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's LRU clock
	}
}
