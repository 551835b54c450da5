package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
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

// TestSentinelWideSubject: a person with 80 campaigns (a wide root, its
// sections in the hash beside it, lua.WideAt) through a Sentinel client,
// failed over to the replica: the root, its hash and every campaign's
// count arrive there by replication, and decisions go on from them (a
// campaign's cap holds, the person's count goes on, a reset of one
// campaign forgets only it).
func TestSentinelWideSubject(t *testing.T) {
	z := redistest.NewSentinel(t)
	b, _ := sentinelBackend(t, z)
	ctx := context.Background()
	s := newSubject(t, "sentinel-wide")
	user := driver.Rule{Name: "user", Key: s.key("user"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
	rules := func(campaign string) []driver.Rule {
		return []driver.Rule{user, {Name: "campaign", Key: s.key("campaign", campaign), Group: s.base + "=c:" + campaign,
			Algorithm: driver.SlidingWindow, Limit: 3, Window: 24 * time.Hour}}
	}
	for i := range 80 {
		if res := take(t, b, s.request(opTake, 1, rules(fmt.Sprintf("k%d", i))...)); !res.Allowed {
			t.Fatalf("take of campaign %d denied", i)
		}
	}
	root := s.base + "="
	z.WaitSynced(t)
	z.Failover(t)
	nm := goredis.NewClient(&goredis.Options{Addr: z.Master.Addr()})
	defer nm.Close()
	if v := nm.Get(ctx, root).Val(); len(v) == 0 || v[0] != lua.WideFormat {
		t.Fatalf("the new master's root is not wide (%d bytes)", len(v))
	}
	if n := nm.HLen(ctx, wideKey(root)).Val(); n != 80 {
		t.Fatalf("the new master's wide hash holds %d fields, want 80", n)
	}
	// The first decision after the failover may fail while the client
	// switches masters (it consumes nothing then): poll.
	req := s.request(opTake, 1, rules("k1")...)
	deadline := time.Now().Add(30 * time.Second)
	var res driver.Result
	for {
		var err error
		if res, err = b.do(ctx, req); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision after the failover before the deadline: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkRule(t, "k1 after failover, user", res.Rules[0], true, 81, 1000)
	checkRule(t, "k1 after failover, campaign", res.Rules[1], true, 2, 3)
	res = take(t, b, req)
	checkRule(t, "k1 again, campaign", res.Rules[1], true, 3, 3)
	res = take(t, b, req)
	checkRule(t, "k1 over its cap, campaign", res.Rules[1], false, 3, 3)
	if err := b.Reset(ctx, driver.Request{Policy: "p", Rules: rules("k1")[1:]}); err != nil {
		t.Fatalf("ResetRules of k1: %v", err)
	}
	for _, tc := range []struct {
		campaign string
		used     int64
	}{{"k1", 0}, {"k2", 1}, {"k79", 1}} {
		if res := take(t, b, s.request(opPeek, 1, rules(tc.campaign)...)); res.Rules[1].Used != tc.used || res.Rules[0].Used != 82 {
			t.Errorf("after the reset of k1, %s: %s; want campaign used %d, user 82", tc.campaign, resLine(res), tc.used)
		}
	}
}
