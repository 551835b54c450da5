package capability

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	goredis "github.com/redis/go-redis/v9"
)

// needServer skips the test loudly when redis-server is not on PATH, or
// fails it when FREQCAP_REQUIRE_SERVERS=1.
func needServer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal("redis-server not on PATH and FREQCAP_REQUIRE_SERVERS=1")
		}
		t.Skip("SKIPPED: redis-server not on PATH (install redis-server; FREQCAP_REQUIRE_SERVERS=1 makes this a failure)")
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServer starts bin on a free loopback port with extra arguments,
// waits until it answers PING, and stops it with the test.
func startServer(t *testing.T, bin string, extra ...string) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s did not answer PING: %v", bin, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLivePlainServer(t *testing.T) {
	bin := needServer(t)
	addr := startServer(t, bin)
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	r, err := Probe(context.Background(), c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Scripting.All() || r.NonAtomic || r.Cluster {
		t.Errorf("Probe(plain redis-server) = scripting %s, NonAtomic %v, Cluster %v; want scripting on 1/1, atomic, standalone", r.Scripting, r.NonAtomic, r.Cluster)
	}
	// Debian's redis-server is 7.0: no modules, no HFE. A newer one on
	// PATH may have HFE; nothing else.
	for _, a := range Algorithms {
		got := r.Choice(a).Strategy
		if got != PlainLua && !(a == driver.SlidingWindow && got == HFELua) {
			t.Errorf("Choice(%v) = %v, want %v", a, got, PlainLua)
		}
	}
	t.Logf("report:\n%s", r)
}

func TestLiveCluster(t *testing.T) {
	bin := needServer(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
			t.Fatal("redis-cli not on PATH and FREQCAP_REQUIRE_SERVERS=1")
		}
		t.Skip("SKIPPED: redis-cli not on PATH (install redis-tools)")
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		addrs = append(addrs, startServer(t, bin, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf")))
	}
	out, err := exec.Command(cli, append([]string{"--cluster", "create"}, append(addrs, "--cluster-replicas", "0", "--cluster-yes")...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		okAll := true
		for _, a := range addrs {
			n := goredis.NewClient(&goredis.Options{Addr: a, MaxRetries: -1})
			info, err := n.ClusterInfo(ctx).Result()
			n.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				okAll = false
			}
		}
		if okAll {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster_state did not become ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := Probe(ctx, c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Cluster || len(r.Nodes) != 3 || r.Scripting.String() != "3/3 masters" {
		t.Fatalf("Probe(cluster) = Cluster %v, %d nodes, scripting %s; want a cluster of 3 masters, scripting 3/3:\n%s", r.Cluster, len(r.Nodes), r.Scripting, r)
	}
	t.Logf("report:\n%s", r)
}

// TestLiveModules probes the module servers named by FREQCAP_TEST_TAIRHASH,
// FREQCAP_TEST_CELL and FREQCAP_TEST_HFE (host:port), skipping loudly for
// each one not given.
func TestLiveModules(t *testing.T) {
	tests := []struct {
		env  string
		algo driver.Algorithm
		want Strategy
	}{
		{"FREQCAP_TEST_TAIRHASH", driver.SlidingWindow, TairHashLua},
		{"FREQCAP_TEST_CELL", driver.GCRA, CellLua},
		{"FREQCAP_TEST_HFE", driver.SlidingWindow, HFELua},
	}
	for _, tc := range tests {
		t.Run(tc.env, func(t *testing.T) {
			addr := os.Getenv(tc.env)
			if addr == "" {
				t.Skipf("SKIPPED: %s is not set (host:port of a module server, docs/MODULES.md)", tc.env)
			}
			c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			d := NewDetector(c, Config{})
			r, err := d.Report(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Choice(tc.algo); got.Strategy != tc.want {
				t.Errorf("Choice(%v) = %v (%s), want %v\n%s", tc.algo, got.Strategy, got.Reason, tc.want, r)
			}
			// The overrides apply to a live server too.
			r2, err := Probe(context.Background(), c, Config{ForcePlainLua: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := r2.Choice(tc.algo).Strategy; got != PlainLua {
				t.Errorf("with ForcePlainLua: Choice(%v) = %v, want %v", tc.algo, got, PlainLua)
			}
		})
	}
}
