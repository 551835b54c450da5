package docker_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/dockertest"
	"github.com/freqcap/freqcap/sdk/conformance"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestConformanceStandalone runs the backend conformance suite against a
// Redis container, on the server's own clock.
func TestConformanceStandalone(t *testing.T) {
	srv := dockertest.Start(t, dockertest.Redis())
	c := goredis.NewClient(fcredis.NewClientOptions(srv.Addr).Simple())
	t.Cleanup(func() { c.Close() })
	b := fcredis.New(c, nil)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
		Features:   conformance.AllFeatures,
	})
}

// TestConformanceCluster runs the suite against a 3-master Redis Cluster
// on its own docker network; the nodes announce their network addresses
// and the test reaches them there.
func TestConformanceCluster(t *testing.T) {
	cl := dockertest.StartCluster(t, dockertest.ClusterSpec{Masters: 3})
	c := goredis.NewClusterClient(fcredis.NewClientOptions(cl.Addrs()...).Cluster())
	t.Cleanup(func() { c.Close() })
	b := fcredis.New(c, nil)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(t *testing.T) driver.Backend { return b },
		Features:   conformance.AllFeatures,
	})
}
