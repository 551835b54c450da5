package redis

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// Eviction is what the backend does on a server that may evict its keys
// (Options.Eviction).
type Eviction uint8

const (
	// EvictionWarn decides on any server, and reports a master that may
	// evict freqcap's keys as a warning: Describe (and so the console's
	// overview and serve's /readyz), `freqcap detect`.
	EvictionWarn Eviction = iota
	// EvictionRefuse refuses to decide while some master may evict
	// freqcap's keys (a maxmemory with a maxmemory-policy other than
	// noeviction) or does not say (INFO memory or INFO stats refused):
	// every decision fails with an error wrapping ErrEvictionPolicy,
	// which names the master, its policy and the fix.
	EvictionRefuse
)

// String returns "warn" or "refuse".
func (e Eviction) String() string {
	switch e {
	case EvictionWarn:
		return "warn"
	case EvictionRefuse:
		return "refuse"
	}
	return fmt.Sprintf("Eviction(%d)", uint8(e))
}

// ParseEviction parses "warn" or "refuse", ignoring case.
func ParseEviction(s string) (Eviction, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "warn":
		return EvictionWarn, nil
	case "refuse":
		return EvictionRefuse, nil
	}
	return 0, fmt.Errorf("redis: unknown eviction mode %q (want warn or refuse)", s)
}

// ErrEvictionPolicy is the error (matched with errors.Is) of a decision
// refused under EvictionRefuse: some master may evict freqcap's keys, or
// would not say. The error's text names the master, its maxmemory and
// maxmemory-policy, and the fix: CONFIG SET maxmemory-policy noeviction.
// It wraps driver.ErrRefused (driver.ErrRefused).
var ErrEvictionPolicy = fmt.Errorf("%w: the server may evict freqcap's keys (maxmemory-policy is not noeviction)", driver.ErrRefused)

// DefaultEvictionRecheck is Options.EvictionRecheck when it is 0.
const DefaultEvictionRecheck = 10 * time.Second

// evictionVerdict is the outcome of one memory probe under
// EvictionRefuse: err is nil where every master is safe.
type evictionVerdict struct {
	at  time.Time
	err error
}

// evictionGate holds the latest verdict, and a semaphore held by the
// caller that probes again.
type evictionGate struct {
	sem     chan struct{}
	verdict atomic.Pointer[evictionVerdict]
}

// deciding returns the engine for a decision (decide, batches): under
// EvictionRefuse it first checks the masters' memory (checkEviction).
func (b *Backend) deciding(ctx context.Context) (engine, error) {
	if err := b.checkEviction(ctx); err != nil {
		return nil, err
	}
	return b.engine(ctx)
}

// checkEviction returns nil under EvictionWarn; under EvictionRefuse, the
// verdict of the latest memory probe, probing first when there is none
// or it is older than Options.EvictionRecheck. One caller probes at a
// time: while it does, the others go on with the previous verdict (so a
// change on the server is seen within EvictionRecheck plus one probe's
// round trip). A probe that fails (no reply) is not cached: the call
// fails with its error, and the next call probes again.
func (b *Backend) checkEviction(ctx context.Context) error {
	if b.opts.Eviction != EvictionRefuse {
		return nil
	}
	g := &b.evict
	v := g.verdict.Load()
	if v != nil && time.Since(v.at) < b.opts.EvictionRecheck {
		return v.err
	}
	if v != nil { // stale: whoever gets the semaphore probes, the others go on
		select {
		case g.sem <- struct{}{}:
		default:
			return v.err
		}
	} else { // no verdict yet: wait for the first probe
		select {
		case g.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { <-g.sem }()
	if nv := g.verdict.Load(); nv != v && time.Since(nv.at) < b.opts.EvictionRecheck {
		return nv.err // another caller probed while this one waited
	}
	ms, err := capability.ProbeMemory(ctx, b.c)
	if err != nil {
		return fmt.Errorf("eviction check: %w", err)
	}
	nv := &evictionVerdict{at: time.Now(), err: evictionRefusal(ms)}
	g.verdict.Store(nv)
	return nv.err
}

// evictionRefusal is ErrEvictionPolicy, with what ms's risks say, when some master
// may evict or would not say; else nil.
func evictionRefusal(ms []capability.Memory) error {
	risks := capability.Risks(ms)
	if len(risks) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; or set Options.Eviction to EvictionWarn to decide anyway", ErrEvictionPolicy, strings.Join(risks, "; "))
}

// Memory reads the memory of every master now (INFO memory and INFO
// stats, one pipelined round trip each): maxmemory, maxmemory-policy,
// used_memory and evicted_keys, sorted by address. Describe reports it,
// with a warning for each master that may evict freqcap's keys.
func (b *Backend) Memory(ctx context.Context) ([]capability.Memory, error) {
	ms, err := capability.ProbeMemory(ctx, b.c)
	if err != nil {
		return nil, fmt.Errorf("redis: memory: %w", err)
	}
	return ms, nil
}

var _ stats.Evictions = (*Backend)(nil)

// EvictedKeys is the sum of every master's evicted_keys (INFO stats):
// what a fleet.Recorder samples at each flush to chart evictions beside
// decisions (stats.Evictions). A master that refuses INFO counts 0.
func (b *Backend) EvictedKeys(ctx context.Context) (int64, error) {
	ms, err := b.Memory(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		n += m.EvictedKeys
	}
	return n, nil
}

// describeMemory adds every master's memory to d, read now, and a
// warning for each that may evict freqcap's keys; under EvictionRefuse
// the warning says decisions are refused.
func (b *Backend) describeMemory(ctx context.Context, d *driver.Description) error {
	ms, err := b.Memory(ctx)
	if err != nil {
		return err
	}
	d.Memory = d.Memory[:0]
	for _, m := range ms {
		d.Memory = append(d.Memory, m.Driver())
	}
	d.Warnings = capability.Risks(ms)
	if len(d.Warnings) > 0 && b.opts.Eviction == EvictionRefuse {
		d.Warnings = append(d.Warnings, "decisions are refused until every master's maxmemory-policy is noeviction (Options.Eviction is EvictionRefuse)")
	}
	return nil
}

// Ready reports whether the backend can decide now: every master answers
// PING and, under EvictionRefuse, none may evict freqcap's keys (the
// error then wraps ErrEvictionPolicy). serve's /readyz uses it
// (cmd/freqcap).
func (b *Backend) Ready(ctx context.Context) error {
	var err error
	if cc, ok := b.c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return n.Ping(ctx).Err()
		})
	} else {
		err = b.c.Ping(ctx).Err()
	}
	if err == nil {
		err = b.checkEviction(ctx)
	}
	if err != nil {
		return fmt.Errorf("redis: ready: %w", err)
	}
	return nil
}
