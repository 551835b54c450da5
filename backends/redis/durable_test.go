package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk/driver"
)

// durableBackend returns a backend on addr with Options.Durability d and
// coalescing co (Options.Coalesce).
func durableBackend(t *testing.T, addr string, d Durability, co int) *Backend {
	t.Helper()
	c := goredis.NewClient(testserver.Patient(NewClientOptions(addr)).Simple())
	t.Cleanup(func() { c.Close() })
	return New(c, &Options{Durability: d, Coalesce: co})
}

// waitReplicaUp polls until master counts one connected replica in sync.
func waitReplicaUp(t *testing.T, master string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: master})
	defer c.Close()
	eventually(t, 30*time.Second, "replica connected", func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
}

// waitReplicaAcks polls until master's replica acknowledges a write
// (WAIT 1): online in INFO can come before the link carries writes.
func waitReplicaAcks(t *testing.T, master string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: master})
	defer c.Close()
	ctx := context.Background()
	eventually(t, 30*time.Second, "replica acknowledging writes", func() bool {
		if c.Set(ctx, "durable-probe", "x", time.Minute).Err() != nil {
			return false
		}
		n, err := c.Wait(ctx, 1, time.Second).Result()
		return err == nil && n >= 1
	})
}

// TestDurability: with Options.Durability on, a Take, a Reserve, a
// batch and coalesced Takes on a master with one replica say Durable
// (Replicas 1), and the replica holds the decision's state at once; on a
// master without a replica the same decisions wait until the timeout and
// say not Durable, and stand: the count is on the master. Peeks never
// wait nor say Durable, and neither do replays.
func TestDurability(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replica  bool
		durable  bool
		replicas int
		// timeout is the wait's: short where it must be waited out, long
		// where a replica answers at once (a loaded machine can take
		// longer than a short one to replicate: seen at 60 ms).
		timeout time.Duration
	}{
		{"no replica", false, false, 0, 60 * time.Millisecond},
		{"one replica", true, true, 1, 5 * time.Second},
	} {
		timeout := tc.timeout
		t.Run(tc.name, func(t *testing.T) {
			m := redistest.NewServer(t)
			var replica *goredis.Client
			if tc.replica {
				r := redistest.NewReplica(t, m)
				waitReplicaUp(t, m.Addr())
				waitReplicaAcks(t, m.Addr())
				replica = goredis.NewClient(&goredis.Options{Addr: r.Addr()})
				t.Cleanup(func() { replica.Close() })
			}
			d := Durability{Replicas: 1, Timeout: timeout}
			b := durableBackend(t, m.Addr(), d, -1)
			ctx := context.Background()
			check := func(what string, res driver.Result) {
				t.Helper()
				if res.Durable != tc.durable || res.Replicas != tc.replicas {
					t.Errorf("%s: Durable %v Replicas %d, want %v %d", what, res.Durable, res.Replicas, tc.durable, tc.replicas)
				}
			}

			// Take: waits; the decision stands either way.
			s := newSubject(t, "durable")
			rule := s.fixed("f", 10, time.Hour)
			start := time.Now()
			res := take(t, b, s.request(opTake, 1, rule))
			took := time.Since(start)
			checkRule(t, "Take", res.Rules[0], true, 1, 10)
			check("Take", res)
			if !tc.replica && took < timeout {
				t.Errorf("Take without a replica took %v, want >= the wait's timeout %v", took, timeout)
			}
			if tc.replica {
				mc := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
				defer mc.Close()
				want, err1 := mc.Get(ctx, group(&rule)).Result()
				got, err2 := replica.Get(ctx, group(&rule)).Result()
				if err1 != nil || err2 != nil || got != want {
					t.Errorf("after a Durable Take: replica's value %q (%v), master's %q (%v); want the same", got, err2, want, err1)
				}
			}

			// Peek: nothing consumed, no wait.
			res = take(t, b, s.request(opPeek, 1, rule))
			checkRule(t, "Peek", res.Rules[0], true, 1, 10)
			if res.Durable || res.Replicas != 0 {
				t.Errorf("Peek: Durable %v Replicas %d, want false 0", res.Durable, res.Replicas)
			}

			// Reserve waits as Take does.
			rq := s.request(opReserve, 1, rule)
			rq.ReservationID, rq.ReservationTTL = "r1", time.Minute
			res = take(t, b, rq)
			checkRule(t, "Reserve", res.Rules[0], true, 2, 10)
			check("Reserve", res)

			// A replay says nothing of durability.
			rq = s.request(opTake, 1, rule)
			rq.IdempotencyKey, rq.IdempotencyTTL = s.base+"!i1", time.Minute
			check("first of an idempotent pair", take(t, b, rq))
			res = take(t, b, rq)
			if !res.Replayed || res.Durable || res.Replicas != 0 {
				t.Errorf("replay: Replayed %v Durable %v Replicas %d, want true false 0", res.Replayed, res.Durable, res.Replicas)
			}

			// A batch: one WAIT for the pipeline, every Take says it.
			var reqs []driver.Request
			for i := range 5 {
				bs := newSubject(t, fmt.Sprintf("batch%d", i))
				reqs = append(reqs, bs.request(opTake, 1, bs.fixed("f", 10, time.Hour)).Request)
			}
			for i, br := range b.TakeBatch(ctx, reqs) {
				if br.Err != nil {
					t.Fatalf("TakeBatch[%d]: %v", i, br.Err)
				}
				checkRule(t, fmt.Sprintf("TakeBatch[%d]", i), br.Result.Rules[0], true, 1, 10)
				check(fmt.Sprintf("TakeBatch[%d]", i), br.Result)
			}
			for i, br := range b.PeekBatch(ctx, reqs) {
				if br.Err != nil || br.Result.Durable || br.Result.Replicas != 0 {
					t.Errorf("PeekBatch[%d]: Durable %v Replicas %d err %v, want false 0 nil", i, br.Result.Durable, br.Result.Replicas, br.Err)
				}
			}

			// Coalesced concurrent Takes: one WAIT per script.
			cb := durableBackend(t, m.Addr(), d, DefaultCoalesce)
			cs := newSubject(t, "coalesced")
			crule := cs.fixed("f", 1000, time.Hour)
			const n = 24
			var wg sync.WaitGroup
			results := make([]driver.Result, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { results[i], errs[i] = cb.Take(ctx, cs.request(opTake, 1, crule).Request) })
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("coalesced Take %d: %v", i, errs[i])
				}
				check(fmt.Sprintf("coalesced Take %d", i), results[i])
			}
			res = take(t, b, cs.request(opPeek, 1, crule))
			checkRule(t, "Peek after the coalesced Takes", res.Rules[0], true, n, 1000)

			if desc, err := b.Describe(ctx); err != nil || !strings.Contains(strings.Join(desc.Notes, "\n"), "durability: each Take and Reserve waits for 1 replica(s)") {
				t.Errorf("Describe notes = %q, %v; want the durability note", desc.Notes, err)
			}
		})
	}
}

// TestDurabilityOff: without the option, decisions say nothing of
// replicas, with a replica connected.
func TestDurabilityOff(t *testing.T) {
	m := redistest.NewServer(t)
	redistest.NewReplica(t, m)
	waitReplicaUp(t, m.Addr())
	b := durableBackend(t, m.Addr(), Durability{}, -1)
	s := newSubject(t, "off")
	res := take(t, b, s.request(opTake, 1, s.fixed("f", 10, time.Hour)))
	if res.Durable || res.Replicas != 0 {
		t.Errorf("Take without the option: Durable %v Replicas %d, want false 0", res.Durable, res.Replicas)
	}
}

// TestDurabilityDeadline: the wait is cut to half of what remains of the
// call's deadline, so a call whose deadline is shorter than the option's
// timeout gets its decision (not Durable), not a timeout error.
func TestDurabilityDeadline(t *testing.T) {
	m := redistest.NewServer(t)
	b := durableBackend(t, m.Addr(), Durability{Replicas: 1, Timeout: time.Minute}, -1)
	s := newSubject(t, "deadline")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := b.Take(ctx, s.request(opTake, 1, s.fixed("f", 10, time.Hour)).Request)
	if err != nil {
		t.Fatalf("Take under a 2s deadline with a 1 min wait: %v, want a decision", err)
	}
	if !res.Allowed || res.Durable {
		t.Errorf("Take: Allowed %v Durable %v, want true false", res.Allowed, res.Durable)
	}
}

// TestDurabilityCluster: on a cluster, each decision's script and WAIT go
// to the master of its slot (no redirect, no error), and on the shared
// cluster, which has no replicas, decisions say not Durable; batches
// spread over every master.
func TestDurabilityCluster(t *testing.T) {
	o := testserver.Patient(NewClientOptions(redistest.Cluster(t)...)).Cluster()
	c := goredis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	b := New(c, &Options{Durability: Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	ctx := context.Background()
	var reqs []driver.Request
	for i := range 12 {
		s := newSubject(t, fmt.Sprintf("cl%d", i))
		req := s.request(opTake, 1, s.fixed("f", 10, time.Hour))
		res := take(t, b, req)
		checkRule(t, "Take", res.Rules[0], true, 1, 10)
		if res.Durable || res.Replicas != 0 {
			t.Errorf("Take on a cluster without replicas: Durable %v Replicas %d, want false 0", res.Durable, res.Replicas)
		}
		reqs = append(reqs, req.Request)
	}
	for i, br := range b.TakeBatch(ctx, reqs) {
		if br.Err != nil {
			t.Fatalf("TakeBatch[%d]: %v", i, br.Err)
		}
		checkRule(t, fmt.Sprintf("TakeBatch[%d]", i), br.Result.Rules[0], true, 2, 10)
		if br.Result.Durable {
			t.Errorf("TakeBatch[%d]: Durable on a cluster without replicas", i)
		}
	}
}

// TestDurabilitySentinelKill: under load through a Sentinel client with
// Options.Durability (one replica), the master is killed with SIGKILL;
// after the Sentinel promotes the replica, every decision that was
// reported admitted and Durable is in the new master's counts (per user,
// used >= the Durable admissions). Decisions not Durable may be lost:
// the test reports how many were.
func TestDurabilitySentinelKill(t *testing.T) {
	z := redistest.NewSentinel(t)
	o := testserver.Patient(NewClientOptions(z.Addr()))
	o.MasterName = z.Name
	o.ReadTimeout, o.WriteTimeout = time.Second, time.Second
	c := goredis.NewUniversalClient(o)
	t.Cleanup(func() { c.Close() })
	b := New(c, &Options{Durability: Durability{Replicas: 1, Timeout: 100 * time.Millisecond}})

	const users, workers = 16, 8
	subjects := make([]driver.Rule, users)
	for u := range subjects {
		s := newSubject(t, fmt.Sprintf("kill%d", u))
		subjects[u] = s.fixed("f", 1<<40, time.Hour)
	}
	var (
		durable, admitted [users]atomic.Int64
		errs, phase2      atomic.Int64
		killed, stop      atomic.Bool
		wg                sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for k := w; !stop.Load(); k += workers {
				u := k % users
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				res, err := b.Take(ctx, driver.Request{Policy: "p", Rules: subjects[u : u+1], Cost: 1})
				cancel()
				if err != nil {
					errs.Add(1)
					time.Sleep(10 * time.Millisecond) // the client is switching masters: poll
					continue
				}
				if res.Allowed {
					admitted[u].Add(1)
					if res.Durable {
						durable[u].Add(1)
					}
				}
				if killed.Load() {
					phase2.Add(1)
				}
			}
		})
	}
	total := func(a *[users]atomic.Int64) (n int64) {
		for u := range a {
			n += a[u].Load()
		}
		return n
	}
	eventually(t, 15*time.Second, "300 Durable decisions before the kill", func() bool { return total(&durable) >= 300 })
	before := total(&durable)
	z.KillMaster(t)
	killed.Store(true)
	eventually(t, 15*time.Second, "decisions on the new master", func() bool { return phase2.Load() >= 20 })
	stop.Store(true)
	wg.Wait()

	var onMaster int64
	for u := range users {
		res, err := b.Peek(context.Background(), driver.Request{Policy: "p", Rules: subjects[u : u+1], Cost: 1})
		if err != nil {
			t.Fatalf("Peek user %d on the new master: %v", u, err)
		}
		used := res.Rules[0].Used
		onMaster += used
		if used < durable[u].Load() {
			t.Errorf("user %d: used %d on the new master, want >= the %d decisions reported admitted and Durable", u, used, durable[u].Load())
		}
	}
	t.Logf("%d Durable admissions before the kill, %d in all, %d admissions reported; %d counted on the new master (%d lost, none Durable); %d calls failed while the master was down",
		before, total(&durable), total(&admitted), onMaster, total(&admitted)-onMaster, errs.Load())
}
