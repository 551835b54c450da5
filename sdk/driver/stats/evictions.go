package stats

import "context"

// Evictions is implemented by storage whose servers may evict keys under
// memory pressure (backends/redis). A fleet.Recorder samples it at each
// flush, so that the fleet's charts show evictions beside decisions.
type Evictions interface {
	// EvictedKeys returns how many keys the storage's servers evicted
	// since they started, summed over them (Redis: every master's
	// evicted_keys in INFO stats). It may go down when a server restarts.
	EvictedKeys(ctx context.Context) (int64, error)
}
