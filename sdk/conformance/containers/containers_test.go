package containers

import (
	"context"
	"os"
	"os/exec"
	"slices"
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

func TestCommand(t *testing.T) {
	image := []string{"redis-server", "/etc/redis.conf"}
	tests := []struct {
		name string
		spec Spec
		want []string
	}{
		{"zero", Spec{}, redisCmd},
		{"args", Spec{Args: []string{"--maxmemory", "1mb"}}, append(append([]string{}, redisCmd...), "--maxmemory", "1mb")},
		{"modules", Spec{Modules: []string{"/m/a.so", "/m/b.so"}},
			append(append([]string{}, redisCmd...), "--loadmodule", "/m/a.so", "--loadmodule", "/m/b.so")},
		{"cmd", Spec{Cmd: []string{"/opt/bin/server", "--port", "7000"}, Args: []string{"--x", "1"}, Modules: []string{"/m.so"}},
			[]string{"/opt/bin/server", "--port", "7000", "--x", "1", "--loadmodule", "/m.so"}},
		{"image cmd", Spec{ImageCmd: true, Cmd: []string{"ignored"}, Modules: []string{"/m.so"}},
			[]string{"redis-server", "/etc/redis.conf", "--loadmodule", "/m.so"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.spec.command(image); !slices.Equal(got, tc.want) {
				t.Errorf("command() = %q, want %q", got, tc.want)
			}
		})
	}
	// command never writes into the default command or the spec's slices.
	before := slices.Clone(redisCmd)
	s := Spec{Cmd: make([]string, 1, 8), Args: []string{"--a"}}
	s.command(nil)
	Spec{Args: []string{"--b"}}.command(nil)
	if !slices.Equal(redisCmd, before) || s.Cmd[:2][1] != "" {
		t.Errorf("command() wrote into shared slices: redisCmd %q, Cmd %q", redisCmd, s.Cmd[:2])
	}
}

// pingAndTime checks the server at addr answers PING and runs a script
// reading TIME (allowed in scripts since Redis 7 replicates effects).
func pingAndTime(t *testing.T, rdb goredis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v, want PONG", got, err)
	}
	if _, err := rdb.Eval(ctx, "return redis.call('TIME')", []string{"k"}).Result(); err != nil {
		t.Fatalf("EVAL TIME: %v", err)
	}
}

func TestStartRedis(t *testing.T) {
	srv := Start(t, Spec{})
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") {
		t.Errorf("Addr = %q, want a 127.0.0.1 address", srv.Addr())
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	pingAndTime(t, rdb)
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

// TestRedisImage: a Spec without Image runs FREQCAP_IMAGE_REDIS, else the
// local build when the engine has it, else the public image.
func TestRedisImage(t *testing.T) {
	p := Pool(t)
	t.Setenv(EnvImageRedis, "example.invalid/redis:1")
	if got := redisImage(p); got != "example.invalid/redis:1" {
		t.Errorf("redisImage() with %s set = %q, want its value", EnvImageRedis, got)
	}
	t.Setenv(EnvImageRedis, "")
	want := PublicRedisImage
	if _, err := p.Client.InspectImage(LocalRedisImage); err == nil {
		want = LocalRedisImage
	}
	if got := redisImage(p); got != want {
		t.Errorf("redisImage() unset = %q, want %q", got, want)
	}
}

// TestGivenImage runs an image named by the test with its own command,
// port, arguments and environment: the Debian Redis of
// scripts/build-images.sh, made by docker import, which is what a user's
// own build looks like to this package.
func TestGivenImage(t *testing.T) {
	srv := Start(t, Spec{
		Image: LocalRedisImage,
		Cmd:   []string{"redis-server", "--port", "7001", "--bind", "0.0.0.0", "--protected-mode", "no"},
		Args:  []string{"--maxmemory", "12mb", "--maxmemory-policy", "noeviction"},
		Env:   []string{"FREQCAP_KIT_TEST=given"},
		Port:  7001,
		Name:  "given",
		Ready: 45 * time.Second,
	})
	if srv.Image != LocalRedisImage || srv.Port != 7001 {
		t.Errorf("Server image %q port %d, want %q 7001", srv.Image, srv.Port, LocalRedisImage)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	pingAndTime(t, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, want := range map[string]string{"port": "7001", "maxmemory": "12582912", "maxmemory-policy": "noeviction"} {
		got, err := rdb.ConfigGet(ctx, k).Result()
		if err != nil || got[k] != want {
			t.Errorf("CONFIG GET %s = %q, %v, want %q", k, got[k], err, want)
		}
	}
	// Cmd replaces the default command, whose --save "" it lacks.
	if got, err := rdb.ConfigGet(ctx, "save").Result(); err != nil || got["save"] == "" {
		t.Errorf("CONFIG GET save = %q, %v, want the server's default snapshots (Cmd replaced the default command)", got["save"], err)
	}
	c, err := srv.pool.Client.InspectContainer(srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Config.Env, "FREQCAP_KIT_TEST=given") {
		t.Errorf("container environment %q lacks FREQCAP_KIT_TEST=given", c.Config.Env)
	}
	if !strings.Contains(c.Name, "freqcap-test-given-") {
		t.Errorf("container name %q does not carry Spec.Name", c.Name)
	}
}

// TestImageCmd runs the image's own command (the local image's CMD: no
// persistence) with arguments appended.
func TestImageCmd(t *testing.T) {
	srv := Start(t, Spec{Image: LocalRedisImage, ImageCmd: true, Args: []string{"--maxmemory", "7mb"}})
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := rdb.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "7340032" {
		t.Errorf("CONFIG GET maxmemory = %q, %v, want 7340032 (Args appended to the image's command)", got["maxmemory"], err)
	}
	c, err := srv.pool.Client.InspectContainer(srv.ID)
	if err != nil {
		t.Fatal(err)
	}
	img, err := srv.pool.Client.InspectImage(LocalRedisImage)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]string{}, img.Config.Cmd...), "--maxmemory", "7mb"); !slices.Equal(c.Config.Cmd, want) {
		t.Errorf("container command %q, want the image's %q", c.Config.Cmd, want)
	}
}

// TestMissingImage: an image that is neither present nor pullable skips
// the test, saying so, and fails it under FREQCAP_REQUIRE_SERVERS=1. The
// test runs itself in a child process for each case (FREQCAP_KIT_CHILD=1),
// where Start ends the test.
func TestMissingImage(t *testing.T) {
	if os.Getenv("FREQCAP_KIT_CHILD") == "1" {
		// No registry answers on 127.0.0.1:1, so the pull fails at once.
		Start(t, Spec{Image: "127.0.0.1:1/freqcap-absent:never", Name: "missing"})
		t.Log("started a server")
		return
	}
	Pool(t) // without an engine the message would be about the engine
	for _, tc := range []struct {
		require  string
		wantFail bool
		want     string
	}{
		{"", false, "SKIPPED: missing: image \"127.0.0.1:1/freqcap-absent:never\" is not present"},
		{"1", true, "(FREQCAP_REQUIRE_SERVERS=1 requires it)"},
	} {
		t.Run("require="+tc.require, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMissingImage$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "FREQCAP_KIT_CHILD=1", EnvRequire+"="+tc.require, "REQUIRE_DOCKER=")
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Errorf("child failed = %v (%v), want %v:\n%s", failed, err, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("child output lacks %q:\n%s", tc.want, out)
			}
			if strings.Contains(string(out), "started a server") {
				t.Errorf("Start returned for a missing image:\n%s", out)
			}
		})
	}
}

// TestRestartKeepsAddr: a stopped and restarted container answers on the
// same address, with an empty data set (no persistence).
func TestRestartKeepsAddr(t *testing.T) {
	srv := Start(t, Spec{})
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
	skipped := false
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		n := NewNetwork(t)
		srv := Start(t, Spec{Network: n})
		if strings.HasPrefix(srv.Addr(), "127.") {
			t.Errorf("Addr on a network = %q, want its network address", srv.Addr())
		}
		id, netID = srv.ID, n.ID
	})
	if skipped {
		t.Skip("SKIPPED: the inner test was skipped; its message says why")
	}
	if id == "" {
		t.Fatal("inner test did not start a container")
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
	c := StartCluster(t, ClusterSpec{Node: Spec{Args: []string{"--maxmemory", "32mb"}}})
	if len(c.Nodes) != 3 {
		t.Fatalf("the zero ClusterSpec started %d nodes, want 3", len(c.Nodes))
	}
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
	// Node's Args reach every node, beside the cluster's own.
	for _, s := range c.Nodes {
		one := client(s.Addr())
		got, err := one.ConfigGet(ctx, "maxmemory").Result()
		one.Close()
		if err != nil || got["maxmemory"] != "33554432" {
			t.Errorf("%s: CONFIG GET maxmemory = %q, %v, want 33554432", s.Name, got["maxmemory"], err)
		}
	}
}

// TestSentinel connects through the Sentinel as a failover client does and
// finds the master there; a write reaches the replica.
func TestSentinel(t *testing.T) {
	z := StartSentinel(t, SentinelSpec{})
	rdb := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: z.MasterName, SentinelAddrs: []string{z.Addr()}, MaxRetries: -1,
	})
	defer rdb.Close()
	pingAndTime(t, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "sentinel-k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the Sentinel: %v", err)
	}
	m := client(z.Master.Addr())
	defer m.Close()
	if got, err := m.Get(ctx, "sentinel-k").Result(); err != nil || got != "v" {
		t.Errorf("GET on the master = %q, %v, want v (the failover client reached another server)", got, err)
	}
	r := client(z.Replica.Addr())
	defer r.Close()
	if err := poll(10*time.Second, func() error { return r.Get(ctx, "sentinel-k").Err() }); err != nil {
		t.Errorf("GET on the replica: %v, want the replicated value", err)
	}
	s := client(z.Addr())
	defer s.Close()
	addr, err := s.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", z.MasterName).StringSlice()
	if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != z.Master.Addr() {
		t.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME = %q, %v, want %s", addr, err, z.Master.Addr())
	}
}
