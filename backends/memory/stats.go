package memory

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk/driver/stats"
)

var _ stats.Counters = (*Backend)(nil)

// MaxStatsKeys bounds the statistics keys a Backend keeps (hashes, sorted
// sets, distinct-member counters and lists together). Expired keys are deleted at every flush; a flush
// that would create a key beyond the bound fails with ErrStatsFull and
// applies nothing.
const MaxStatsKeys = 100_000

// ErrStatsFull is FlushStats' error when MaxStatsKeys live keys exist.
var ErrStatsFull = errors.New("memory: statistics full (MaxStatsKeys live keys)")

// statsStore is the backend's statistics: hashes and sorted sets of
// counters, distinct-member counters and lists, each expiring at its own
// instant. The zero value is empty.
type statsStore struct {
	mu   sync.Mutex
	keys map[string]*statsKey
}

type statsKey struct {
	fields map[string]int64
	set    *uniqueSet // a stats.Unique key
	list   []string   // a stats.Log key
	exp    time.Time
}

// FlushStats applies b in one step, under one lock.
func (b *Backend) FlushStats(ctx context.Context, batch stats.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := b.clock.Now().Round(0)
	st := &b.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.keys == nil {
		st.keys = make(map[string]*statsKey)
	}
	for k, v := range st.keys {
		if !now.Before(v.exp) {
			delete(st.keys, k)
		}
	}
	fresh := 0
	for _, h := range batch.Hashes {
		if st.keys[h.Key] == nil {
			fresh++
		}
	}
	for _, t := range batch.Tops {
		if st.keys[t.Key] == nil {
			fresh++
		}
	}
	for _, u := range batch.Uniques {
		if st.keys[u.Key] == nil {
			fresh++
		}
	}
	for _, l := range batch.Logs {
		if st.keys[l.Key] == nil {
			fresh++
		}
	}
	if len(st.keys)+fresh > MaxStatsKeys {
		return ErrStatsFull
	}
	get := func(key string, exp time.Time) *statsKey {
		k := st.keys[key]
		if k == nil {
			k = &statsKey{fields: map[string]int64{}}
			st.keys[key] = k
		}
		k.exp = exp
		return k
	}
	for _, h := range batch.Hashes {
		k := get(h.Key, h.ExpireAt)
		for _, f := range h.Incr {
			k.fields[f.Name] += f.Value
		}
		for _, f := range h.Set {
			k.fields[f.Name] = f.Value
		}
	}
	for _, t := range batch.Tops {
		k := get(t.Key, t.ExpireAt)
		for _, f := range t.Incr {
			k.fields[f.Name] += f.Value
		}
		if t.Keep > 0 && len(k.fields) > t.Keep {
			for _, f := range sortedFields(k.fields)[t.Keep:] {
				delete(k.fields, f.Name)
			}
		}
	}
	for _, u := range batch.Uniques {
		k := get(u.Key, u.ExpireAt)
		if k.set == nil {
			k.set = &uniqueSet{}
		}
		for _, m := range u.Add {
			k.set.add(uniqueHash(m))
		}
	}
	for _, l := range batch.Logs {
		k := get(l.Key, l.ExpireAt)
		k.list = append(k.list, l.Append...)
		if l.Keep > 0 && len(k.list) > l.Keep {
			k.list = append(k.list[:0:0], k.list[len(k.list)-l.Keep:]...)
		}
	}
	for k, v := range st.keys {
		if !now.Before(v.exp) {
			delete(st.keys, k)
		}
	}
	return nil
}

// ReadStats reads the live keys q names.
func (b *Backend) ReadStats(ctx context.Context, q stats.Query) (stats.Data, error) {
	if err := ctx.Err(); err != nil {
		return stats.Data{}, err
	}
	now := b.clock.Now().Round(0)
	out := stats.Data{Hashes: make([][]stats.Field, len(q.Hashes)), Tops: make([][]stats.Field, len(q.Tops)),
		Uniques: make([]int64, len(q.Uniques)), Logs: make([][]string, len(q.Logs))}
	st := &b.stats
	st.mu.Lock()
	defer st.mu.Unlock()
	live := func(key string) *statsKey {
		k := st.keys[key]
		if k == nil || !now.Before(k.exp) {
			return nil
		}
		return k
	}
	for i, key := range q.Hashes {
		if k := live(key); k != nil {
			for f, v := range k.fields {
				out.Hashes[i] = append(out.Hashes[i], stats.Field{Name: f, Value: v})
			}
		}
	}
	for i, key := range q.Tops {
		if k := live(key); k != nil {
			fs := sortedFields(k.fields)
			if q.TopN > 0 && len(fs) > q.TopN {
				fs = fs[:q.TopN]
			}
			out.Tops[i] = fs
		}
	}
	for i, group := range q.Uniques {
		sets := make([]*uniqueSet, 0, len(group))
		for _, key := range group {
			if k := live(key); k != nil {
				sets = append(sets, k.set)
			}
		}
		out.Uniques[i] = uniqueCount(sets)
	}
	for i, key := range q.Logs {
		if k := live(key); k != nil && len(k.list) > 0 {
			out.Logs[i] = slices.Clone(k.list)
		}
	}
	return out, nil
}

// sortedFields returns m's fields highest value first (ties: by name,
// descending, as Redis ranks a sorted set in reverse).
func sortedFields(m map[string]int64) []stats.Field {
	fs := make([]stats.Field, 0, len(m))
	for f, v := range m {
		fs = append(fs, stats.Field{Name: f, Value: v})
	}
	slices.SortFunc(fs, func(a, b stats.Field) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return cmp.Compare(b.Name, a.Name)
	})
	return fs
}
