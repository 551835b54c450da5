package policyfile_test

import (
	"context"
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
	"github.com/freqcap/freqcap/sdk/policyfile"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var prefixes atomic.Int64

// uniquePrefix gives each test (and benchmark run) its own store.
func uniquePrefix(tb testing.TB) string {
	return fmt.Sprintf("pf%d-%d", time.Now().UnixNano()%1e9, prefixes.Add(1))
}

// redisLimiter is a Limiter on the shared standalone server (or, with
// cluster, the shared cluster) under prefix, with its own client.
func redisLimiter(tb testing.TB, cluster bool, prefix string) *sdk.Limiter {
	tb.Helper()
	var c goredis.UniversalClient
	if cluster {
		c = goredis.NewClusterClient(testserver.Patient(redis.NewClientOptions(redistest.Cluster(tb)...)).Cluster())
	} else {
		c = goredis.NewClient(testserver.Patient(redis.NewClientOptions(redistest.Standalone(tb))).Simple())
	}
	tb.Cleanup(func() { c.Close() })
	return sdk.New(redis.New(c, nil), sdk.WithPrefix(prefix))
}

func TestStoreLifecycleRedis(t *testing.T) {
	runStoreLifecycle(t, redisLimiter(t, false, uniquePrefix(t)), nil)
}

func TestStoreLifecycleCluster(t *testing.T) {
	runStoreLifecycle(t, redisLimiter(t, true, uniquePrefix(t)), nil)
}

// TestLiveRedis: watchers on other clients follow versions applied
// through one client, on a server and on the cluster; each decision of a
// watcher's limiter runs the version it holds.
func TestLiveRedis(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t)
			s := policyfile.NewStore(redisLimiter(t, cluster, prefix))
			mustApply(t, s, fileV1, false)
			var lives []*policyfile.Live
			var lims []*sdk.Limiter
			for range 3 {
				lim := redisLimiter(t, cluster, prefix)
				l, err := policyfile.NewStore(lim).Watch(ctx, policyfile.WatchOptions{})
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
// Variants: notifications (pub/sub) with the 1 s poll, and the poll alone
// (notifications lost).
func BenchmarkPropagation(b *testing.B) {
	for _, tc := range []struct {
		name string
		deaf bool
	}{{"pubsub", false}, {"poll-only", true}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			prefix := uniquePrefix(b)
			s := policyfile.NewStore(redisLimiter(b, false, prefix))
			mustApplyB(b, s, 0)
			const watchers = 10
			reached := make(chan int64, watchers*4)
			for range watchers {
				var be policyfile.Backend = redisLimiter(b, false, prefix)
				if tc.deaf {
					be = deaf{be}
				}
				l, err := policyfile.NewStore(be).Watch(ctx, policyfile.WatchOptions{
					OnChange: func(sn *policyfile.Snapshot) { reached <- sn.Version },
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
func mustApplyB(b *testing.B, s *policyfile.Store, i int) int64 {
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
	newLim := func() *sdk.Limiter {
		c := goredis.NewClient(testserver.Patient(redis.NewClientOptions(srv.Addr())).Simple())
		t.Cleanup(func() { c.Close() })
		return sdk.New(redis.New(c, nil))
	}
	s := policyfile.NewStore(newLim())
	mustApply(t, s, fileV1, false)
	errs := make(chan error, 100)
	live, err := policyfile.NewStore(newLim()).Watch(ctx, policyfile.WatchOptions{OnError: func(err error) { errs <- err }})
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
