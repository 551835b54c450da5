// Package bounded holds Map, the bounded cache the decision path keeps
// per process: a map safe for concurrent use that empties when a new key
// would take it past its bound, and refills from the keys in use. The
// redis backend's rule specifications (each rule's, and each policy's
// as last seen), fast scripts and calendar boundaries, and a policy's
// quiet spans, are kept in one.
package bounded

import "sync"

// Map maps K to V, at most the max each Put is given: a Put of a new key
// into a full Map empties it first. Reads take a read lock only. The
// zero Map is empty and ready. Safe for concurrent use.
type Map[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

// Get returns k's value, and whether it is there.
func (c *Map[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

// Put sets k's value; when k is new and the Map holds max keys, it empties
// the Map first.
func (c *Map[K, V]) Put(k K, v V, max int) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[K]V)
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= max {
		clear(c.m)
	}
	c.m[k] = v
	c.mu.Unlock()
}

// Len returns the number of keys held.
func (c *Map[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
