// Package testserver is what a test asks of a Redis it starts, however the
// server runs: a redis-server process (internal/redistest) or a container
// (the public kit, sdk/conformance/containers, whose *Server is a Server).
// A test written against a Launcher names the server it needs once and
// runs on either.
package testserver

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is one standalone Redis server a test started and controls.
type Server interface {
	// Addr is the host:port the test process reaches the server on.
	Addr() string
	// Stop kills the server; it keeps its address for Restart.
	Stop(t testing.TB)
	// Restart starts the server again on the same address, with no data
	// (servers run without persistence) and an empty script cache.
	Restart(t testing.TB)
}

// Launcher starts servers of one kind. A missing server binary or Docker
// skips the test loudly, or fails it under FREQCAP_REQUIRE_SERVERS=1.
type Launcher interface {
	// Name names the kind in subtest names: "process" or "container".
	Name() string
	// Server starts a dedicated standalone server, removed when t ends.
	Server(t testing.TB) Server
	// Cluster returns the seed addresses of a Redis Cluster of 3 masters
	// (possibly shared by the tests of one binary: use unique keys).
	Cluster(t testing.TB) []string
}

// Patient raises o's read and write timeouts to 5 s (from the 500 ms of
// backends/redis.NewClientOptions), for suites that test what a decision
// does, not how fast: under `go test -race` other packages run beside
// them on the same cores (docker, a browser), and a goroutine of the
// conformance suite's 64 can then wait past 500 ms between go-redis
// setting a deadline and writing. Tests of timeouts set their own.
func Patient(o *goredis.UniversalOptions) *goredis.UniversalOptions {
	o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second
	return o
}
