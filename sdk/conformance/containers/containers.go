// Package containers starts Redis servers in Docker containers for tests,
// so that the conformance suite (package conformance) runs against a real
// server: a standalone Redis ([Start]), a Redis Cluster ([StartCluster]), a
// master with a replica and a Sentinel ([StartSentinel]), each from the
// default Redis image or from an image you give — a Tair or Redis module
// build, or a server of your own. It is built on
// github.com/ory/dockertest/v3.
//
// Each function returns the addresses the test process reaches the
// servers on; build a client and a backend on them and hand the backend to
// conformance.Run. docs/DOCKER.md ("Run the conformance suite against your
// own server image") has a whole test to copy.
//
// # Images
//
// [Spec].Image names the image, "repository:tag". Empty means the Redis
// image: $FREQCAP_IMAGE_REDIS when set; else freqcap/redis:7.0-debian
// ([LocalRedisImage]) when the engine has it (freqcap's
// scripts/build-images.sh builds it from the host's Debian redis-server,
// without a registry); else redis:7.2 ([PublicRedisImage]). An image the
// engine lacks is pulled.
//
// # Skips
//
// Without a Docker engine, or when the image is neither present nor
// pullable, the test is skipped with a message saying what is missing —
// unless FREQCAP_REQUIRE_SERVERS=1 ([Required]), which turns every such
// skip into a failure (freqcap's CI sets it).
//
// # Cleanup
//
// Every container and network is removed by t.Cleanup when the test that
// started it ends, after its subtests (parallel ones too), so one server
// may serve a whole conformance.Run. Containers and networks carry the label
// org.freqcap.test=1; after a killed test run,
// `docker rm -f $(docker ps -aq --filter label=org.freqcap.test=1)` removes
// what is left.
//
// # Concurrency
//
// Start, StartCluster, StartSentinel and NewNetwork may be called from
// parallel tests; each call starts containers of its own. A [Server],
// [Cluster] or [Sentinel] belongs to the test that started it: its methods
// take that test's t and fail it on error, so call them from the test's
// goroutine. Addr may be read from any goroutine, except while Restart
// runs.
//
// # Networking
//
// Start publishes the server's port on 127.0.0.1 only, on a host port
// chosen free and kept across Stop and Restart. Cluster and Sentinel nodes
// sit on a network of their own with no published port, so that the
// addresses they announce are the ones the test dials: the test process
// reaches them on their network addresses, which works on Linux (the host
// routes to docker bridge networks) and not on Docker Desktop.
package containers

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	goredis "github.com/redis/go-redis/v9"
)

// Environment variables read by this package.
const (
	// EnvRequire, set to 1, makes a missing engine or image fail the test
	// instead of skipping it.
	EnvRequire = "FREQCAP_REQUIRE_SERVERS"
	// EnvImageRedis names the Redis image a Spec without Image runs.
	EnvImageRedis = "FREQCAP_IMAGE_REDIS"
)

// The Redis images a Spec without Image runs, when EnvImageRedis is unset.
const (
	// LocalRedisImage is what freqcap's scripts/build-images.sh builds
	// without a registry; used when the engine has it.
	LocalRedisImage = "freqcap/redis:7.0-debian"
	// PublicRedisImage is used (and pulled if missing) otherwise.
	PublicRedisImage = "redis:7.2"
)

// ReadyTimeout is how long Start polls a server's PING when Spec.Ready is 0.
const ReadyTimeout = 30 * time.Second

// Spec describes a server container. The zero Spec is a Redis server from
// the default image, without persistence, on port 6379.
type Spec struct {
	// Image is the image, "repository:tag"; empty means the Redis image
	// (see the package documentation).
	Image string
	// Cmd is the command the container runs. Nil means redis-server
	// --bind 0.0.0.0 --protected-mode no --save "" --appendonly no. The
	// command is always given to the container, so images made by docker
	// import, which have none of their own, run too.
	Cmd []string
	// ImageCmd runs the image's own command (its CMD) instead of Cmd: for
	// an image whose configuration loads its modules.
	ImageCmd bool
	// Args are appended to the command: server options, such as
	// "--maxmemory", "64mb".
	Args []string
	// Modules are module paths inside the container: each appends
	// "--loadmodule", path to the command. Mount a build from the host
	// with Mounts.
	Modules []string
	// Env is the container's extra environment, "KEY=value".
	Env []string
	// Mounts are bind mounts, "host-path:container-path[:ro]".
	Mounts []string
	// Port is the port the server listens on inside the container; 0
	// means 6379. A server on another port needs it in its command too.
	Port int
	// Network, when set, attaches the container to it and publishes no
	// port: the Server's Addr is its address on Network.
	Network *Network
	// Ready bounds how long Start polls PING until the server answers
	// (and Restart after it); 0 means ReadyTimeout.
	Ready time.Duration
	// Name labels the server in container names and messages; "" means
	// "redis".
	Name string

	// files are written into the container before it starts, by path
	// (StartSentinel's configuration file, which Sentinel rewrites).
	files map[string]string
}

// redisCmd is the command of a Spec without Cmd.
var redisCmd = []string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
	"--save", "", "--appendonly", "no"}

// command returns the command s runs, given the image's own (its CMD).
func (s Spec) command(imageCmd []string) []string {
	base := redisCmd
	switch {
	case s.ImageCmd:
		base = imageCmd
	case s.Cmd != nil:
		base = s.Cmd
	}
	cmd := append(append([]string{}, base...), s.Args...)
	for _, m := range s.Modules {
		cmd = append(cmd, "--loadmodule", m)
	}
	return cmd
}

// Required reports whether FREQCAP_REQUIRE_SERVERS=1 (or the older
// REQUIRE_DOCKER=1) asks for a missing engine or image to fail tests.
func Required() bool {
	return os.Getenv(EnvRequire) == "1" || os.Getenv("REQUIRE_DOCKER") == "1"
}

// unavailable skips t, or fails it when Required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("containers: %s (%s=1 requires it)", msg, EnvRequire)
	}
	t.Skipf("containers: SKIPPED: %s; set %s=1 to make this a failure", msg, EnvRequire)
}

var (
	poolOnce sync.Once
	pool     *dockertest.Pool
	poolErr  error
)

// Pool returns the connection to the Docker engine this package shares,
// for what the package itself does not do. Without an engine it skips t
// (or fails it, see Required).
func Pool(t testing.TB) *dockertest.Pool {
	t.Helper()
	poolOnce.Do(func() {
		p, err := dockertest.NewPool("")
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = p.Client.PingWithContext(ctx)
			cancel()
		}
		if err != nil {
			poolErr = err
			return
		}
		p.MaxWait = ReadyTimeout
		pool = p
	})
	if poolErr != nil {
		unavailable(t, "no Docker engine: %v", poolErr)
	}
	return pool
}

// Server is a running server container. Its methods (but Addr and Logs)
// fail the test that started it on error: call them from that test's
// goroutine.
type Server struct {
	// Name is the container's name, ID its ID and Image the image it runs.
	Name, ID, Image string
	// IP is the container's address on its network (Spec.Network's, or the
	// default bridge's).
	IP string
	// Port is the server's port inside the container.
	Port int

	addr string
	spec Spec
	pool *dockertest.Pool
}

// Addr is where the test process reaches the server, host:port:
// 127.0.0.1 and the published port, or the container's address on its
// Network.
func (srv *Server) Addr() string { return srv.addr }

// Start starts a container for s, polls PING until the server answers and
// returns it. The container is removed when t ends.
func Start(t testing.TB, s Spec) *Server {
	t.Helper()
	p := Pool(t)
	if s.Name == "" {
		s.Name = "redis"
	}
	image := s.Image
	if image == "" {
		image = redisImage(p)
	}
	if err := ensureImage(p, image); err != nil {
		hint := ""
		if s.Image == "" {
			hint = fmt.Sprintf("; without a registry build %s with freqcap's scripts/build-images.sh, or set %s",
				LocalRedisImage, EnvImageRedis)
		}
		unavailable(t, "%s: image %q is not present and could not be pulled: %v%s", s.Name, image, err, hint)
	}
	var imageCmd []string
	if s.ImageCmd {
		img, err := p.Client.InspectImage(image)
		if err != nil {
			t.Fatalf("containers: %s: inspect %s: %v", s.Name, image, err)
		}
		if img.Config != nil {
			imageCmd = img.Config.Cmd
		}
		if len(imageCmd) == 0 && (img.Config == nil || len(img.Config.Entrypoint) == 0) {
			t.Fatalf("containers: %s: Spec.ImageCmd, but image %s has no command of its own (images made by docker import have none): set Spec.Cmd", s.Name, image)
		}
	}
	port := s.Port
	if port == 0 {
		port = 6379
	}
	srv := &Server{Image: image, Port: port, spec: s, pool: p}
	srv.Name = "freqcap-test-" + s.Name + "-" + randomID()

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		var retry bool
		retry, lastErr = srv.create(t, s.command(imageCmd))
		// A host port picked as free may have been taken meanwhile: a
		// container that cannot start on it is removed, and another port
		// tried.
		if lastErr == nil || !retry {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("containers: %s: start %s: %v", s.Name, image, lastErr)
	}
	srv.waitReady(t)
	return srv
}

// redisImage returns the image of a Spec without Image.
func redisImage(p *dockertest.Pool) string {
	if v := os.Getenv(EnvImageRedis); v != "" {
		return v
	}
	if _, err := p.Client.InspectImage(LocalRedisImage); err == nil {
		return LocalRedisImage
	}
	return PublicRedisImage
}

// ensureImage finds image locally, pulling it only when it is missing.
func ensureImage(p *dockertest.Pool, image string) error {
	if _, err := p.Client.InspectImage(image); err == nil {
		return nil
	}
	repo, tag := splitImage(image)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return p.Client.PullImage(dc.PullImageOptions{
		Repository: repo, Tag: tag, Context: ctx, InactivityTimeout: time.Minute,
	}, dc.AuthConfiguration{})
}

// splitImage splits "host:5000/repo:tag" into "host:5000/repo" and "tag".
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// create creates and starts the container running cmd. retry reports a
// failure to start a container publishing a port, which another port may
// cure.
func (srv *Server) create(t testing.TB, cmd []string) (retry bool, err error) {
	t.Helper()
	s := srv.spec
	cport := dc.Port(strconv.Itoa(srv.Port) + "/tcp")
	hc := &dc.HostConfig{
		// Never publish on all interfaces: dockertest's RunWithOptions
		// would (PublishAllPorts), which is why containers are created here.
		PublishAllPorts: false,
		Binds:           s.Mounts,
	}
	nc := &dc.NetworkingConfig{EndpointsConfig: map[string]*dc.EndpointConfig{}}
	hostPort := 0
	if s.Network != nil {
		hc.NetworkMode = s.Network.Name
		nc.EndpointsConfig[s.Network.Name] = &dc.EndpointConfig{}
	} else {
		if hostPort, err = freePort(); err != nil {
			return false, err
		}
		// A fixed host port keeps Addr valid across Stop and Restart.
		hc.PortBindings = map[dc.Port][]dc.PortBinding{
			cport: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(hostPort)}},
		}
	}
	c, err := srv.pool.Client.CreateContainer(dc.CreateContainerOptions{
		Name: srv.Name,
		Config: &dc.Config{
			Image:        srv.Image,
			Cmd:          cmd,
			Env:          s.Env,
			ExposedPorts: map[dc.Port]struct{}{cport: {}},
			Labels:       map[string]string{"org.freqcap.test": "1", "org.freqcap.test.name": t.Name()},
		},
		HostConfig:       hc,
		NetworkingConfig: nc,
	})
	if err != nil {
		return false, err
	}
	srv.ID = c.ID
	id := c.ID
	t.Cleanup(func() {
		// Unpause first: a paused container cannot be removed on every engine.
		_ = srv.pool.Client.UnpauseContainer(id)
		if err := srv.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: id, Force: true, RemoveVolumes: true}); err != nil {
			var nsc *dc.NoSuchContainer
			if !errors.As(err, &nsc) {
				t.Logf("containers: remove %s: %v", srv.Name, err)
			}
		}
	})
	if len(s.files) > 0 {
		if err := srv.upload(s.files); err != nil {
			return false, err
		}
	}
	if err := srv.pool.Client.StartContainer(srv.ID, nil); err != nil {
		_ = srv.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: srv.ID, Force: true})
		return s.Network == nil, err
	}
	if err := srv.refresh(); err != nil {
		return false, err
	}
	if s.Network == nil {
		srv.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort))
	}
	return false, nil
}

// upload writes files (absolute path → content) into the created
// container. Files and the directories made for them are writable by
// anyone, so that a server running as any user may rewrite them (Sentinel
// rewrites its configuration: a new file renamed over the old one).
func (srv *Server) upload(files map[string]string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		rel := strings.TrimPrefix(p, "/")
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o777}); err != nil {
				return err
			}
		}
		body := files[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o666, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.pool.Client.UploadToContainer(srv.ID, dc.UploadToContainerOptions{
		InputStream: &buf, Path: "/", Context: ctx,
	}); err != nil {
		return fmt.Errorf("write %v into the container: %w", paths, err)
	}
	return nil
}

// refresh reads the container's current address.
func (srv *Server) refresh() error {
	c, err := srv.pool.Client.InspectContainer(srv.ID)
	if err != nil {
		return err
	}
	if srv.spec.Network != nil {
		n, ok := c.NetworkSettings.Networks[srv.spec.Network.Name]
		if !ok || n.IPAddress == "" {
			return fmt.Errorf("container %s has no address on network %s", srv.Name, srv.spec.Network.Name)
		}
		srv.IP = n.IPAddress
		srv.addr = net.JoinHostPort(srv.IP, strconv.Itoa(srv.Port))
		return nil
	}
	srv.IP = c.NetworkSettings.IPAddress
	return nil
}

// waitReady polls PING until the server answers or Spec.Ready passes.
func (srv *Server) waitReady(t testing.TB) {
	t.Helper()
	d := srv.spec.Ready
	if d == 0 {
		d = ReadyTimeout
	}
	if err := ping(srv.addr, d); err != nil {
		t.Fatalf("containers: %s (%s) at %s does not answer PING within %v: %v\n%s",
			srv.spec.Name, srv.Image, srv.addr, d, err, srv.Logs())
	}
}

// client returns a one-connection client for addr; the caller closes it.
func client(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1, Protocol: 2,
	})
}

// ping polls PING at addr until it answers PONG or d passes.
func ping(addr string, d time.Duration) error {
	c := client(addr)
	defer c.Close()
	return poll(d, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
}

// poll calls f until it returns nil or d passes, and returns f's last
// error then.
func poll(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling a server, not letting time pass
	}
}

// Logs returns the last 40 lines of the container's output, for failure
// messages.
func (srv *Server) Logs() string {
	var buf bytes.Buffer
	err := srv.pool.Client.Logs(dc.LogsOptions{
		Container: srv.ID, OutputStream: &buf, ErrorStream: &buf,
		Stdout: true, Stderr: true, Tail: "40",
	})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	return buf.String()
}

// Pause freezes every process of the container: connections stay open and
// requests go unanswered.
func (srv *Server) Pause(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.PauseContainer(srv.ID); err != nil {
		t.Fatalf("containers: pause %s: %v", srv.Name, err)
	}
}

// Unpause resumes a paused container.
func (srv *Server) Unpause(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.UnpauseContainer(srv.ID); err != nil {
		t.Fatalf("containers: unpause %s: %v", srv.Name, err)
	}
}

// Stop stops the container gracefully (SIGTERM, then SIGKILL after 5s).
func (srv *Server) Stop(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.StopContainer(srv.ID, 5); err != nil {
		t.Fatalf("containers: stop %s: %v", srv.Name, err)
	}
}

// Kill kills the container's processes at once (SIGKILL).
func (srv *Server) Kill(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.KillContainer(dc.KillContainerOptions{ID: srv.ID, Signal: dc.SIGKILL}); err != nil {
		t.Fatalf("containers: kill %s: %v", srv.Name, err)
	}
}

// Restart starts a stopped or killed container again and polls PING until
// it answers. Addr stays the same for a published port; on a Network the
// container may get a new address (Addr and IP are updated). Without
// persistence the server starts empty.
func (srv *Server) Restart(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.StartContainer(srv.ID, nil); err != nil {
		t.Fatalf("containers: start %s again: %v", srv.Name, err)
	}
	if err := srv.refresh(); err != nil {
		t.Fatalf("containers: %v", err)
	}
	srv.waitReady(t)
}

// Exec runs cmd in the container and returns its combined output. A
// non-zero exit status fails t.
func (srv *Server) Exec(t testing.TB, cmd ...string) string {
	t.Helper()
	out, code, err := srv.exec(cmd)
	if err != nil || code != 0 {
		t.Fatalf("containers: exec %q in %s: exit %d, %v\n%s", cmd, srv.Name, code, err, out)
	}
	return out
}

func (srv *Server) exec(cmd []string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := srv.pool.Client.CreateExec(dc.CreateExecOptions{
		Container: srv.ID, Cmd: cmd, AttachStdout: true, AttachStderr: true, Context: ctx,
	})
	if err != nil {
		return "", -1, err
	}
	var buf bytes.Buffer
	if err := srv.pool.Client.StartExec(e.ID, dc.StartExecOptions{
		OutputStream: &buf, ErrorStream: &buf, Context: ctx,
	}); err != nil {
		return buf.String(), -1, err
	}
	in, err := srv.pool.Client.InspectExec(e.ID)
	if err != nil {
		return buf.String(), -1, err
	}
	return buf.String(), in.ExitCode, nil
}

// Network is a user-defined bridge network for a group of containers.
type Network struct {
	Name, ID string
}

// NewNetwork creates a bridge network, removed when t ends (after the
// containers started later in t, since cleanups run last-in first-out).
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	p := Pool(t)
	name := "freqcap-test-" + randomID()
	n, err := p.Client.CreateNetwork(dc.CreateNetworkOptions{
		Name: name, Driver: "bridge", CheckDuplicate: true,
		Labels: map[string]string{"org.freqcap.test": "1"},
	})
	if err != nil {
		t.Fatalf("containers: create network: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Client.RemoveNetwork(n.ID); err != nil {
			t.Logf("containers: remove network %s: %v", name, err)
		}
	})
	return &Network{Name: name, ID: n.ID}
}
