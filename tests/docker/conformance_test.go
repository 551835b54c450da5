package docker_test

import (
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/conformance/containers"
	"github.com/freqcap/freqcap/sdk/driver"
)

// launchers are the kinds of server the tests of this package run on: a
// redis-server process and a container.
var launchers = []testserver.Launcher{redistest.Processes, containerLauncher{}}

// containerLauncher is the testserver.Launcher of containers: Server
// starts the default Redis image, Cluster a 3-master cluster.
type containerLauncher struct{}

func (containerLauncher) Name() string { return "container" }
func (containerLauncher) Server(t testing.TB) testserver.Server {
	return containers.Start(t, containers.Spec{})
}
func (containerLauncher) Cluster(t testing.TB) []string {
	return containers.StartCluster(t, containers.ClusterSpec{}).Addrs()
}

// TestConformanceContainers runs the backend conformance suite, on the
// server's own clock, through the public container kit: against a Redis
// container, a 3-master Redis Cluster and a master + replica + Sentinel,
// the last two on their own docker network (the servers announce their
// network addresses and the test reaches them there). The process-based
// servers run the same suite in backends/redis.
func TestConformanceContainers(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := containers.Start(t, containers.Spec{})
		runConformance(t, newClient(t, fcredis.NewClientOptions(srv.Addr())), nil)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := containers.StartCluster(t, containers.ClusterSpec{})
		runConformance(t, newClient(t, fcredis.NewClientOptions(cl.Addrs()...)), nil)
	})
	t.Run("sentinel", func(t *testing.T) {
		z := containers.StartSentinel(t, containers.SentinelSpec{})
		o := fcredis.NewClientOptions(z.Addr())
		o.MasterName = z.MasterName
		runConformance(t, newClient(t, o), nil)
	})
}

// TestConformanceModules runs the suite against module servers from
// images the user names, as the kit's users do with their own builds:
// FREQCAP_IMAGE_TAIRHASH, an image whose own command loads TairHash;
// FREQCAP_IMAGE_CELL, an image that loads redis-cell, or
// FREQCAP_CELL_MODULE_DIR, a host directory whose libredis_cell.so is
// mounted into the Redis image (or FREQCAP_IMAGE_CELL) and loaded. Each is
// opt-in: it skips loudly when its variables are unset, even under
// FREQCAP_REQUIRE_SERVERS=1, since no registry CI reaches has the modules.
func TestConformanceModules(t *testing.T) {
	t.Run("tairhash", func(t *testing.T) {
		image := os.Getenv("FREQCAP_IMAGE_TAIRHASH")
		if image == "" {
			t.Skip("SKIPPED: FREQCAP_IMAGE_TAIRHASH is not set (an image whose command loads TairHash, docs/DOCKER.md); module servers are opt-in")
		}
		srv := containers.Start(t, containers.Spec{Image: image, ImageCmd: true, Name: "tairhash"})
		c := newClient(t, fcredis.NewClientOptions(srv.Addr()))
		wantStrategy(t, fcredis.New(c, modStrategies), driver.SlidingWindow, capability.TairHashLua)
		runModuleConformance(t, c)
	})
	t.Run("cell", func(t *testing.T) {
		image, dir := os.Getenv("FREQCAP_IMAGE_CELL"), os.Getenv("FREQCAP_CELL_MODULE_DIR")
		spec := containers.Spec{Image: image, ImageCmd: true, Name: "cell"}
		switch {
		case dir != "":
			spec.ImageCmd = false
			spec.Mounts = []string{dir + ":/modules:ro"}
			spec.Modules = []string{"/modules/libredis_cell.so"}
		case image == "":
			t.Skip("SKIPPED: neither FREQCAP_IMAGE_CELL nor FREQCAP_CELL_MODULE_DIR is set (docs/DOCKER.md); module servers are opt-in")
		}
		srv := containers.Start(t, spec)
		c := newClient(t, fcredis.NewClientOptions(srv.Addr()))
		wantStrategy(t, fcredis.New(c, modStrategies), driver.GCRA, capability.CellLua)
		runModuleConformance(t, c)
	})
}

// newClient returns a client of o with the tests' patient timeouts
// (testserver.Patient), closed when t ends.
func newClient(t *testing.T, o *goredis.UniversalOptions) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewUniversalClient(testserver.Patient(o))
	t.Cleanup(func() { c.Close() })
	return c
}

// runConformance runs the suite on the server's own clock, on one backend
// on c shared by the subtests: a fresh one would detect the server's
// capabilities in each subtest's first decision, late for its real-clock
// windows.
func runConformance(t *testing.T, c goredis.UniversalClient, opts *fcredis.Options) {
	t.Helper()
	b := fcredis.New(c, opts)
	conformance.Run(t, conformance.Harness{NewBackend: func(*testing.T) driver.Backend { return b }})
}

// modStrategies has the backend use the module strategies where the
// server has their module (by default every algorithm runs on plain Lua:
// docs/MODULES.md, "Why plain Lua").
var modStrategies = &fcredis.Options{Detect: capability.Config{ModuleStrategies: true}}

// runModuleConformance runs the suite on a module server as detected by
// default (plain Lua) and with its module strategy.
func runModuleConformance(t *testing.T, c goredis.UniversalClient) {
	t.Helper()
	t.Run("default", func(t *testing.T) { runConformance(t, c, nil) })
	t.Run("module strategy", func(t *testing.T) { runConformance(t, c, modStrategies) })
}

// wantStrategy fails unless b chose want for a: the module was loaded and
// found.
func wantStrategy(t *testing.T, b *fcredis.Backend, a driver.Algorithm, want capability.Strategy) {
	t.Helper()
	rep, err := b.Capabilities(context.Background())
	if err != nil {
		t.Fatalf("Capabilities() error: %v", err)
	}
	if got := rep.Choice(a); got.Strategy != want {
		t.Fatalf("Choice(%v) = %v (%s), want %v\n%s", a, got.Strategy, got.Reason, want, rep)
	}
}
