package bench

import (
	"cmp"

	goredis "github.com/redis/go-redis/v9"

	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/freqcap/freqcap/internal/bench/scripts"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// decideFunc makes one call (one or more decisions) for a bench worker.
type decideFunc func(context.Context, *rand.Rand) outcome

// outcome is what one call decided.
type outcome struct {
	n, allowed, cached, errs int64
	err                      error // the first error
}

// merge adds the counts of o.
func (o *outcome) merge(p outcome) {
	o.n += p.n
	o.allowed += p.allowed
	o.cached += p.cached
	o.errs += p.errs
	if o.err == nil {
		o.err = p.err
	}
}

// add counts one decision: failed (err), else allowed or denied, and
// whether the hot-deny cache answered it.
func (o *outcome) add(err error, allowed, cached bool) {
	o.n++
	switch {
	case err != nil:
		o.errs++
		if o.err == nil {
			o.err = err
		}
	case allowed:
		o.allowed++
	}
	if cached {
		o.cached++
	}
}

// limiter is what the runs call: an *sdk.Limiter in-process, or a
// *client.Client through freqcap serve.
type limiter interface {
	Allow(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error)
	Take(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error)
	TakeBatch(ctx context.Context, p *sdk.Policy, as []sdk.Attempt) []sdk.BatchResult
}

// allowOne decides one random subject per call with Allow or, for a
// policy whose decisions follow the recipient's zone (quiet hours, a
// calendar rule), with Take of an attempt carrying the subject's zone
// (benchZones, one per subject).
func allowOne(lim limiter, p *sdk.Policy, gen *subjects) decideFunc {
	if zoned(p) {
		return func(ctx context.Context, rng *rand.Rand) outcome {
			var o outcome
			s, z := gen.pickZoned(rng)
			d, err := lim.Take(ctx, p, sdk.Attempt{Subject: s, Zone: z})
			o.add(err, d.Allowed, d.Cached)
			return o
		}
	}
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		d, err := lim.Allow(ctx, p, gen.pick(rng))
		o.add(err, d.Allowed, d.Cached)
		return o
	}
}

// benchZones are the recipients' zones of zoned policies: subject j is in
// benchZones[j % 8]. Every one loads (cmd/freqcap, the only importer,
// embeds time/tzdata): one that does not is a bug, not a smaller set.
var benchZones = func() []*time.Location {
	names := []string{"Europe/Berlin", "America/New_York", "Asia/Kolkata", "Asia/Tokyo", "America/Sao_Paulo", "Australia/Sydney", "Africa/Lagos", "America/Los_Angeles"}
	out := make([]*time.Location, len(names))
	for i, n := range names {
		z, err := sdk.LoadZone(n)
		if err != nil {
			panic(fmt.Sprintf("bench: %v", err))
		}
		out[i] = z
	}
	return out
}()

// zoned reports whether p's decisions follow the recipient's zone.
func zoned(p *sdk.Policy) bool {
	if loc, _ := p.QuietHours(); loc != nil {
		return true
	}
	for _, r := range p.Rules() {
		if r.Calendar != 0 {
			return true
		}
	}
	return false
}

// scriptKeys returns, for each of cfg.Subjects subjects, n keys under the
// subject's hash tag: prefix:{i}:name (n = 1) or prefix:{i}:name.k.
func scriptKeys(cfg Config, name string, n int) [][]string {
	keys := make([][]string, cfg.Subjects)
	for i := range keys {
		base := cfg.Prefix + ":{" + strconv.Itoa(i) + "}:" + name
		if n == 1 {
			keys[i] = []string{base}
			continue
		}
		for k := range n {
			keys[i] = append(keys[i], base+"."+strconv.Itoa(k+1))
		}
	}
	return keys
}

// scriptOne runs script src on the nkeys keys of a random subject per call
// (ARGV[1]: a TTL in ms), as the backend runs take.lua: EVALSHA, EVAL
// after NOSCRIPT.
func scriptOne(c goredis.UniversalClient, src string, cfg Config, name string, nkeys int) decideFunc {
	keys := scriptKeys(cfg, name, nkeys)
	script := goredis.NewScript(src)
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		o.add(script.Run(ctx, c, keys[rng.IntN(len(keys))], 60000).Err(), true, false)
		return o
	}
}

// coalescedRaw runs raw(nkeys) coalesced: the counters of every queued
// call in one EVALSHA of scripts.Raw (its loop covers every key), at most
// 2 in flight (floorCoalescer, as redis.DefaultCoalesce): the floor of a
// coalesced decision, as raw(R) is of one EVALSHA per decision. A
// standalone server's: a batch's keys span hash slots.
func coalescedRaw(c goredis.UniversalClient, cfg Config, nkeys int) decideFunc {
	keys := scriptKeys(cfg, "craw", nkeys)
	script := goredis.NewScript(scripts.Raw)
	co := &floorCoalescer{max: 2}
	run := func(ctx context.Context, calls []*floorCall) error {
		ks := make([]string, 0, nkeys*len(calls))
		for _, fc := range calls {
			ks = append(ks, fc.keys...)
		}
		return script.Run(ctx, c, ks, 60000).Err()
	}
	return func(ctx context.Context, rng *rand.Rand) outcome {
		fc := floorCall{keys: keys[rng.IntN(len(keys))], wake: make(chan struct{}, 1)}
		var o outcome
		o.add(co.do(ctx, run, &fc), true, false)
		return o
	}
}

// packedFloor runs scripts.PackedFloor for r rules on the packed key of a
// random subject per call.
func packedFloor(c goredis.UniversalClient, cfg Config, r int) decideFunc {
	keys := scriptKeys(cfg, "packed"+strconv.Itoa(r), 1)
	script := goredis.NewScript(scripts.PackedFloor)
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		o.add(script.Run(ctx, c, keys[rng.IntN(len(keys))], 60000, r).Err(), true, false)
		return o
	}
}

// logFloor runs scripts.LogFloor with windows (the longest first) on the
// sorted set of a random subject per call.
func logFloor(c goredis.UniversalClient, cfg Config, windows []time.Duration) decideFunc {
	keys := scriptKeys(cfg, "log"+strconv.Itoa(len(windows)), 1)
	script := goredis.NewScript(scripts.LogFloor)
	args := make([]any, len(windows))
	for i, w := range windows {
		args[i] = w.Milliseconds()
	}
	return func(ctx context.Context, rng *rand.Rand) outcome {
		var o outcome
		o.add(script.Run(ctx, c, keys[rng.IntN(len(keys))], args...).Err(), true, false)
		return o
	}
}

// scriptPipelined runs n EVALSHA of script src (ARGV[1]: a TTL in ms), each
// on the nkeys keys of a random subject, per call, in one pipeline (one per
// master on a cluster), as TakeBatch sends take.lua. A pipeline sends
// EVALSHA only, so it loads src on every master first.
func scriptPipelined(ctx context.Context, c goredis.UniversalClient, src string, cfg Config, name string, nkeys, n int) (decideFunc, error) {
	if err := forEachMaster(ctx, c, func(ctx context.Context, m *goredis.Client) error {
		return m.ScriptLoad(ctx, src).Err()
	}); err != nil {
		return nil, fmt.Errorf("bench: SCRIPT LOAD: %w", err)
	}
	keys := scriptKeys(cfg, name, nkeys)
	script := goredis.NewScript(src)
	return func(ctx context.Context, rng *rand.Rand) outcome {
		cmds, _ := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for range n {
				script.EvalSha(ctx, p, keys[rng.IntN(len(keys))], 60000)
			}
			return nil
		})
		var o outcome
		for _, cmd := range cmds {
			o.add(cmd.Err(), true, false)
		}
		return o
	}, nil
}

// takeBatch decides n random subjects per call with one TakeBatch.
func takeBatch(lim limiter, p *sdk.Policy, gen *subjects, n int) decideFunc {
	return func(ctx context.Context, rng *rand.Rand) outcome {
		as := make([]sdk.Attempt, n)
		for i := range as {
			as[i].Subject = gen.pick(rng)
		}
		var o outcome
		for _, r := range lim.TakeBatch(ctx, p, as) {
			o.add(r.Err, r.Decision.Allowed, r.Decision.Cached)
		}
		return o
	}
}

// hotPolicies returns p without and with a hot-deny cache of size entries:
// the same name, rules and failure mode, and the default denial trail.
func hotPolicies(p *sdk.Policy, size int) (plain, cached *sdk.Policy, err error) {
	var opts []sdk.PolicyOption
	if p.FailOpen() {
		opts = append(opts, sdk.WithFailOpen())
	}
	if plain, err = sdk.NewPolicy(p.Name(), p.Rules(), opts...); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if cached, err = sdk.NewPolicy(p.Name(), p.Rules(), append(opts, sdk.WithHotDenyCache(size))...); err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return plain, cached, nil
}

// subjects picks random subjects: shard dimensions from n values, every
// other dimension from m values.
type subjects struct {
	shard, other []string // dimension names
	shardVals    [][]string
	otherVals    []string
}

func newSubjects(p *sdk.Policy, n, m int) *subjects {
	s := &subjects{shard: p.ShardBy()}
	isShard := map[string]bool{}
	for _, d := range s.shard {
		isShard[d] = true
	}
	for _, d := range p.Dimensions() {
		if !isShard[d] {
			s.other = append(s.other, d)
		}
	}
	s.shardVals = make([][]string, len(s.shard))
	for i, d := range s.shard {
		s.shardVals[i] = make([]string, n)
		for j := range n {
			s.shardVals[i][j] = d + strconv.Itoa(j)
		}
	}
	for j := range m {
		s.otherVals = append(s.otherVals, sdk.Fingerprint("content "+strconv.Itoa(j)))
	}
	return s
}

func (s *subjects) pick(rng *rand.Rand) sdk.Subject {
	sub, _ := s.pickZoned(rng)
	return sub
}

// pickZoned is pick with the subject's zone (benchZones).
func (s *subjects) pickZoned(rng *rand.Rand) (sdk.Subject, *time.Location) {
	sub := make(sdk.Subject, len(s.shard)+len(s.other))
	j := rng.IntN(len(s.shardVals[0]))
	for i, d := range s.shard {
		sub[d] = s.shardVals[i][j]
	}
	for _, d := range s.other {
		sub[d] = s.otherVals[rng.IntN(len(s.otherVals))]
	}
	return sub, benchZones[j%len(benchZones)]
}

// subject returns the j-th subject with the k-th value (mod -values) of
// each other dimension: the memory run's k-th decision for subject j, so
// that a user receives several contents.
func (s *subjects) subject(j, k int) sdk.Subject {
	sub := make(sdk.Subject, len(s.shard)+len(s.other))
	for i, d := range s.shard {
		sub[d] = s.shardVals[i][j]
	}
	for _, d := range s.other {
		sub[d] = s.otherVals[k%len(s.otherVals)]
	}
	return sub
}

// logWindows returns the windows of policy's rules, the longest first, if
// they are all sliding logs above driver.LogLine on the same dimensions (one
// sorted set per subject; smaller logs are packed), else nil.
func logWindows(policy *sdk.Policy) []time.Duration {
	var ws []time.Duration
	rules := policy.Rules()
	for _, r := range rules {
		if r.Algorithm != driver.SlidingLog || r.Limit <= driver.LogLine || !slices.Equal(r.Dimensions, rules[0].Dimensions) {
			return nil
		}
		ws = append(ws, r.Window)
	}
	slices.SortFunc(ws, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return ws
}
