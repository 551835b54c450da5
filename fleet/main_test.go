package fleet_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// storage is one backend the fleet tests run on: memory (with a fake
// clock), a standalone Redis or a 3-master Redis Cluster.
type storage struct {
	name string
	new  func(t *testing.T, c *fakeclock.Clock) driver.Backend
}

// now is the clock of a Recorder or Reader of decisions made on the
// storage: c on memory, the default (the real clock) on Redis, whose
// decisions bear the server's time.
func (sg storage) now(c *fakeclock.Clock) func() time.Time {
	if sg.name == "memory" {
		return c.Now
	}
	return nil
}

// storages are every backend a fleet test runs on. The memory backend
// follows the fake clock; Redis expires keys by its own clock, so tests
// that read Redis keep their instants near the real time.
var storages = []storage{
	{"memory", func(t *testing.T, c *fakeclock.Clock) driver.Backend { return memory.New(&memory.Options{Clock: c}) }},
	{"redis", func(t *testing.T, _ *fakeclock.Clock) driver.Backend {
		o := testserver.Patient(redis.NewClientOptions(redistest.Standalone(t))).Simple()
		c := goredis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return redis.New(c, nil)
	}},
	{"cluster", func(t *testing.T, _ *fakeclock.Clock) driver.Backend {
		o := testserver.Patient(redis.NewClientOptions(redistest.Cluster(t)...)).Cluster()
		c := goredis.NewClusterClient(o)
		t.Cleanup(func() { c.Close() })
		return redis.New(c, nil)
	}},
}
