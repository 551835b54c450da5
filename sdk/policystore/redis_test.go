package policystore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var prefixes atomic.Int64

// uniquePrefix gives each test (and benchmark run) its own store.
func uniquePrefix(tb testing.TB) string {
	return fmt.Sprintf("pf%d-%d", time.Now().UnixNano()%1e9, prefixes.Add(1))
}

// redisBackend is a backend on the shared standalone server (or, with
// cluster, the shared cluster), with its own client.
func redisBackend(tb testing.TB, cluster bool) *redis.Backend {
	tb.Helper()
	var c goredis.UniversalClient
	if cluster {
		c = goredis.NewClusterClient(testserver.Patient(redis.NewClientOptions(redistest.Cluster(tb)...)).Cluster())
	} else {
		c = goredis.NewClient(testserver.Patient(redis.NewClientOptions(redistest.Standalone(tb))).Simple())
	}
	tb.Cleanup(func() { c.Close() })
	return redis.New(c, nil)
}

// redisPair is a Limiter and the Store of its backend under prefix (see
// redisBackend).
func redisPair(tb testing.TB, cluster bool, prefix string) (*sdk.Limiter, *policystore.Store) {
	b := redisBackend(tb, cluster)
	return sdk.New(b, sdk.WithPrefix(prefix)), policystore.New(b, policystore.WithPrefix(prefix))
}

// redisStore is a Store under prefix (see redisBackend).
func redisStore(tb testing.TB, cluster bool, prefix string) *policystore.Store {
	return policystore.New(redisBackend(tb, cluster), policystore.WithPrefix(prefix))
}

func TestStoreLifecycleRedis(t *testing.T) {
	runStoreLifecycle(t, redisStore(t, false, uniquePrefix(t)))
}

func TestStoreLifecycleCluster(t *testing.T) {
	runStoreLifecycle(t, redisStore(t, true, uniquePrefix(t)))
}

// TestLiveRedis: watchers on other clients follow versions applied
// through one client, on a server and on the cluster; each decision of a
// watcher's limiter runs the version it holds.
func TestLiveRedis(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t)
			s := redisStore(t, cluster, prefix)
			mustApply(t, s, fileV1, false)
			var lives []*policystore.Live
			var lims []*sdk.Limiter
			for range 3 {
				lim, st := redisPair(t, cluster, prefix)
				l, err := st.Watch(ctx, policystore.WatchOptions{})
				if err != nil {
					t.Fatalf("Watch = %v", err)
				}
				defer l.Close()
				lives, lims = append(lives, l), append(lims, lim)
			}
			mustApply(t, s, fileV2, false)
			for i, l := range lives {
				waitFor(t, fmt.Sprintf("watcher %d at version 2", i), 10*time.Second, func() bool { return l.Current().Version == 2 })
			}
			// minute's limit is 4 in version 2: the fifth attempt is denied.
			snap := lives[0].Current()
			p := snap.Policy("push")
			for i := range 5 {
				d, err := lims[i%len(lims)].Allow(ctx, p, sdk.Subject{"user": "u1"})
				if err != nil {
					t.Fatalf("Allow = %v", err)
				}
				if want := i < 4; d.Allowed != want {
					t.Errorf("Allow #%d under version %d = %v, want %v", i+1, snap.Version, d.Allowed, want)
				}
			}
		})
	}
}

// BenchmarkPropagation measures how long a new version takes to reach 10
// watchers (10 limiters, each with its own client) on a real server:
// from Apply's return until every Live's Current is the new version.
// Variants: notifications (pub/sub) with the 1 s poll, the poll alone
// (notifications lost), and notifications on a 3-master cluster.
func BenchmarkPropagation(b *testing.B) {
	for _, tc := range []struct {
		name    string
		deaf    bool
		cluster bool
	}{{"pubsub", false, false}, {"poll-only", true, false}, {"cluster-pubsub", false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			prefix := uniquePrefix(b)
			s := redisStore(b, tc.cluster, prefix)
			mustApplyB(b, s, 0)
			const watchers = 10
			reached := make(chan int64, watchers*4)
			for range watchers {
				var be driver.Backend = redisBackend(b, tc.cluster)
				if tc.deaf {
					be = deaf{be.(*redis.Backend)}
				}
				l, err := policystore.New(be, policystore.WithPrefix(prefix)).Watch(ctx, policystore.WatchOptions{
					OnChange: func(sn *policystore.Snapshot) { reached <- sn.Version },
				})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v := mustApplyB(b, s, i+1)
				start := time.Now()
				for n := 0; n < watchers; {
					select {
					case got := <-reached:
						if got == v {
							n++
						}
					case <-time.After(30 * time.Second):
						b.Fatalf("version %d: %d of %d watchers within 30 s", v, n, watchers)
					}
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		})
	}
}

var benchMu sync.Mutex

// mustApplyB applies a version whose minute limit is 5+i and returns its
// number.
func mustApplyB(b *testing.B, s *policystore.Store, i int) int64 {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	src := strings.Replace(fileV1, "limit: 5,", fmt.Sprintf("limit: %d,", 5+i), 1)
	plan, err := s.Plan(context.Background(), []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	v, err := s.Apply(context.Background(), plan, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	return v.Number
}

// TestLiveSurvivesRedis: a Live on a dedicated server follows versions
// after its subscription is killed, and after the server restarts empty
// (no persistence) and the store is applied again from version 1.
func TestLiveSurvivesRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.NewServer(t)
	newStore := func() *policystore.Store {
		c := goredis.NewClient(testserver.Patient(redis.NewClientOptions(srv.Addr())).Simple())
		t.Cleanup(func() { c.Close() })
		return policystore.New(redis.New(c, nil))
	}
	s := newStore()
	mustApply(t, s, fileV1, false)
	errs := make(chan error, 100)
	live, err := newStore().Watch(ctx, policystore.WatchOptions{OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	mustApply(t, s, fileV2, false)
	waitFor(t, "version 2 after the subscription was killed", 10*time.Second, func() bool { return live.Current().Version == 2 })

	srv.Restart(t)
	mustApply(t, s, fileRekey, false) // version 1 of a new, empty store
	waitFor(t, "version 1 of the restarted store", 15*time.Second, func() bool {
		cur := live.Current()
		return cur.Version == 1 && slices.Equal(ruleNamed(t, cur.Policy("push"), "minute").Dimensions, []string{"user", "app"})
	})
	var reset bool
	for len(errs) > 0 {
		if err := <-errs; strings.Contains(err.Error(), "the store was reset") {
			reset = true
		}
	}
	if !reset {
		t.Error("the reset was not reported through OnError")
	}
}

// TestStoreConcurrentApplies: eight stores (eight clients) plan against
// version 1 and apply at once: exactly one stores version 2, the others
// fail with ErrVersionConflict, on a server and on the cluster.
func TestStoreConcurrentApplies(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t)
			mustApply(t, redisStore(t, cluster, prefix), fileV1, false)
			const n = 8
			plans := make([]*policystore.Plan, n)
			stores := make([]*policystore.Store, n)
			for i := range n {
				stores[i] = redisStore(t, cluster, prefix)
				src := strings.Replace(fileV1, "limit: 5,", fmt.Sprintf("limit: %d,", 10+i), 1)
				p, err := stores[i].Plan(ctx, []byte(src))
				if err != nil {
					t.Fatal(err)
				}
				plans[i] = p
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = stores[i].Apply(ctx, plans[i], fmt.Sprint("w", i), "")
				}()
			}
			wg.Wait()
			won := -1
			for i, err := range errs {
				switch {
				case err == nil && won >= 0:
					t.Errorf("applies %d and %d both succeeded", won, i)
				case err == nil:
					won = i
				case !errors.Is(err, driver.ErrVersionConflict):
					t.Errorf("apply %d = %v, want ErrVersionConflict", i, err)
				}
			}
			if won < 0 {
				t.Fatal("no apply succeeded")
			}
			v, err := stores[0].Version(ctx, 0)
			if err != nil || v.Number != 2 || v.By != fmt.Sprint("w", won) {
				t.Errorf("Version(0) = %d by %s, %v, want 2 by w%d", v.Number, v.By, err, won)
			}
		})
	}
}

// TestStoreLogLimitAcrossLogLineRedis: a sliding log's limit crossing
// driver.LogLine moves its state on Redis between its packed log (up to
// the line) and its dimension set's sorted set (above), so the store
// applies it as a transition (sdk.SameState), not as a change that
// carries exactly: a person capped before it stays capped after it, both
// ways, on a server and on a cluster.
func TestStoreLogLimitAcrossLogLineRedis(t *testing.T) {
	ctx := context.Background()
	const file = `policies:
  - name: push
    rules:
      - {name: day, algorithm: sliding_log, limit: %d, window: 24h, by: [user]}
`
	for _, cluster := range []bool{false, true} {
		for _, tc := range []struct{ from, to int64 }{{5, driver.LogLine + 50}, {driver.LogLine + 50, 50}} {
			t.Run(fmt.Sprintf("cluster=%t/%d→%d", cluster, tc.from, tc.to), func(t *testing.T) {
				lim, s := redisPair(t, cluster, uniquePrefix(t))
				policy := func(v policystore.Version) *sdk.Policy {
					ps, err := v.Policies()
					if err != nil || len(ps) != 1 {
						t.Fatalf("Policies() = %v, %v", ps, err)
					}
					return ps[0]
				}
				p1 := policy(mustApply(t, s, fmt.Sprintf(file, tc.from), false))
				who := sdk.Subject{"user": "u1"}
				// Capped: all the old limit allows (5 → 150: the old rule,
				// enforced for its reach, denies), or one more than the new
				// limit (150 → 50: the new rule, seeded with the old count,
				// denies).
				n := min(tc.from, tc.to+1)
				if d, err := lim.Take(ctx, p1, sdk.Attempt{Subject: who, Cost: n}); err != nil || !d.Allowed {
					t.Fatalf("Take of %d under limit %d = %+v, %v", n, tc.from, d, err)
				}
				plan, err := s.Plan(ctx, []byte(fmt.Sprintf(file, tc.to)))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(plan.String(), "old rule stays enforced") {
					t.Errorf("Plan(limit %d → %d) is not a transition:\n%s", tc.from, tc.to, plan)
				}
				v2, err := s.Apply(ctx, plan, "alice", "across the line")
				if err != nil {
					t.Fatal(err)
				}
				d, err := lim.Allow(ctx, policy(v2), who)
				if err != nil || d.Allowed {
					t.Fatalf("Allow after the limit %d → %d, %d taken = %+v, %v; want denied", tc.from, tc.to, n, d, err)
				}
			})
		}
	}
}
