// Package redistest starts redis-server processes for tests.
//
// Standalone and Cluster return the address(es) of a server shared by the
// whole test binary (started on first use, stopped by Main), so give each
// test its own keys. NewServer starts a dedicated server that a test may
// restart or stop; NewReplica a replica of such a server; NewSentinel a
// master, its replica and a Sentinel.
//
// Environment:
//   - FREQCAP_TEST_REDIS=host:port: Standalone uses that server instead.
//   - FREQCAP_TEST_REDIS_CLUSTER=host:port,host:port,...: Cluster uses it.
//   - FREQCAP_REQUIRE_SERVERS=1: a missing redis-server fails the test
//     instead of skipping it.
//
// Servers run with --save "" --appendonly no on free 127.0.0.1 ports, from
// the redis-server and redis-cli found in PATH.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/testserver"
)

// Main runs the tests of m and then stops the shared servers. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	stopShared()
	os.Exit(code)
}

var shared struct {
	mu         sync.Mutex
	standalone *Server
	cluster    []*Server
	clusterErr error
	dirs       []string
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.standalone != nil {
		shared.standalone.kill()
	}
	for _, s := range shared.cluster {
		s.kill()
	}
	for _, d := range shared.dirs {
		_ = os.RemoveAll(d)
	}
	shared.standalone, shared.cluster, shared.dirs = nil, nil, nil
}

// requireBinaries skips (or fails, under FREQCAP_REQUIRE_SERVERS=1) when a
// binary is missing from PATH.
func requireBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			msg := fmt.Sprintf("redistest: %s not found in PATH (%v): SKIPPING a test that needs a real Redis; set FREQCAP_REQUIRE_SERVERS=1 to make this fatal", n, err)
			if os.Getenv("FREQCAP_REQUIRE_SERVERS") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// Standalone returns the address of a standalone Redis shared by the test
// binary, or FREQCAP_TEST_REDIS when set.
func Standalone(t testing.TB) string {
	t.Helper()
	if a := os.Getenv("FREQCAP_TEST_REDIS"); a != "" {
		return a
	}
	requireBinaries(t, "redis-server")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.standalone == nil || !shared.standalone.alive() {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		shared.dirs = append(shared.dirs, dir)
		s, err := start(dir, false)
		if err != nil {
			t.Fatalf("redistest: start redis-server: %v", err)
		}
		shared.standalone = s
	}
	return shared.standalone.Addr()
}

// Cluster returns the addresses of a 3-master Redis Cluster (no replicas)
// shared by the test binary, or FREQCAP_TEST_REDIS_CLUSTER when set.
func Cluster(t testing.TB) []string {
	t.Helper()
	if a := os.Getenv("FREQCAP_TEST_REDIS_CLUSTER"); a != "" {
		return strings.Split(a, ",")
	}
	requireBinaries(t, "redis-server", "redis-cli")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.clusterErr != nil {
		t.Fatalf("redistest: cluster: %v", shared.clusterErr)
	}
	if shared.cluster == nil {
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		shared.dirs = append(shared.dirs, dir)
		nodes, err := startCluster(dir, 3)
		if err != nil {
			shared.clusterErr = err
			t.Fatalf("redistest: cluster: %v", err)
		}
		shared.cluster = nodes
	}
	addrs := make([]string, len(shared.cluster))
	for i, s := range shared.cluster {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Server is one redis-server process owned by a test.
type Server struct {
	mu      sync.Mutex
	dir     string
	port    int
	cluster bool
	extra   []string // more redis-server arguments (e.g. --replicaof)
	monitor string   // Sentinel mode: "<name> <host> <port>" of the master it watches
	env     []string // more environment variables (Clock's LD_PRELOAD)
	cmd     *exec.Cmd
	done    chan struct{}
}

// NewServer starts a dedicated standalone server, stopped when t ends. Use
// it for tests that restart or stop the server.
func NewServer(t testing.TB) *Server {
	t.Helper()
	requireBinaries(t, "redis-server")
	s, err := start(t.TempDir(), false)
	if err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	t.Cleanup(s.kill)
	return s
}

// NewReplica starts a dedicated server replicating master (--replicaof),
// stopped when t ends. It answers at once; its sync with master may still
// be under way. REPLICAOF NO ONE promotes it.
func NewReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	requireBinaries(t, "redis-server")
	s, err := startLike(serverConfig{dir: t.TempDir(), extra: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}})
	if err != nil {
		t.Fatalf("redistest: start a replica: %v", err)
	}
	t.Cleanup(s.kill)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Restart kills the server and starts a fresh one on the same port: data
// and the script cache are gone, as after a crash without persistence.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: restart on port %d: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond) // the port may linger briefly
	}
}

// Stop kills the server (idempotent).
func (s *Server) Stop(t testing.TB) { s.kill() }

// Processes is the testserver.Launcher of redis-server processes: Server
// is NewServer, Cluster the shared Cluster.
var Processes testserver.Launcher = processes{}

type processes struct{}

func (processes) Name() string                          { return "process" }
func (processes) Server(t testing.TB) testserver.Server { return NewServer(t) }
func (processes) Cluster(t testing.TB) []string         { return Cluster(t) }

func (s *Server) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// start picks a free port and launches redis-server there, retrying with
// another port when the launch fails (a port race).
func start(dir string, cluster bool) (*Server, error) {
	return startLike(serverConfig{dir: dir, cluster: cluster})
}

// serverConfig is what startLike needs to know of a server to start.
type serverConfig struct {
	dir     string
	cluster bool
	extra   []string
	monitor string
	env     []string
}

// startLike starts a server configured as proto on a free port.
func startLike(proto serverConfig) (*Server, error) {
	var last error
	for range 5 {
		port, err := freePort(proto.cluster)
		if err != nil {
			return nil, err
		}
		s := &Server{dir: proto.dir, port: port, cluster: proto.cluster, extra: proto.extra, monitor: proto.monitor, env: proto.env}
		if last = s.launch(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", "",
	}
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", s.port),
			"--cluster-node-timeout", "5000")
	}
	args = append(args, s.extra...)
	if s.monitor != "" {
		// Sentinel mode reads (and rewrites) a config file of its own.
		name := strings.Fields(s.monitor)[0]
		conf := filepath.Join(s.dir, fmt.Sprintf("sentinel-%d.conf", s.port))
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 1\n"+
			"sentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s 10000\n",
			s.port, s.dir, s.monitor, name, name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		args = []string{conf, "--sentinel", "--loglevel", "warning", "--logfile", ""}
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// A backstop: the server dies with the test binary even if Main or a
	// cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port)))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			s.mu.Lock()
			s.cmd, s.done = nil, nil
			s.mu.Unlock()
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, lastLines(string(b), 5))
		default:
		}
		if r, err := command(s.Addr(), "PING"); err == nil && r == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Sentinel is a master, one replica and a Sentinel watching them, owned by
// a test: connect through the Sentinel (MasterName = Name, the address of
// Sentinel) as a failover client would.
type Sentinel struct {
	Name            string // the monitored master's name
	Master, Replica *Server
	Sentinel        *Server
}

// NewSentinel starts a master, a replica in sync with it and a Sentinel
// that knows both, all stopped when t ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	requireBinaries(t, "redis-server")
	dir := t.TempDir()
	fatal := func(what string, err error) {
		t.Helper()
		t.Fatalf("redistest: sentinel setup: %s: %v", what, err)
	}
	m, err := start(dir, false)
	if err != nil {
		fatal("master", err)
	}
	t.Cleanup(m.kill)
	r, err := startLike(serverConfig{dir: dir, extra: []string{"--replicaof", "127.0.0.1", strconv.Itoa(m.port)}})
	if err != nil {
		fatal("replica", err)
	}
	t.Cleanup(r.kill)
	z := &Sentinel{Name: "freqcap", Master: m, Replica: r}
	z.Sentinel, err = startLike(serverConfig{dir: dir, monitor: fmt.Sprintf("%s 127.0.0.1 %d", z.Name, m.port)})
	if err != nil {
		fatal("sentinel", err)
	}
	t.Cleanup(z.Sentinel.kill)
	// Ready when the replica is in sync and the Sentinel has found it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := command(r.Addr(), "INFO", "replication")
		reps, _ := command(z.Sentinel.Addr(), "SENTINEL", "REPLICAS", z.Name)
		if strings.Contains(info, "master_link_status:up") && reps == "*1" { // an array of one replica
			return z
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel setup: not ready within 30s: replica %q, sentinel replicas %q", info, reps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addr returns the Sentinel's address.
func (z *Sentinel) Addr() string { return z.Sentinel.Addr() }

// Failover makes the Sentinel promote the replica (SENTINEL FAILOVER) and
// waits until the Sentinel names it as the master, it serves as one and
// the old master has become its replica (so that no write can land on the
// old master and be lost). Call it with the replica in sync (WaitSynced)
// to lose nothing.
func (z *Sentinel) Failover(t testing.TB) {
	t.Helper()
	if _, err := command(z.Addr(), "SENTINEL", "FAILOVER", z.Name); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	want := strconv.Itoa(z.Replica.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		port, _ := commandArray(z.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", z.Name)
		role, _ := commandArray(z.Replica.Addr(), "ROLE")
		old, _ := commandArray(z.Master.Addr(), "ROLE")
		if len(port) == 2 && port[1] == want && len(role) > 0 && role[0] == "master" && len(old) > 0 && old[0] == "slave" {
			z.Master, z.Replica = z.Replica, z.Master
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: failover to %s not done within 30s (sentinel says %q, its role %q, the old master's %q)", z.Replica.Addr(), port, role, old)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitSynced waits until the replica has every write the master has.
func (z *Sentinel) WaitSynced(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mi, err1 := command(z.Master.Addr(), "INFO", "replication")
		ri, err2 := command(z.Replica.Addr(), "INFO", "replication")
		mo, ro := infoField(mi, "master_repl_offset"), infoField(ri, "slave_repl_offset")
		if err1 == nil && err2 == nil && mo != "" && mo == ro {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica not in sync within 30s: master offset %q, replica offset %q (%v, %v)", mo, ro, err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return ""
}

func startCluster(dir string, masters int) ([]*Server, error) {
	return startClusterLike(serverConfig{dir: dir, cluster: true}, masters)
}

// startClusterLike starts a cluster of masters configured as proto.
func startClusterLike(proto serverConfig, masters int) ([]*Server, error) {
	nodes := make([]*Server, 0, masters)
	fail := func(err error) ([]*Server, error) {
		for _, n := range nodes {
			n.kill()
		}
		return nil, err
	}
	for range masters {
		s, err := startLike(proto)
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("redis-cli --cluster create: %v: %s", err, lastLines(string(out), 5)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			info, err := command(n.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("node %s: cluster_state not ok within 30s: %q %v", n.Addr(), info, err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes, nil
}

// freePort returns a port free on 127.0.0.1 (and, for cluster nodes, with
// its bus port +10000 free too).
func freePort(cluster bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bl.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port found")
}

// commandArray sends one command and returns an array reply of strings
// (or a one-element slice for a simple or bulk string reply).
func commandArray(addr string, args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(encodeCommand(args)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		v, err := parseScalar(r, line)
		return []string{v}, err
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return nil, fmt.Errorf("bad array reply %q", line)
	}
	out := make([]string, 0, max(n, 0))
	for range n {
		l, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		v, err := parseScalar(r, strings.TrimRight(l, "\r\n"))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func encodeCommand(args []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// parseScalar reads the rest of a simple, error, integer or bulk string
// reply whose first line is line.
func parseScalar(r *bufio.Reader, line string) (string, error) {
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line, nil
}

// command sends one command in RESP and returns a simple, integer or bulk
// string reply; of an array reply, only its header line ("*<n>").
func command(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(encodeCommand(args)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return parseScalar(r, strings.TrimRight(line, "\r\n"))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// WaitReady polls PING on addr until it answers or ctx ends.
func WaitReady(ctx context.Context, addr string) error {
	for {
		if r, err := command(addr, "PING"); err == nil && r == "PONG" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
