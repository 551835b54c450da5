package sdk

import (
	"container/list"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HotDenyStats describes a policy's hot-deny cache in one Limiter
// (Admin.HotDenyStats).
type HotDenyStats struct {
	// Size is the cache's capacity (0: the policy has no hot-deny cache,
	// or this Limiter has not used it yet).
	Size int
	// Entries is the number of denials held now (at most Size; expired
	// ones count until they are looked up or pushed out).
	Entries int
	// Hits counts requests answered from the cache; Misses those that
	// looked it up and went to the backend. Attempts with an idempotency
	// key never look it up.
	Hits, Misses uint64
	// Evictions counts denials pushed out to make room.
	Evictions uint64
}

// HotDenyStats reports p's hot-deny cache in the Limiter ad administers
// (e.g. for `freqcap bench`).
func (ad *Admin) HotDenyStats(p *Policy) HotDenyStats {
	h := ad.lim().hotCacheOf(p)
	if h == nil {
		return HotDenyStats{}
	}
	return h.stats()
}

// hotSlot is the cache of one *Policy, stored under its name: a new
// Policy value with the same name (a reload) replaces the cache, so that
// the Limiter holds one cache per policy name.
type hotSlot struct {
	p *Policy
	c *hotCache
}

// hotCacheOf returns p's cache in l, or nil if there is none (yet).
func (l *Limiter) hotCacheOf(p *Policy) *hotCache {
	if p == nil || p.hotDeny <= 0 {
		return nil
	}
	if v, ok := l.hot.Load(p.name); ok {
		if s := v.(*hotSlot); s.p == p {
			return s.c
		}
	}
	return nil
}

// hotCacheFor returns p's cache in l, creating it on first use; nil when
// p has no hot-deny cache.
func (l *Limiter) hotCacheFor(p *Policy) *hotCache {
	if p == nil || p.hotDeny <= 0 {
		return nil
	}
	var fresh *hotSlot
	for {
		v, ok := l.hot.Load(p.name)
		if ok {
			s := v.(*hotSlot)
			if s.p == p {
				return s.c
			}
		}
		if fresh == nil {
			fresh = &hotSlot{p: p, c: newHotCache(p.hotDeny)}
		}
		if !ok {
			if _, loaded := l.hot.LoadOrStore(p.name, fresh); !loaded {
				return fresh.c
			}
			continue
		}
		if l.hot.CompareAndSwap(p.name, v, fresh) {
			return fresh.c
		}
	}
}

// hotKey names a subject's entry: its rule keys, which hold the prefix,
// the shard values, the policy and every other dimension's value (keys
// contain no spaces).
func hotKey(res resolved) string {
	var b strings.Builder
	for i, r := range res.rules {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Key)
	}
	return b.String()
}

// hotCache is a bounded map from subject to its latest denial, split into
// independently locked shards by the subject's shard values (so that a
// Reset finds all of a subject's entries in one shard), each an LRU list.
type hotCache struct {
	seed   maphash.Seed
	shards []*hotShard
	size   int

	hits, misses, evictions atomic.Uint64
}

type hotShard struct {
	mu  sync.Mutex
	cap int
	m   map[string]*list.Element // of *hotEntry
	lru list.List                // most recently used first
}

// hotEntry is one cached denial: for cost or more, denied until until.
// at is the Limiter's clock when the denied call started (a lower bound
// of the backend's decision time, so until is never late); answered its
// clock when the answer came back (an upper bound: a hit's At, advanced
// from it, is never later than the hit).
type hotEntry struct {
	key      string
	at       time.Time
	answered time.Time
	until    time.Time
	cost     int64
	d        Decision
}

// maxHotShards bounds the number of shards of a cache.
const maxHotShards = 16

func newHotCache(size int) *hotCache {
	n := min(size, maxHotShards)
	c := &hotCache{seed: maphash.MakeSeed(), shards: make([]*hotShard, n), size: size}
	for i := range c.shards {
		cp := size / n
		if i < size%n {
			cp++
		}
		c.shards[i] = &hotShard{cap: cp, m: make(map[string]*list.Element)}
	}
	return c
}

func (c *hotCache) shard(base string) *hotShard {
	return c.shards[maphash.String(c.seed, base)%uint64(len(c.shards))]
}

// get returns the cached denial of key for cost, as of now.
func (c *hotCache) get(base, key string, cost int64, now time.Time) (Decision, bool) {
	s := c.shard(base)
	s.mu.Lock()
	el := s.m[key]
	if el == nil {
		s.mu.Unlock()
		c.misses.Add(1)
		return Decision{}, false
	}
	e := el.Value.(*hotEntry)
	if !now.Before(e.until) {
		s.lru.Remove(el)
		delete(s.m, key)
		s.mu.Unlock()
		c.misses.Add(1)
		return Decision{}, false
	}
	if cost < e.cost {
		// A smaller cost might be admitted: ask the backend.
		s.mu.Unlock()
		c.misses.Add(1)
		return Decision{}, false
	}
	s.lru.MoveToFront(el)
	d := e.decision(now)
	s.mu.Unlock()
	c.hits.Add(1)
	return d, true
}

// decision returns the cached denial as of now: Cached, its timings
// reduced by the time since its call started, its At advanced by the
// time since it was answered.
func (e *hotEntry) decision(now time.Time) Decision {
	el := now.Sub(e.at)
	d := e.d
	d.Cached = true
	d.Durable, d.Replicas = false, 0 // nothing written now
	d.At = d.At.Add(now.Sub(e.answered))
	d.RetryAfter = e.until.Sub(now)
	d.Denied = slices.Clone(d.Denied)
	d.Rules = slices.Clone(d.Rules)
	for i := range d.Rules {
		r := &d.Rules[i]
		r.RetryAfter = max(0, r.RetryAfter-el)
		r.ResetAfter = max(0, r.ResetAfter-el)
	}
	return d
}

// put caches d, a denial for cost of a call started at at and answered
// at answered.
func (c *hotCache) put(base, key string, cost int64, at, answered time.Time, d Decision) {
	d.Denied = slices.Clone(d.Denied)
	d.Rules = slices.Clone(d.Rules)
	e := &hotEntry{key: key, at: at, answered: answered, until: at.Add(d.RetryAfter), cost: cost, d: d}
	s := c.shard(base)
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.m[key]; el != nil {
		el.Value = e
		s.lru.MoveToFront(el)
		return
	}
	for s.lru.Len() >= s.cap {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.m, old.Value.(*hotEntry).key)
		c.evictions.Add(1)
	}
	s.m[key] = s.lru.PushFront(e)
}

// evict forgets key.
func (c *hotCache) evict(base, key string) {
	s := c.shard(base)
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.m[key]; el != nil {
		s.lru.Remove(el)
		delete(s.m, key)
	}
}

// evictSubject forgets every entry whose keys start with base: all the
// entries of one set of shard values.
func (c *hotCache) evictSubject(base string) {
	s := c.shard(base)
	s.mu.Lock()
	defer s.mu.Unlock()
	for el := s.lru.Front(); el != nil; {
		next := el.Next()
		if k := el.Value.(*hotEntry).key; strings.HasPrefix(k, base) {
			s.lru.Remove(el)
			delete(s.m, k)
		}
		el = next
	}
}

func (c *hotCache) stats() HotDenyStats {
	st := HotDenyStats{Size: c.size, Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load()}
	for _, s := range c.shards {
		s.mu.Lock()
		st.Entries += s.lru.Len()
		s.mu.Unlock()
	}
	return st
}
