package conformance_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/conformance/containers"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestConformanceOwnImage runs freqcap's conformance suite against a server
// started from your image. Without Docker, or without the image, the test is
// skipped with a message saying why; FREQCAP_REQUIRE_SERVERS=1 makes that a
// failure. The container is removed when the test ends.
func TestConformanceOwnImage(t *testing.T) {
	srv := containers.Start(t, containers.Spec{
		// Your image, repository:tag. This one is the Debian Redis that
		// freqcap's scripts/build-images.sh makes without a registry.
		Image: "freqcap/redis:7.0-debian",
		// The server's command line. Nil runs redis-server with these
		// settings; images made by docker import have no command of their own.
		Cmd: []string{"redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
			"--save", "", "--appendonly", "no"},
		Args: []string{"--maxmemory-policy", "noeviction"},
		// A module build: mount it and load it.
		// Mounts:  []string{"/path/to/build:/modules:ro"},
		// Modules: []string{"/modules/your_module.so"},
	})

	opts := redis.NewClientOptions(srv.Addr())
	// The suite tests what decisions are, not how fast they come: allow
	// for a busy test machine.
	opts.ReadTimeout, opts.WriteTimeout = 5*time.Second, 5*time.Second
	client := goredis.NewUniversalClient(opts)
	t.Cleanup(func() { client.Close() })
	backend := redis.New(client, nil)

	conformance.Run(t, conformance.Harness{
		NewBackend: func(*testing.T) driver.Backend { return backend },
	})
}
