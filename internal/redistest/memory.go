package redistest

import (
	"os"
	"testing"
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
