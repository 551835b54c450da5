package bounded

import (
	"sync"
	"testing"
)

// TestMap: a Put of a new key into a full Map empties it first; a Put of
// a key it holds replaces the value without emptying; concurrent use is
// race-free (go test -race).
func TestMap(t *testing.T) {
	var c Map[int, string]
	if _, ok := c.Get(1); ok || c.Len() != 0 {
		t.Fatalf("zero Map: Get(1) found, or Len %d", c.Len())
	}
	for i := range 3 {
		c.Put(i, "v", 3)
	}
	c.Put(2, "w", 3) // held: replaced, nothing dropped
	if v, ok := c.Get(2); !ok || v != "w" || c.Len() != 3 {
		t.Fatalf("after replacing 2: Get(2) = %q, %v; Len %d, want w, true, 3", v, ok, c.Len())
	}
	c.Put(9, "x", 3) // new into a full Map: emptied first
	if _, ok := c.Get(0); ok || c.Len() != 1 {
		t.Fatalf("after a new key into a full Map: Get(0) found or Len %d, want emptied to 1", c.Len())
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c.Put(g*1000+i, "y", 64)
				c.Get(i)
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > 64 {
		t.Errorf("Len = %d after concurrent Puts, want at most 64", n)
	}
}
