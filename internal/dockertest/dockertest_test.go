package dockertest

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func TestSplitImage(t *testing.T) {
	tests := []struct{ in, repo, tag string }{
		{"redis:7.2", "redis", "7.2"},
		{"redis", "redis", "latest"},
		{"freqcap/redis:7.0-debian", "freqcap/redis", "7.0-debian"},
		{"localhost:5000/redis", "localhost:5000/redis", "latest"},
		{"localhost:5000/redis:7", "localhost:5000/redis", "7"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			repo, tag := splitImage(tc.in)
			if repo != tc.repo || tag != tc.tag {
				t.Errorf("splitImage(%q) = %q, %q, want %q, %q", tc.in, repo, tag, tc.repo, tc.tag)
			}
		})
	}
}

func TestStartRedis(t *testing.T) {
	srv := Start(t, Redis())
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") {
		t.Errorf("Addr = %q, want a 127.0.0.1 address", srv.Addr())
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v, want PONG", got, err)
	}
	// The server's TIME is allowed in scripts (Redis >= 7 replicates effects).
	if _, err := rdb.Eval(ctx, "return redis.call('TIME')", nil).Result(); err != nil {
		t.Fatalf("EVAL TIME: %v", err)
	}
	// Published on loopback only.
	c, err := srv.pool.Client.InspectContainer(srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	for port, bs := range c.NetworkSettings.Ports {
		for _, b := range bs {
			if b.HostIP != "127.0.0.1" {
				t.Errorf("port %s published on %q, want 127.0.0.1 only", port, b.HostIP)
			}
		}
	}
	if out := srv.Exec(t, "redis-cli", "ping"); strings.TrimSpace(out) != "PONG" {
		t.Errorf("exec redis-cli ping = %q, want PONG", out)
	}
}

// TestRestartKeepsAddr: a stopped and restarted container answers on the
// same address, with an empty data set (no persistence).
func TestRestartKeepsAddr(t *testing.T) {
	srv := Start(t, Redis())
	addr := srv.Addr()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	srv.Restart(t)
	if srv.Addr() != addr {
		t.Errorf("Addr after restart = %q, want %q", srv.Addr(), addr)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after restart = %d, %v, want 0, nil", n, err)
	}
}

// TestCleanup: containers and networks are gone once their test ends.
func TestCleanup(t *testing.T) {
	var id, netID string
	t.Run("inner", func(t *testing.T) {
		n := NewNetwork(t)
		spec := Redis()
		spec.Network = n
		srv := Start(t, spec)
		if strings.HasPrefix(srv.Addr(), "127.") {
			t.Errorf("Addr on a network = %q, want its network address", srv.Addr())
		}
		id, netID = srv.ID, n.ID
	})
	if id == "" {
		t.Skip("inner test did not start a container")
	}
	p := Pool(t)
	if _, err := p.Client.InspectContainer(id); err == nil {
		t.Errorf("container %s still exists after its test ended", id)
	}
	if _, err := p.Client.NetworkInfo(netID); err == nil {
		t.Errorf("network %s still exists after its test ended", netID)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, ClusterSpec{Masters: 3})
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := rdb.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	nodes, err := c.ClusterNodes(c.Nodes[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if c.Node(n.Addr) == nil {
			t.Errorf("cluster announces %s, not a node address %v", n.Addr, c.Addrs())
		}
	}
}

// TestModules starts the module servers when their images are configured
// (they are opt-in: no CI can pull them) and checks each answers its
// module's command.
func TestModules(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		cmd  []any
	}{
		{"tairhash", TairHash(), []any{"EXHSET", "fc-dockertest", "f", "v"}},
		{"cell", Cell(), []any{"CL.THROTTLE", "fc-dockertest", 15, 30, 60, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := Start(t, tc.spec)
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rdb.Do(ctx, tc.cmd...).Err(); err != nil {
				t.Errorf("%v on %s = %v, want success (module loaded)", tc.cmd, srv.Image, err)
			}
		})
	}
}
