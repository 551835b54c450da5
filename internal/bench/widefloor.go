package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/bench/scripts"
)

// wideFloorMax bounds the attempts of one coalesced wide-floor call, as
// the backend's batchAttempts bounds a coalesced script's.
const wideFloorMax = 128

// wideFloor is the floor of a decision on a wide root (scripts.WideFloor)
// for Config.WideFloor: each of cfg.Subjects subjects has a root key and
// a hash of cfg.Values fields (pre-filled, as -prefill leaves the policy's
// subjects), and a decision is one attempt on a random subject's root and
// field.
type wideFloor struct {
	c      goredis.UniversalClient
	script *goredis.Script
	keys   [][]string // per subject: root, hash
	fields []string
	// field and root are the values written: about a section with its
	// trailer, and a wide root holding one entry and the marker.
	field, root string
	co          floorCoalescer
}

// newWideFloor returns the wide floor of cfg, its hashes pre-filled
// (pipelines of HSET, then the root) and the script loaded.
func newWideFloor(ctx context.Context, c goredis.UniversalClient, cfg Config) (*wideFloor, error) {
	f := &wideFloor{c: c, script: goredis.NewScript(scripts.WideFloor),
		field: strings.Repeat("f", 70), root: strings.Repeat("r", 40), co: floorCoalescer{max: 2}}
	for _, k := range scriptKeys(cfg, "wide", 1) {
		f.keys = append(f.keys, []string{k[0], k[0] + "%w"})
	}
	for v := range cfg.Values {
		f.fields = append(f.fields, "c"+strconv.Itoa(v))
	}
	if err := forEachMaster(ctx, c, func(ctx context.Context, m *goredis.Client) error {
		return m.ScriptLoad(ctx, scripts.WideFloor).Err()
	}); err != nil {
		return nil, fmt.Errorf("bench: SCRIPT LOAD: %w", err)
	}
	p := c.Pipeline()
	n := 0
	for _, k := range f.keys {
		for at := 0; at < len(f.fields); at += 500 {
			var args []any
			for _, fl := range f.fields[at:min(at+500, len(f.fields))] {
				args = append(args, fl, f.field)
			}
			p.HSet(ctx, k[1], args...)
			n++
		}
		p.Set(ctx, k[0], f.root, 0)
		if n++; n >= 200 {
			if _, err := p.Exec(ctx); err != nil {
				return nil, fmt.Errorf("bench: wide floor pre-fill: %w", err)
			}
			n = 0
		}
	}
	if _, err := p.Exec(ctx); err != nil && n > 0 {
		return nil, fmt.Errorf("bench: wide floor pre-fill: %w", err)
	}
	return f, nil
}

// pick returns a random subject's keys and field.
func (f *wideFloor) pick(rng *rand.Rand) floorCall {
	k := f.keys[rng.IntN(len(f.keys))]
	return floorCall{root: k[0], hash: k[1], field: f.fields[rng.IntN(len(f.fields))]}
}

// run sends calls in one EVALSHA (EVAL after NOSCRIPT).
func (f *wideFloor) run(ctx context.Context, calls []*floorCall) error {
	keys := make([]string, 0, 2*len(calls))
	argv := make([]any, 0, 3+len(calls))
	argv = append(argv, 60000, f.field, f.root)
	for _, c := range calls {
		keys = append(keys, c.root, c.hash)
		argv = append(argv, c.field)
	}
	return f.script.Run(ctx, f.c, keys, argv...).Err()
}

// one decides one attempt per call, in an EVALSHA of its own.
func (f *wideFloor) one() decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		c := f.pick(rng)
		var o outcome
		o.add(f.run(ctx, []*floorCall{&c}), true, false)
		return o
	}
}

// coalesced decides one attempt per call, the concurrent calls sharing
// EVALSHAs (floorCoalescer).
func (f *wideFloor) coalesced() decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		c := f.pick(rng)
		c.wake = make(chan struct{}, 1)
		var o outcome
		o.add(f.co.do(ctx, f.run, &c), true, false)
		return o
	}
}

// floorCall is one attempt of the wide floor (its keys and field) or of
// coalescedRaw (its counters), and, coalesced, its outcome.
type floorCall struct {
	root, hash, field string
	keys              []string      // coalescedRaw's: the subject's counters
	wake              chan struct{} // capacity 1: done, or a slot may be free
	done              bool          // under floorCoalescer.mu
	err               error
}

// floorCoalescer sends concurrent calls as multi-attempt EVALSHAs, at
// most max in flight, as redis.Options.Coalesce does (coalesce.go of
// backends/redis, reduced to its core): a call queues; a call that
// finds a slot free sends the queue's head (up to wideFloorMax attempts,
// its own among them) and hands each caller its outcome, then wakes the
// first still queued to send the rest.
type floorCoalescer struct {
	max int

	mu     sync.Mutex
	queue  []*floorCall
	flying int
}

func (q *floorCoalescer) do(ctx context.Context, run func(context.Context, []*floorCall) error, c *floorCall) error {
	q.mu.Lock()
	q.queue = append(q.queue, c)
	for !c.done {
		if q.flying < q.max && len(q.queue) > 0 {
			n := min(len(q.queue), wideFloorMax)
			batch := append([]*floorCall(nil), q.queue[:n]...)
			q.queue = q.queue[n:]
			q.flying++
			q.mu.Unlock()
			err := run(ctx, batch)
			q.mu.Lock()
			q.flying--
			for _, b := range batch {
				b.done, b.err = true, err
				if b != c {
					select {
					case b.wake <- struct{}{}:
					default:
					}
				}
			}
			if len(q.queue) > 0 {
				select {
				case q.queue[0].wake <- struct{}{}:
				default:
				}
			}
			continue
		}
		q.mu.Unlock()
		<-c.wake
		q.mu.Lock()
	}
	q.mu.Unlock()
	return c.err
}
