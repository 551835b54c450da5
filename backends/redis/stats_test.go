package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// TestRecorder: two processes (clients, Limiters and Recorders of their
// own) decide on one server or cluster; a third reads the totals, the
// series, the top denied subjects and the announcements. On the cluster,
// the policies' statistics keys spread over the masters and one flush
// reaches them all.
func TestRecorder(t *testing.T) {
	setups := []struct {
		name string
		new  func(t *testing.T) (*Backend, goredis.UniversalClient)
	}{
		{"standalone", func(t *testing.T) (*Backend, goredis.UniversalClient) { return standalone(t) }},
		{"cluster", func(t *testing.T) (*Backend, goredis.UniversalClient) { return cluster(t) }},
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := "rec-" + setup.name + "-" + fmt.Sprint(time.Now().UnixNano())
			var pols []*sdk.Policy
			for i := range 6 {
				p, err := sdk.NewPolicy(fmt.Sprintf("p%d", i), []sdk.Rule{
					sdk.SlidingWindow("per-min", 2, time.Minute).By("user"),
					sdk.FixedWindow("daily", 100, 24*time.Hour).By("user", "campaign"),
				})
				if err != nil {
					t.Fatal(err)
				}
				pols = append(pols, p)
			}
			procs := make([]*sdk.Limiter, 2)
			recs := make([]*fleet.Recorder, 2)
			for i := range procs {
				b, _ := setup.new(t)
				rec, err := fleet.NewRecorder(b, &fleet.Options{Prefix: prefix, FlushEvery: -1})
				if err != nil {
					t.Fatal(err)
				}
				recs[i] = rec
				procs[i] = sdk.New(b, sdk.WithPrefix(prefix), sdk.WithObserver(rec.Observe))
			}
			// Each process: user-<i> 3 times (2 allowed, 1 denied) on
			// every policy; process 1 also "hot" 4 times (2 allowed, 2
			// denied).
			for i, lim := range procs {
				for _, p := range pols {
					for range 3 {
						if _, err := lim.Allow(ctx, p, sdk.Subject{"user": fmt.Sprint("user-", i), "campaign": "c"}); err != nil {
							t.Fatal(err)
						}
					}
					if i == 1 {
						for range 4 {
							if _, err := lim.Allow(ctx, p, sdk.Subject{"user": "hot", "campaign": "c"}); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			for _, r := range recs {
				if err := r.Flush(ctx); err != nil {
					t.Fatalf("Flush = %v", err)
				}
			}
			rb, rc := setup.new(t)
			reader, err := fleet.NewReader(rb, &fleet.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pols {
				st, err := reader.Stats(ctx, p, time.Hour)
				if err != nil {
					t.Fatalf("Stats(%s) = %v", p.Name(), err)
				}
				if st.Allowed != 6 || st.Denied != 4 {
					t.Errorf("Stats(%s) = %d allowed, %d denied; want 6, 4", p.Name(), st.Allowed, st.Denied)
				}
				if r := st.Rules[0]; r.Rule != "per-min" || r.Allowed != 6 || r.Denied != 4 || r.NearLimit != 3 {
					t.Errorf("Stats(%s) per-min = %+v, want 6 allowed, 4 denied, 3 near", p.Name(), r)
				}
				if len(st.TopDenied) != 3 || !slices.Equal(st.TopDenied[0].Shard, []string{"hot"}) || st.TopDenied[0].Count != 2 {
					t.Errorf("Stats(%s).TopDenied = %+v, want hot (2) first of 3", p.Name(), st.TopDenied)
				}
				day, err := reader.Stats(ctx, p, 24*time.Hour)
				if err != nil || day.Allowed != 6 || day.Denied != 4 || len(day.Series) != 1440 || len(day.TopDenied) != 3 {
					t.Errorf("Stats(%s, 24h) = %d allowed, %d denied, %d points, %d top, %v; want 6, 4, 1440, 3", p.Name(), day.Allowed, day.Denied, len(day.Series), len(day.TopDenied), err)
				}
			}
			as, err := reader.Announced(ctx, time.Hour)
			if err != nil || len(as) != len(pols) {
				t.Errorf("Announced = %d, %v; want %d", len(as), err, len(pols))
			}

			// Keys: per policy and bucket, with their expiry.
			var (
				mu   sync.Mutex // ForEachMaster scans the masters concurrently
				keys []string
			)
			scan := func(c *goredis.Client) (int, error) {
				n := 0
				it := c.Scan(ctx, 0, prefix+":stats:*", 1000).Iterator()
				for it.Next(ctx) {
					mu.Lock()
					keys = append(keys, it.Val())
					mu.Unlock()
					n++
				}
				return n, it.Err()
			}
			masters := map[string]bool{}
			switch c := rc.(type) {
			case *goredis.Client:
				if _, err := scan(c); err != nil {
					t.Fatal(err)
				}
			case *goredis.ClusterClient:
				err := c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
					n, err := scan(m)
					if n > 0 {
						mu.Lock()
						masters[m.Options().Addr] = true
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(masters) < 2 {
					t.Errorf("statistics keys on %d masters, want them spread", len(masters))
				}
			}
			// Per policy: a 10 s hash, a 1 min hash and sorted set (2 of
			// each across a minute boundary, which is a 10 s one too);
			// and the announcements.
			if len(keys) < 3*len(pols)+1 || len(keys) > 6*len(pols)+1 {
				t.Errorf("%d statistics keys, want 3 to 6 per policy and 1: %q", len(keys), keys)
			}
			for _, k := range keys {
				ttl, err := rc.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				var lo, hi time.Duration
				switch {
				case strings.Contains(k, ":10s:"):
					lo, hi = fleet.StatsFineRetention, fleet.StatsFineRetention+fleet.StatsStep
				case strings.Contains(k, ":1m:"):
					lo, hi = fleet.StatsCoarseRetention, fleet.StatsCoarseRetention+fleet.StatsCoarseStep
				default: // the announcements: today's key, kept until the end of tomorrow
					lo, hi = 24*time.Hour, 48*time.Hour
				}
				if ttl < lo-5*time.Second || ttl > hi {
					t.Errorf("PTTL %s = %v, want in [%v, %v]", k, ttl, lo, hi)
				}
			}
		})
	}
}

// TestReadStatsMalformed: a hash field whose value is not an integer is
// left out and listed in Malformed; the hash's other fields and the other
// hashes are read.
func TestReadStatsMalformed(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	k1, k2 := "rsm-"+fmt.Sprint(time.Now().UnixNano())+":a", "rsm-"+fmt.Sprint(time.Now().UnixNano())+":b"
	if err := c.HSet(ctx, k1, "good", "5", "bad", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, k2, "also", "7").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := b.ReadStats(ctx, stats.Query{Hashes: []string{k1, k2}})
	if err != nil {
		t.Fatalf("ReadStats = %v, want the fields it can read", err)
	}
	if len(d.Hashes) != 2 || len(d.Hashes[0]) != 1 || d.Hashes[0][0] != (stats.Field{Name: "good", Value: 5}) ||
		len(d.Hashes[1]) != 1 || d.Hashes[1][0].Value != 7 {
		t.Errorf("ReadStats hashes = %+v, want good=5 and also=7", d.Hashes)
	}
	if len(d.Malformed) != 1 || d.Malformed[0] != (stats.Malformed{Key: k1, Field: "bad"}) {
		t.Errorf("ReadStats malformed = %+v, want %s's bad", d.Malformed, k1)
	}
}
