package docker_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/dockertest"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/conformance"
)

// launchers are the kinds of server the tests of this package run on: a
// redis-server process and a container.
var launchers = []testserver.Launcher{redistest.Processes, dockertest.Containers}

// TestConformanceContainers runs the backend conformance suite, on the
// server's own clock, against a Redis container and a 3-master Redis
// Cluster on its own docker network (the nodes announce their network
// addresses and the test reaches them there). The process-based servers
// run the same suite in backends/redis.
func TestConformanceContainers(t *testing.T) {
	l := dockertest.Containers
	t.Run("standalone", func(t *testing.T) {
		c := goredis.NewClient(testserver.Patient(fcredis.NewClientOptions(l.Server(t).Addr())).Simple())
		t.Cleanup(func() { c.Close() })
		runConformance(t, fcredis.New(c, nil))
	})
	t.Run("cluster", func(t *testing.T) {
		c := goredis.NewClusterClient(testserver.Patient(fcredis.NewClientOptions(l.Cluster(t)...)).Cluster())
		t.Cleanup(func() { c.Close() })
		runConformance(t, fcredis.New(c, nil))
	})
}

func runConformance(t *testing.T, b *fcredis.Backend) {
	conformance.Run(t, conformance.Harness{Backend: b})
}
