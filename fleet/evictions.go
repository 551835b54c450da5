package fleet

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// fieldEvicted is the field of an eviction bucket's hash: the storage's
// evicted_keys as a Recorder sampled it in that bucket.
const fieldEvicted = "k"

// evictionKey is the hash of the evicted_keys sample of the bucket of
// width step ("10s" or "1m") starting at start:
// "<prefix>:stats:{evictions}:<step>:<unix>". Its hash tag cannot be a
// policy's bucket, whose tag ends with the bucket's time.
func evictionKey(prefix, step string, start time.Time) string {
	return prefix + ":stats:{evictions}:" + step + ":" + strconv.FormatInt(start.Unix(), 10)
}

// sampleEvictions adds to batch, at most once per StatsStep bucket, the
// storage's evicted_keys (stats.Evictions: every master's, summed) to the
// hashes of the fine and coarse buckets holding now, as a value set (HSET),
// not added: every Recorder of a storage samples the same counter, and
// the last sample of a bucket stands. A storage that cannot say adds
// nothing. Called under flushMu.
func (r *Recorder) sampleEvictions(ctx context.Context, now time.Time, batch *stats.Batch) error {
	ev, ok := r.st.(stats.Evictions)
	if !ok {
		return nil
	}
	start := now.Truncate(StatsStep)
	if start.Unix() == r.evictedAt {
		return nil
	}
	n, err := ev.EvictedKeys(ctx)
	if err != nil {
		return fmt.Errorf("fleet: recorder: sampling evictions: %w", err)
	}
	r.evictedAt = start.Unix()
	f := []stats.Field{{Name: fieldEvicted, Value: n}}
	cstart := start.Truncate(StatsCoarseStep)
	batch.Hashes = append(batch.Hashes,
		stats.Hash{Key: evictionKey(r.prefix, "10s", start), Set: f, ExpireAt: start.Add(StatsStep + StatsFineRetention)},
		stats.Hash{Key: evictionKey(r.prefix, "1m", cstart), Set: f, ExpireAt: cstart.Add(StatsCoarseStep + StatsCoarseRetention)})
	return nil
}

// Evictions is how many keys the storage's servers evicted over a window,
// per bucket, as the Recorders sampled their evicted_keys (Redis: every
// master's, from INFO stats) once per StatsStep bucket: a bucket's count
// is the rise of the counter since the previous sample (a fall — a server
// restarted — counts the new value). Under a maxmemory-policy other than
// noeviction evicted keys are freqcap's counters first (every one has a
// TTL): each may be a person uncapped.
type Evictions struct {
	From, To time.Time
	// Step is the bucket width, as Stats' for the same window.
	Step time.Duration
	// Evicted sums the series.
	Evicted int64
	// Sampled reports that some Recorder sampled within the window: false
	// where the storage does not report evictions (the memory backend),
	// or no Recorder flushed.
	Sampled bool
	// Series holds one point per bucket, oldest first.
	Series []EvictionPoint
}

// EvictionPoint is one bucket's evictions.
type EvictionPoint struct {
	At      time.Time // the bucket's start
	Evicted int64
	// Sampled reports that a Recorder sampled in this bucket.
	Sampled bool
}

// Evictions reads the evicted_keys samples over the window ending now
// (the Reader's clock), in the buckets Stats uses for the same window.
//
// Keys read: "<prefix>:stats:{evictions}:10s:<unix>" or
// "<prefix>:stats:{evictions}:1m:<unix>" per bucket, and the bucket
// before the window (the first bucket's baseline).
func (rd *Reader) Evictions(ctx context.Context, window time.Duration) (Evictions, error) {
	if window <= 0 || window > StatsCoarseRetention {
		return Evictions{}, fmt.Errorf("fleet: evictions: window must be in (0, %v], got %v", StatsCoarseRetention, window)
	}
	step, kind := StatsStep, "10s"
	if window > StatsFineRetention {
		step, kind = StatsCoarseStep, "1m"
	}
	now := rd.now()
	n := int((window + step - 1) / step)
	last := now.Truncate(step)
	first := last.Add(-time.Duration(n-1) * step)
	out := Evictions{From: first, To: now, Step: step, Series: make([]EvictionPoint, n)}
	var q stats.Query
	for i := -1; i < n; i++ { // the bucket before the window first
		q.Hashes = append(q.Hashes, evictionKey(rd.prefix, kind, first.Add(time.Duration(i)*step)))
	}
	ctx, cancel := rd.withTimeout(ctx)
	defer cancel()
	data, err := rd.st.ReadStats(ctx, q)
	if err != nil {
		return Evictions{}, fmt.Errorf("fleet: evictions: %w", err)
	}
	if len(data.Hashes) != len(q.Hashes) {
		return Evictions{}, fmt.Errorf("fleet: evictions: backend answered %d hashes, want %d", len(data.Hashes), len(q.Hashes))
	}
	if m := data.Malformed; len(m) > 0 {
		return Evictions{}, fmt.Errorf("fleet: evictions: %w: %d fields are not numbers, the first %q of %q", ErrMalformedStats, len(m), m[0].Field, m[0].Key)
	}
	var prev int64
	havePrev := false
	for i, fields := range data.Hashes {
		v, ok := int64(0), false
		for _, f := range fields {
			if f.Name == fieldEvicted {
				v, ok = f.Value, true
			}
		}
		if i > 0 {
			p := &out.Series[i-1]
			p.At = first.Add(time.Duration(i-1) * step)
			if ok {
				p.Sampled, out.Sampled = true, true
				if havePrev {
					p.Evicted = v - prev
					if p.Evicted < 0 { // the counter restarted
						p.Evicted = v
					}
					out.Evicted += p.Evicted
				}
			}
		}
		if ok {
			prev, havePrev = v, true
		}
	}
	return out, nil
}
