package memory

import (
	"container/heap"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// kind says which state an entry holds.
type kind uint8

const (
	kindFixed kind = iota + 1
	kindSliding
	kindLog
	kindGCRA
	kindTrail
	kindReservations
	kindIdem
	kindOverrides
	kindLink
	kindPerson
)

// kindOf maps an algorithm to its entry kind.
func kindOf(a driver.Algorithm) kind {
	switch a {
	case driver.FixedWindow:
		return kindFixed
	case driver.SlidingWindow:
		return kindSliding
	case driver.SlidingLog:
		return kindLog
	case driver.GCRA:
		return kindGCRA
	}
	return 0
}

// entry is one stored key. exp is when its state becomes worthless (equal
// to no state at all); the entry is deleted then, lazily or by a sweep.
type entry struct {
	key  string
	exp  time.Time
	idx  int // position in the shard's expiry heap
	kind kind
	// group is a rule state's dimension set key (driver.Rule.Group, ""
	// when the request gave none or the rule's own key), and written when
	// a take last stored it: what ListValues lists.
	group   string
	written time.Time

	fixed   fixedState
	sliding slidingState
	log     logState
	tat     time.Time
	// interval is the emission interval tat was stored at (GCRA): read
	// by a rule of another interval (its rate changed in code, under
	// the same keys), tat is rescaled to it (alg.GCRARescale): a slower
	// rate keeps the units it holds, a faster one the old rate's debt.
	interval     time.Duration
	trail        []driver.Denial // oldest first
	reservations map[string]*reservation
	idem         *driver.Result    // the stored result of an idempotent request
	overrides    []driver.Override // by ID (kindOverrides)
	link         *driver.Link      // an identity's link (kindLink)
	person       *person           // a person's links, zone and audit (kindPerson)
}

// shard is one independently locked part of the store: a map and a
// min-heap of its entries by expiry, so expired entries are found without
// scanning.
type shard struct {
	mu      sync.Mutex
	entries map[string]*entry
	heap    expHeap
}

func newShard() *shard { return &shard{entries: make(map[string]*entry)} }

// get returns the live entry under key, deleting an expired one.
func (s *shard) get(key string, now time.Time) *entry {
	e := s.entries[key]
	if e == nil {
		return nil
	}
	if !e.exp.After(now) {
		s.remove(e)
		return nil
	}
	return e
}

// put stores e (new or already stored) with expiry exp; an expiry at or
// before now deletes it.
func (s *shard) put(e *entry, exp time.Time, now time.Time) {
	stored := s.entries[e.key] == e
	if !exp.After(now) {
		if stored {
			s.remove(e)
		}
		return
	}
	e.exp = exp
	if stored {
		heap.Fix(&s.heap, e.idx)
		return
	}
	if old := s.entries[e.key]; old != nil {
		s.remove(old)
	}
	s.entries[e.key] = e
	heap.Push(&s.heap, e)
}

func (s *shard) remove(e *entry) {
	if s.entries[e.key] != e {
		return
	}
	delete(s.entries, e.key)
	heap.Remove(&s.heap, e.idx)
}

func (s *shard) del(key string) {
	if e := s.entries[key]; e != nil {
		s.remove(e)
	}
}

// sweep deletes up to limit expired entries (limit < 0: all), soonest
// expiry first, and reports how many it deleted.
func (s *shard) sweep(now time.Time, limit int) int {
	n := 0
	for len(s.heap) > 0 && !s.heap[0].exp.After(now) && (limit < 0 || n < limit) {
		s.remove(s.heap[0])
		n++
	}
	return n
}

// expHeap orders entries by expiry.
type expHeap []*entry

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return h[i].exp.Before(h[j].exp) }
func (h expHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *expHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *expHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
