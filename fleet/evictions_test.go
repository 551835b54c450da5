package fleet_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// evicting is the memory backend reporting a set evicted_keys
// (stats.Evictions), to test the series arithmetic; the Redis test below
// samples a real server.
type evicting struct {
	*memory.Backend
	n, calls atomic.Int64
}

func (e *evicting) EvictedKeys(context.Context) (int64, error) {
	e.calls.Add(1)
	return e.n.Load(), nil
}

// TestEvictionSeries: one sample per 10 s bucket, however many flushes;
// a bucket counts the rise since the previous sample, a fall (a restarted
// server) counts the new value, and the first sample is only a baseline.
func TestEvictionSeries(t *testing.T) {
	c := fakeclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	b := &evicting{Backend: memory.New(&memory.Options{Clock: c})}
	rec, err := fleet.NewRecorder(b, &fleet.Options{FlushEvery: -1, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx := context.Background()
	for _, v := range []int64{100, 105, 105, 2, 9} { // one per bucket
		b.n.Store(v)
		for range 3 {
			if err := rec.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		c.Advance(fleet.StatsStep)
	}
	if got := b.calls.Load(); got != 5 {
		t.Errorf("EvictedKeys called %d times for 15 flushes in 5 buckets, want 5", got)
	}
	rd, err := fleet.NewReader(b, &fleet.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := rd.Evictions(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, p := range ev.Series {
		if p.Sampled {
			got = append(got, p.Evicted)
		}
	}
	if fmt.Sprint(got) != "[0 5 0 2 7]" || ev.Evicted != 14 || !ev.Sampled || ev.Step != fleet.StatsStep || len(ev.Series) != 6 {
		t.Errorf("Evictions(1m) = %+v; sampled points %v, want [0 5 0 2 7], 14 in all", ev, got)
	}
	day, err := rd.Evictions(ctx, 24*time.Hour)
	if err != nil || day.Step != fleet.StatsCoarseStep || !day.Sampled {
		t.Errorf("Evictions(24h) = %+v, %v; want 1 min buckets, sampled", day, err)
	}
	if _, err := rd.Evictions(ctx, 25*time.Hour); err == nil {
		t.Error("Evictions(25h) succeeded, want an error")
	}
	// A backend that cannot say is never sampled.
	plain := memory.New(&memory.Options{Clock: c})
	rd2, _ := fleet.NewReader(plain, &fleet.Options{Now: c.Now})
	if ev, err := rd2.Evictions(ctx, time.Hour); err != nil || ev.Sampled || ev.Evicted != 0 {
		t.Errorf("Evictions on memory = %+v, %v; want nothing sampled", ev, err)
	}
}

// TestEvictionsOnRedis: a Recorder over a Redis backend on a 3 MB
// allkeys-lru server samples evicted_keys beside the decisions it counts,
// and the Reader gives the evictions the server reports.
func TestEvictionsOnRedis(t *testing.T) {
	srv := redistest.NewServer(t)
	srv.Memory(t, "3mb", "allkeys-lru")
	c := goredis.NewClient(testserver.Patient(redis.NewClientOptions(srv.Addr())).Simple())
	t.Cleanup(func() { c.Close() })
	b := redis.New(c, nil)
	clock := fakeclock.New(time.Now())
	rec, err := fleet.NewRecorder(b, &fleet.Options{FlushEvery: -1, Now: clock.Now, Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx := context.Background()
	lim := sdk.New(b, sdk.WithObserver(rec.Observe))
	p, err := sdk.NewPolicy("evicted", []sdk.Rule{sdk.FixedWindow("day", 1, 24*time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	fill := func(from, to int) {
		for i := from; i < to; i += 128 {
			as := make([]sdk.Attempt, 0, 128)
			for j := i; j < min(i+128, to); j++ {
				as = append(as, sdk.Attempt{Subject: sdk.Subject{"user": fmt.Sprint("u", j)}})
			}
			for _, r := range lim.TakeBatch(ctx, p, as) {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
	}
	// A 3 MB server holds about 9 900 of these subjects. The baseline is
	// sampled once evictions have begun: under allkeys-lru an older
	// sample would be among the first keys evicted (the statistics keys
	// have TTLs too, so every evicting policy may take them).
	fill(0, 11_000)
	// The baseline is written on a later tick of Redis' 1 s LRU clock
	// than the subjects above, or it is as old as they are and as likely
	// to be evicted (seen: the series came out 0).
	srv.NextLRUTick(t)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := b.EvictedKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fill(11_000, 14_000)
	clock.Advance(fleet.StatsStep)
	if err := rec.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evicted, err := b.EvictedKeys(ctx)
	if err != nil || evicted <= before {
		t.Fatalf("EvictedKeys() = %d, %v; want more than %d", evicted, err, before)
	}
	rd, err := fleet.NewReader(b, &fleet.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := rd.Evictions(ctx, time.Hour)
	// The samples were taken inside the flushes (the first before its
	// writes, which may evict too): the series spans at least what the
	// server evicted between the two readings here, and at most all.
	if err != nil || !ev.Sampled || ev.Evicted < evicted-before || ev.Evicted > evicted {
		t.Errorf("Evictions(1h) = evicted %d, sampled %v, %v; want [%d, %d] (evicted_keys %d, then %d)", ev.Evicted, ev.Sampled, err, evicted-before, evicted, before, evicted)
	}
	st, err := rd.Stats(ctx, p, time.Hour)
	if err != nil || st.Allowed != 14_000 {
		t.Errorf("Stats(1h).Allowed = %d, %v; want the 14000 decisions beside the evictions", st.Allowed, err)
	}
	t.Logf("evicted_keys %d then %d; the fleet's series %d", before, evicted, ev.Evicted)
}
