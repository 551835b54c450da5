package docker_test

import (
	"testing"
	"time"

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
		c := goredis.NewClient(patient(fcredis.NewClientOptions(l.Server(t).Addr())).Simple())
		t.Cleanup(func() { c.Close() })
		runConformance(t, fcredis.New(c, nil))
	})
	t.Run("cluster", func(t *testing.T) {
		c := goredis.NewClusterClient(patient(fcredis.NewClientOptions(l.Cluster(t)...)).Cluster())
		t.Cleanup(func() { c.Close() })
		runConformance(t, fcredis.New(c, nil))
	})
}

// patient raises o's read and write timeouts from NewClientOptions' 500 ms
// to 5 s: the suite tests what a decision does, not how fast, and under
// `go test -race` beside other packages on 2 cores one of its 64
// goroutines can wait past 500 ms between go-redis setting a write
// deadline and writing (a CI run failed so). faults_test.go sets its own.
func patient(o *goredis.UniversalOptions) *goredis.UniversalOptions {
	o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
	return o
}

func runConformance(t *testing.T, b *fcredis.Backend) {
	conformance.Run(t, conformance.Harness{Backend: b})
}
