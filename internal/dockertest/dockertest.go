// Package dockertest starts server containers for tests, on
// github.com/ory/dockertest/v3.
//
// Start runs one server image, waits until it answers PING and returns its
// address; the container is removed when the test ends. Images come from the
// environment (FREQCAP_IMAGE_REDIS, FREQCAP_IMAGE_TAIRHASH, FREQCAP_IMAGE_CELL)
// with public defaults for those who can pull; scripts/build-images.sh builds
// local ones without a registry (docs/DOCKER.md).
//
// Without a Docker engine, or without the image, the test is skipped with a
// message saying why and how to fix it — unless FREQCAP_REQUIRE_SERVERS=1,
// which turns every such skip into a failure (CI sets it).
//
// Containers publish their port on 127.0.0.1 only, or nothing at all when
// they join a Network (they are then reached on their network address, which
// works from the host on Linux).
package dockertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/testserver"
	dt "github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	goredis "github.com/redis/go-redis/v9"
)

// Environment variables read by this package.
const (
	// EnvRequire, set to 1, makes a missing engine or image fail the test
	// instead of skipping it.
	EnvRequire = "FREQCAP_REQUIRE_SERVERS"
	// EnvImageRedis names the plain Redis image (default DefaultRedisImage).
	EnvImageRedis = "FREQCAP_IMAGE_REDIS"
	// EnvImageTairHash names a Redis image that loads the TairHash module.
	EnvImageTairHash = "FREQCAP_IMAGE_TAIRHASH"
	// EnvImageCell names a Redis image used for redis-cell; the module is
	// bind-mounted from EnvCellModuleDir unless the image loads it itself.
	EnvImageCell = "FREQCAP_IMAGE_CELL"
	// EnvCellModuleDir is a host directory holding libredis_cell.so.
	EnvCellModuleDir = "FREQCAP_CELL_MODULE_DIR"
)

// Public defaults, used when the environment names no image.
const (
	DefaultRedisImage    = "redis:7.2"
	DefaultTairHashImage = "tairmodule/tairhash:latest"
	DefaultCellImage     = "redis:7.2"
	// LocalRedisImage is what scripts/build-images.sh builds.
	LocalRedisImage = "freqcap/redis:7.0-debian"
)

// ReadyTimeout bounds how long Start waits for a server to answer PING.
const ReadyTimeout = 30 * time.Second

// Spec describes a server container.
type Spec struct {
	// Name labels the server in container names and messages ("redis").
	Name string
	// ImageEnv names the environment variable that overrides Image.
	ImageEnv string
	// Image is the default image ("repository:tag") when ImageEnv is unset.
	Image string
	// Cmd is the command to run. Nil uses the image's own; images made by
	// docker import have none of their own worth relying on, so the
	// specs in this package always give one.
	Cmd []string
	// Env is the container's extra environment, "KEY=value".
	Env []string
	// Port is the port the server listens on inside the container; 0 means
	// 6379.
	Port int
	// Network, when set, attaches the container to it instead of the default
	// bridge, and publishes no port: the Server's Addr is its address on
	// Network.
	Network *Network
	// Mounts are bind mounts, "host-path:container-path[:ro]".
	Mounts []string
	// Optional marks images CI cannot have (module servers): a missing
	// image skips the test even under FREQCAP_REQUIRE_SERVERS=1, unless
	// ImageEnv names the image explicitly.
	Optional bool
}

// Redis returns the spec of a plain Redis server without persistence; args
// are appended to the redis-server command line.
func Redis(args ...string) Spec {
	cmd := append([]string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
		"--save", "", "--appendonly", "no"}, args...)
	return Spec{Name: "redis", ImageEnv: EnvImageRedis, Image: DefaultRedisImage, Cmd: cmd}
}

// TairHash returns the spec of a Redis server with the TairHash module
// loaded. The default image (tairmodule/tairhash) loads it from its own
// configuration file, so the image's command is used.
func TairHash() Spec {
	return Spec{Name: "tairhash", ImageEnv: EnvImageTairHash, Image: DefaultTairHashImage, Optional: true}
}

// Cell returns the spec of a Redis server with the redis-cell module. When
// FREQCAP_CELL_MODULE_DIR names a host directory, its libredis_cell.so is
// mounted at /modules and loaded; otherwise the image must load the module
// itself (FREQCAP_IMAGE_CELL naming such an image).
func Cell() Spec {
	s := Spec{Name: "cell", ImageEnv: EnvImageCell, Image: DefaultCellImage, Optional: true}
	if dir := os.Getenv(EnvCellModuleDir); dir != "" {
		s.Mounts = []string{dir + ":/modules:ro"}
		s.Cmd = []string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--loadmodule", "/modules/libredis_cell.so"}
	} else if os.Getenv(EnvImageCell) == "" {
		// The default image without a module is just Redis: not a cell server.
		s.Image = ""
	}
	return s
}

// image returns the image s runs: the value of ImageEnv, or Image.
func (s Spec) image() (image string, fromEnv bool) {
	if s.ImageEnv != "" {
		if v := os.Getenv(s.ImageEnv); v != "" {
			return v, true
		}
	}
	return s.Image, false
}

// Required reports whether FREQCAP_REQUIRE_SERVERS (or the older
// REQUIRE_DOCKER) asks for missing servers to fail tests.
func Required() bool {
	return os.Getenv(EnvRequire) == "1" || os.Getenv("REQUIRE_DOCKER") == "1"
}

// unavailable skips t, or fails it when servers are required and the spec
// is not Optional-and-unnamed.
func unavailable(t testing.TB, required bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if required {
		t.Fatalf("dockertest: %s (%s=1 requires it)", msg, EnvRequire)
	}
	if Required() {
		// Required, but this server is opt-in and was not asked for.
		t.Skipf("dockertest: SKIPPED: %s; this server is opt-in: name its image to run it", msg)
	}
	t.Skipf("dockertest: SKIPPED: %s; set %s=1 to make this a failure", msg, EnvRequire)
}

var (
	poolOnce sync.Once
	pool     *dt.Pool
	poolErr  error
)

// Pool returns the shared connection to the Docker engine, skipping (or
// failing, see Required) t when there is none.
func Pool(t testing.TB) *dt.Pool {
	t.Helper()
	poolOnce.Do(func() {
		p, err := dt.NewPool("")
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
		unavailable(t, Required(), "no Docker engine: %v", poolErr)
	}
	return pool
}

// Server is a running server container. Its methods fail the test on error.
// A Server is owned by one test; it is not safe for concurrent use.
type Server struct {
	// Name is the container's name, ID its ID and Image the image it runs.
	Name, ID, Image string
	// IP is the container's address on its network (Network's, or the
	// default bridge's).
	IP string
	// Port is the server's port inside the container.
	Port int

	addr string
	spec Spec
	pool *dt.Pool
}

// Addr is where the test process reaches the server: 127.0.0.1:port, or
// the container's address on its Network.
func (srv *Server) Addr() string { return srv.addr }

// Containers is the testserver.Launcher of containers: Server starts
// Redis(), Cluster a 3-master StartCluster.
var Containers testserver.Launcher = containers{}

type containers struct{}

func (containers) Name() string                          { return "container" }
func (containers) Server(t testing.TB) testserver.Server { return Start(t, Redis()) }
func (containers) Cluster(t testing.TB) []string         { return StartCluster(t, ClusterSpec{}).Addrs() }

// Start starts a container for s, waits until it answers PING and returns
// it. The container is removed when t ends.
func Start(t testing.TB, s Spec) *Server {
	t.Helper()
	p := Pool(t)
	image, fromEnv := s.image()
	required := Required() && (!s.Optional || fromEnv)
	if image == "" {
		hint := ""
		if s.ImageEnv == EnvImageCell {
			hint = " (or " + EnvCellModuleDir + " to load the module into the default image)"
		}
		unavailable(t, required, "%s: no image configured: set %s%s", s.Name, s.ImageEnv, hint)
	}
	if err := ensureImage(p, image); err != nil {
		hint := ""
		if s.ImageEnv == EnvImageRedis {
			hint = fmt.Sprintf("; without a registry build one with scripts/build-images.sh and set %s=%s",
				EnvImageRedis, LocalRedisImage)
		}
		unavailable(t, required, "%s: image %q (%s) is not present and could not be pulled: %v%s",
			s.Name, image, orDefault(s.ImageEnv), err, hint)
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
		retry, lastErr = srv.create(t)
		// A host port picked as free may have been taken meanwhile: a
		// container that cannot start on it is removed, and another port
		// tried.
		if lastErr == nil || !retry {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("dockertest: %s: start %s: %v", s.Name, image, lastErr)
	}
	srv.WaitReady(t, ReadyTimeout)
	return srv
}

func orDefault(env string) string {
	if env == "" {
		return "no override"
	}
	return "from " + env + " or the default"
}

// ensureImage finds image locally, pulling it only when it is missing.
func ensureImage(p *dt.Pool, image string) error {
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

// create creates and starts the container. retry reports a failure to
// start a container publishing a port, which another port may cure.
func (srv *Server) create(t testing.TB) (retry bool, err error) {
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
		// A fixed host port keeps Addr valid across Stop and Start.
		hc.PortBindings = map[dc.Port][]dc.PortBinding{
			cport: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(hostPort)}},
		}
	}
	c, err := srv.pool.Client.CreateContainer(dc.CreateContainerOptions{
		Name: srv.Name,
		Config: &dc.Config{
			Image:        srv.Image,
			Cmd:          s.Cmd,
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
				t.Logf("dockertest: remove %s: %v", srv.Name, err)
			}
		}
	})
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

// WaitReady polls PING until the server answers or d passes.
func (srv *Server) WaitReady(t testing.TB, d time.Duration) {
	t.Helper()
	if err := Ping(srv.addr, d); err != nil {
		t.Fatalf("dockertest: %s (%s) at %s does not answer PING within %v: %v\n%s",
			srv.spec.Name, srv.Image, srv.addr, d, err, srv.Logs())
	}
}

// Ping polls PING at addr until it answers PONG or d passes.
func Ping(addr string, d time.Duration) error {
	c := goredis.NewClient(&goredis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1, Protocol: 2,
	})
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logs returns the container's output (for failure messages).
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
		t.Fatalf("dockertest: pause %s: %v", srv.Name, err)
	}
}

// Unpause resumes a paused container.
func (srv *Server) Unpause(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.UnpauseContainer(srv.ID); err != nil {
		t.Fatalf("dockertest: unpause %s: %v", srv.Name, err)
	}
}

// Stop stops the container gracefully (SIGTERM, then SIGKILL after 5s).
func (srv *Server) Stop(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.StopContainer(srv.ID, 5); err != nil {
		t.Fatalf("dockertest: stop %s: %v", srv.Name, err)
	}
}

// Kill kills the container's processes at once (SIGKILL).
func (srv *Server) Kill(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.KillContainer(dc.KillContainerOptions{ID: srv.ID, Signal: dc.SIGKILL}); err != nil {
		t.Fatalf("dockertest: kill %s: %v", srv.Name, err)
	}
}

// Restart starts a stopped or killed container again and waits until it
// answers PING. Addr stays the same for published ports; on a Network the
// container may get a new address (Addr and IP are updated).
func (srv *Server) Restart(t testing.TB) {
	t.Helper()
	if err := srv.pool.Client.StartContainer(srv.ID, nil); err != nil {
		t.Fatalf("dockertest: start %s again: %v", srv.Name, err)
	}
	if err := srv.refresh(); err != nil {
		t.Fatalf("dockertest: %v", err)
	}
	srv.WaitReady(t, ReadyTimeout)
}

// Exec runs cmd in the container and returns its combined output. A
// non-zero exit status fails t.
func (srv *Server) Exec(t testing.TB, cmd ...string) string {
	t.Helper()
	out, code, err := srv.exec(cmd)
	if err != nil || code != 0 {
		t.Fatalf("dockertest: exec %q in %s: exit %d, %v\n%s", cmd, srv.Name, code, err, out)
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
		t.Fatalf("dockertest: create network: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Client.RemoveNetwork(n.ID); err != nil {
			t.Logf("dockertest: remove network %s: %v", name, err)
		}
	})
	return &Network{Name: name, ID: n.ID}
}
