package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// sentinelBackend returns a backend on a failover client that finds z's
// master through its Sentinel, as a Sentinel deployment connects.
func sentinelBackend(t *testing.T, z *redistest.Sentinel) (*Backend, goredis.UniversalClient) {
	t.Helper()
	o := testserver.Patient(NewClientOptions(z.Addr()))
	o.MasterName = z.Name
	c := goredis.NewUniversalClient(o)
	if _, ok := c.(*goredis.Client); !ok {
		t.Fatalf("NewUniversalClient with MasterName = %T, want a failover *goredis.Client", c)
	}
	t.Cleanup(func() { c.Close() })
	return New(c, nil), c
}

func TestConformanceSentinel(t *testing.T) {
	b, _ := sentinelBackend(t, redistest.NewSentinel(t))
	runConformance(t, b)
}

// TestSentinelFailover decides through a Sentinel client, fails the master
// over to its replica, and decides on: the counts carried by replication
// survive, the new master's empty script cache is refilled (EVAL after
// NOSCRIPT), and a decision that fails while the client switches (READONLY
// on the demoted master, or a closed connection) consumes nothing, so the
// limit is reached exactly.
func TestSentinelFailover(t *testing.T) {
	z := redistest.NewSentinel(t)
	b, _ := sentinelBackend(t, z)
	ctx := context.Background()
	s := newSubject(t, "sentinel")
	rules := []driver.Rule{s.sliding("s", 10, time.Hour, 10), s.fixed("f", 10, time.Hour)}
	req := s.request(opTake, 1, rules...)
	for i := int64(1); i <= 6; i++ {
		res := take(t, b, req)
		checkRule(t, "before failover, sliding", res.Rules[0], true, i, 10)
		checkRule(t, "before failover, fixed", res.Rules[1], true, i, 10)
	}

	z.WaitSynced(t)
	z.Failover(t)
	nm := goredis.NewClient(&goredis.Options{Addr: z.Master.Addr()})
	defer nm.Close()
	script := decidingScript(t, b, req) // the script a Take of req runs
	if ok, err := nm.ScriptExists(ctx, script).Result(); err != nil || ok[0] {
		t.Fatalf("SCRIPT EXISTS on the new master = %v, %v; want false (scripts are not replicated), or this test proves nothing", ok, err)
	}

	used, failed := int64(6), 0
	deadline := time.Now().Add(30 * time.Second)
	for used < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("after failover: %d decisions admitted, %d failed, before the deadline; want 4 admitted", used-6, failed)
		}
		res, err := b.do(ctx, req)
		if err != nil {
			failed++
			time.Sleep(20 * time.Millisecond) // the client is switching masters: poll
			continue
		}
		used++
		checkRule(t, "after failover, sliding", res.Rules[0], true, used, 10)
		checkRule(t, "after failover, fixed", res.Rules[1], true, used, 10)
	}
	res := take(t, b, req)
	checkRule(t, "the 11th, sliding", res.Rules[0], false, 10, 10)
	checkRule(t, "the 11th, fixed", res.Rules[1], false, 10, 10)
	if ok, err := nm.ScriptExists(ctx, script).Result(); err != nil || !ok[0] {
		t.Errorf("SCRIPT EXISTS on the new master after decisions = %v, %v; want true", ok, err)
	}
	t.Logf("failover: %d decisions failed while the client switched masters", failed)
}
