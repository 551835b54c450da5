package capability

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Detector probes a server on first use and caches the Report. It is safe
// for concurrent use: concurrent first callers share one probe. Report is
// the method most callers want; Refresh re-probes (after a module was
// loaded, a failover, a resharding).
//
// A failed probe is not cached: the next call probes again. Nor does a
// report of a replica (Report.Writable) last: Report probes again on each
// call while the server is a replica (calls that wait on the same probe
// share it), so a replica promoted to master is used without Refresh.
type Detector struct {
	c   goredis.UniversalClient
	cfg Config
	// sem is held by whoever probes, so that one probe runs at a time.
	sem chan struct{}
	rep atomic.Pointer[Report]
}

// NewDetector returns a Detector for c that chooses with cfg. It does no
// I/O.
func NewDetector(c goredis.UniversalClient, cfg Config) *Detector {
	cfg.Forbid = append([]Feature(nil), cfg.Forbid...)
	return &Detector{c: c, cfg: cfg, sem: make(chan struct{}, 1)}
}

// Report returns the cached report, probing first if there is none yet.
func (d *Detector) Report(ctx context.Context) (*Report, error) {
	return d.get(ctx, false)
}

// Refresh probes again and caches the new report. On error the previous
// report stays cached.
func (d *Detector) Refresh(ctx context.Context) (*Report, error) {
	return d.get(ctx, true)
}

// Cached returns the cached report without probing: nil before the first
// successful probe.
func (d *Detector) Cached() *Report { return d.rep.Load() }

func (d *Detector) get(ctx context.Context, refresh bool) (*Report, error) {
	seen := d.rep.Load()
	if seen != nil && !refresh && seen.Writable() == nil {
		return seen, nil
	}
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.sem }()
	if r := d.rep.Load(); r != seen && !refresh {
		return r, nil // another caller probed while this one waited
	}
	r, err := Probe(ctx, d.c, d.cfg)
	if err != nil {
		return nil, err
	}
	d.rep.Store(r)
	return r, nil
}
