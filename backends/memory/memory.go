// Package memory is a freqcap backend that keeps all state in process
// memory: for tests, examples, single-process services and as the
// reference implementation of the semantics every backend shares (the
// algorithms' arithmetic is documented on driver.Rule).
//
// State is sharded by the Redis hash tag of its keys ("{...}"), so the
// keys of one request — which share a tag — are guarded by one mutex.
// Every entry carries the instant its state becomes worthless and is
// deleted then: lazily when read, a few at a time by every call on its
// shard, or all at once by Sweep. Memory is therefore bounded by the live
// state, without background goroutines.
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/sdk/driver"
)

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Peeker    = (*Backend)(nil)
	_ driver.Reserver  = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
	_ driver.Resetter  = (*Backend)(nil)
	_ driver.Describer = (*Backend)(nil)
	_ driver.Batcher   = (*Backend)(nil)
	_ driver.Clocked   = (*Backend)(nil)
)

// sweepBatch is how many expired entries each call deletes from every
// shard it locks. It exceeds what one call can create for small policies,
// so a steady load keeps memory near the live state.
const sweepBatch = 32

// Options configures a Backend. The zero value means defaults.
type Options struct {
	// Clock is the backend's clock (e.g. a *fakeclock.Clock in tests).
	// Default: the system clock. A Limiter using this backend reads the
	// same clock, unless given another with sdk.WithClock.
	Clock driver.Clock
	// Shards is the number of independently locked shards. Default 64.
	Shards int
}

// Backend is an in-memory driver.Backend. It also implements every
// optional interface of package driver: Peeker, Reserver, Inspector,
// Resetter, Describer, Batcher, Clocked, Overrider (override IDs come
// from one counter per Backend), PolicyStore (the versions live as long
// as the Backend), Linker (links, zones and audits live as long as the
// Backend), ValueLister (ListValues), and stats.Counters (package sdk/driver/stats)
// (statistics bounded by MaxStatsKeys). It is safe for concurrent use and
// starts no goroutines;
// most callers only pass it to sdk.New.
type Backend struct {
	clock  driver.Clock
	seed   maphash.Seed
	shards []*shard
	stats  statsStore // the recorder's statistics (stats.Counters)
	// overrideSeq numbers the overrides (driver.Override.ID), one counter
	// for the whole backend.
	overrideSeq atomic.Int64

	policies policyStores // the policy stores (driver.PolicyStore, policies.go)
}

// New returns an empty Backend. Nil opts means defaults.
func New(opts *Options) *Backend {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = driver.SystemClock
	}
	if o.Shards <= 0 {
		o.Shards = 64
	}
	b := &Backend{clock: o.Clock, seed: maphash.MakeSeed(), shards: make([]*shard, o.Shards)}
	for i := range b.shards {
		b.shards[i] = newShard()
	}
	return b
}

// Clock returns the backend's clock (driver.Clocked).
func (b *Backend) Clock() driver.Clock { return b.clock }

func (b *Backend) shardIndex(key string) int {
	return int(maphash.String(b.seed, driver.HashTag(key)) % uint64(len(b.shards)))
}

// txn is the work of one call, holding the locks of the shards of its
// keys (in ascending order, so calls spanning shards cannot deadlock).
type txn struct {
	b      *Backend
	locked []int
	now    time.Time
}

// begin locks the shards of keys, reads the clock and sweeps a few expired
// entries of every locked shard.
func (b *Backend) begin(keys []string) *txn {
	x := &txn{b: b}
	for _, k := range keys {
		i := b.shardIndex(k)
		if !slices.Contains(x.locked, i) {
			x.locked = append(x.locked, i)
		}
	}
	slices.Sort(x.locked)
	for _, i := range x.locked {
		b.shards[i].mu.Lock()
	}
	// Read the clock under the lock: calls on one shard see it advance.
	// Round(0) drops the monotonic reading: all arithmetic is wall time.
	x.now = b.clock.Now().Round(0)
	for _, i := range x.locked {
		b.shards[i].sweep(x.now, sweepBatch)
	}
	return x
}

func (x *txn) end() {
	for k := len(x.locked) - 1; k >= 0; k-- {
		x.b.shards[x.locked[k]].mu.Unlock()
	}
}

// shard returns key's shard, or nil when this call does not reservation its lock.
func (x *txn) shard(key string) *shard {
	i := x.b.shardIndex(key)
	if !slices.Contains(x.locked, i) {
		return nil
	}
	return x.b.shards[i]
}

// ruleState is the state of one rule, copied out of its entry.
type ruleState struct {
	fixed   fixedState
	sliding slidingState
	log     logState
	tat     time.Time
}

// runs is the algorithm whose state and arithmetic r gets: SlidingLog for
// a rule evaluated as an exact log (driver.Rule.ExactLog: a SlidingWindow
// rule of limit at most driver.LogLine), else its own. It is read from
// the rule as the request gives it: a limit override changes the limit,
// not the algorithm (as on Redis, whose ARGV fixes it).
func runs(r driver.Rule) driver.Algorithm {
	if r.ExactLog() {
		return driver.SlidingLog
	}
	return r.Algorithm
}

// load reads the state of r, which runs on a (runs). A GCRA state stored
// at another emission interval (the rule's rate changed under the same
// keys) is read at r's (alg.GCRARescale): rescaled reports it, and any
// take stores it so, allowed or not, as it stores a seed.
func (x *txn) load(a driver.Algorithm, r driver.Rule) (s *shard, e *entry, st ruleState, rescaled bool) {
	s = x.shard(r.Key)
	e = s.get(r.Key, x.now)
	if e == nil || e.kind != kindOf(a) {
		return s, nil, ruleState{}, false
	}
	st = ruleState{fixed: e.fixed, sliding: e.sliding, log: e.log, tat: e.tat}
	if t, _, _ := r.GCRAParams(); a == driver.GCRA && e.interval != t {
		st.tat = alg.GCRARescale(st.tat, e.interval, t, x.now)
		rescaled = true
	}
	return s, e, st, rescaled
}

// step steps st, the state of r running on a (runs), by cost.
func step(st ruleState, a driver.Algorithm, r driver.Rule, cost int64, now time.Time) (ruleState, verdict) {
	var v verdict
	switch a {
	case driver.FixedWindow:
		st.fixed, v = fixedStep(st.fixed, r, cost, now)
	case driver.SlidingWindow:
		st.sliding, v = slidingStep(st.sliding, r, cost, now)
	case driver.SlidingLog:
		st.log, v = logStep(st.log, r, cost, now)
	case driver.GCRA:
		st.tat, v = gcraStep(st.tat, r, cost, now)
	}
	return st, v
}

// report is Used and ResetAfter of st, the state of r running on a.
func report(st ruleState, a driver.Algorithm, r driver.Rule, now time.Time) (int64, time.Duration) {
	switch a {
	case driver.FixedWindow:
		return fixedReport(st.fixed, r, now)
	case driver.SlidingWindow:
		return slidingReport(st.sliding, r, now)
	case driver.SlidingLog:
		return logReport(st.log, r, now)
	case driver.GCRA:
		return gcraReport(st.tat, r, now)
	}
	return 0, 0
}

// expiry is when st, the state of r running on a, becomes worthless.
func expiry(st ruleState, a driver.Algorithm, r driver.Rule) time.Time {
	switch a {
	case driver.FixedWindow:
		return st.fixed.end
	case driver.SlidingWindow:
		return slidingExpiry(st.sliding, r)
	case driver.SlidingLog:
		return logExpiry(st.log, r)
	}
	return st.tat
}

// op is one of the driver's decisions: Take, Peek, Reserve or Inspect.
type op uint8

const (
	opTake op = iota
	opPeek
	opReserve
	opInspect
)

func (o op) String() string {
	return [...]string{"take", "peek", "reserve", "inspect"}[o]
}

// consumes reports whether o consumes when admitted.
func (o op) consumes() bool { return o == opTake || o == opReserve }

// Take checks req's rules and, if every enforced rule admits req.Cost
// and no quiet hours hold (driver.Request.Quiet), consumes it from each,
// atomically (driver.Backend; a shadow rule consumes only when it admits
// it too, see driver.Rule.Shadow; an exempt rule never denies, and
// consumes as its driver.Rule.Exempt says).
func (b *Backend) Take(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opTake, req)
}

// Peek reports what Take would decide, consuming nothing (driver.Peeker).
func (b *Backend) Peek(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opPeek, req)
}

// Reserve is Take that records a reservation (driver.Reserver).
func (b *Backend) Reserve(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opReserve, req)
}

// Inspect is a cost-1 Peek that returns the denial trail
// (driver.Inspector).
func (b *Backend) Inspect(ctx context.Context, req driver.Request) (driver.Result, error) {
	return b.decide(ctx, opInspect, req)
}

// decide carries out one operation atomically.
func (b *Backend) decide(ctx context.Context, o op, req driver.Request) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, fmt.Errorf("memory: %v: %w", o, err)
	}
	if err := validate(o, req); err != nil {
		return driver.Result{}, err
	}
	keys := make([]string, 0, len(req.Rules)+2)
	for _, r := range req.Rules {
		keys = append(keys, r.Key)
	}
	if req.TrailKey != "" {
		keys = append(keys, req.TrailKey)
	}
	if req.ReservationKey != "" {
		keys = append(keys, req.ReservationKey)
	}
	if idempotent(o, req) {
		keys = append(keys, req.IdempotencyKey)
	}
	if req.OverrideKey != "" {
		keys = append(keys, req.OverrideKey)
	}
	x := b.begin(keys)
	defer x.end()
	return x.take(o, req), nil
}

// TakeBatch carries out each request as Take does, in input order, each
// under its own shard locks (so each is atomic by itself, and other
// calls may interleave between them).
func (b *Backend) TakeBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return b.batch(ctx, opTake, reqs)
}

// PeekBatch is TakeBatch with Peek for Take.
func (b *Backend) PeekBatch(ctx context.Context, reqs []driver.Request) []driver.BatchResult {
	return b.batch(ctx, opPeek, reqs)
}

func (b *Backend) batch(ctx context.Context, o op, reqs []driver.Request) []driver.BatchResult {
	out := make([]driver.BatchResult, len(reqs))
	for i, req := range reqs {
		out[i].Result, out[i].Err = b.decide(ctx, o, req)
	}
	return out
}

// idempotent reports whether req carries an idempotency key that counts.
func idempotent(o op, req driver.Request) bool {
	return req.IdempotencyKey != "" && o.consumes()
}

func (x *txn) take(o op, req driver.Request) driver.Result {
	now := x.now
	if res, ok := x.replay(o, req); ok {
		return res
	}
	if req.ReservationKey != "" {
		x.lapse(req.ReservationKey)
	}
	cost := req.Cost
	if o == opInspect {
		cost = 1
	}
	consume := o.consumes()
	res := driver.Result{Now: now, Rules: make([]driver.RuleResult, len(req.Rules))}
	rules, ov := x.limitOverrides(req, &res)
	rules = zoned(rules, req)
	ev := x.evaluate(req.Rules, rules, cost)
	// A block denies, else quiet hours deny (driver.Request.Quiet), else
	// an exempt admits (counted: consuming from every rule, past its
	// limit if need be; uncounted: from none).
	allowed, uncounted, exempt := ev.allowed, false, false
	quiet := quietEnd(req.Quiet, now)
	switch {
	case ov.block != nil:
		allowed = false
		res.Override = cloneOverride(*ov.block)
	case !quiet.IsZero():
		allowed = false
		res.Quiet = quiet
	case ov.exempt != nil:
		allowed, exempt = true, true
		res.Override = cloneOverride(*ov.exempt)
		uncounted = !ov.exempt.Counted
	}
	res.Allowed = allowed
	committed := consume && allowed
	x.commit(ev, rules, res.Rules, cost, consume, committed && !uncounted, exempt)
	if consume {
		x.deny(req, rules, res, cost, ov.block)
	}
	if committed && o == opReserve {
		x.reserve(req, rules, ev.rules)
		res.ReservationID = req.ReservationID
	}
	x.remember(o, req, &res)
	return res
}

// replay returns the Result stored under req's idempotency key, Replayed,
// if there is one.
func (x *txn) replay(o op, req driver.Request) (driver.Result, bool) {
	if !idempotent(o, req) {
		return driver.Result{}, false
	}
	s := x.shard(req.IdempotencyKey)
	if e := s.get(req.IdempotencyKey, x.now); e != nil && e.kind == kindIdem {
		res := cloneResult(*e.idem)
		res.Replayed = true
		return res, true
	}
	return driver.Result{}, false
}

// limitOverrides reads req's overrides and returns its rules with the
// limits the limit overrides give them (a predecessor shares its rule's
// name), replaced before anything is evaluated; res.Override is the
// latest that changed one.
func (x *txn) limitOverrides(req driver.Request, res *driver.Result) ([]driver.Rule, applied) {
	rules := req.Rules
	if req.OverrideKey == "" {
		return rules, applied{}
	}
	ov := x.overridesOf(req.OverrideKey)
	if ov.limits == nil {
		return rules, ov
	}
	rules = slices.Clone(rules)
	var latest *driver.Override
	for i := range rules {
		if lo := ov.limits[rules[i].Name]; lo != nil {
			rules[i].Limit = lo.Limits[rules[i].Name]
			if latest == nil || lo.ID > latest.ID {
				latest = lo
			}
		}
	}
	if latest != nil {
		res.Override = cloneOverride(*latest)
	}
	return rules, ov
}

// zoned returns rules with req.Zone, when set, as the Location of every
// calendar rule (driver.Request.Zone: the attempt's zone aligns them; the
// keys, and so the state, stay the rule's), copied unless limitOverrides
// copied them already.
func zoned(rules []driver.Rule, req driver.Request) []driver.Rule {
	if req.Zone == nil || !slices.ContainsFunc(rules, func(r driver.Rule) bool { return r.Calendar != driver.NoCalendar }) {
		return rules
	}
	if len(rules) > 0 && &rules[0] == &req.Rules[0] {
		rules = slices.Clone(rules)
	}
	for i := range rules {
		if rules[i].Calendar != driver.NoCalendar {
			rules[i].Location = req.Zone
		}
	}
	return rules
}

// evaluation is every rule's state before and after a step of the cost,
// and its verdict: one element per rule, in one allocation.
type evaluation struct {
	rules   []ruleEval
	allowed bool // every enforced rule admits
}

// ruleEval is one rule's part of an evaluation.
type ruleEval struct {
	alg       driver.Algorithm // what the rule runs on (runs)
	shard     *shard
	ent       *entry // nil: no state of the rule's kind (load)
	cur, next ruleState
	verdict   verdict
	seeded    bool  // cur is a seed (driver.Rule.Seed) or a rescaled GCRA state (load)
	took      bool  // the rule took the cost (commit)
	units     int64 // what it took: the cost, or less under a counted exempt (exempt)
}

// evaluate loads every rule's state (or its seed) and steps it by cost:
// rules as evaluated (with the limits overrides gave them), each on the
// algorithm its rule as given runs on (runs).
func (x *txn) evaluate(given, rules []driver.Rule, cost int64) evaluation {
	ev := evaluation{rules: make([]ruleEval, len(rules)), allowed: true}
	for i, r := range rules {
		re := &ev.rules[i]
		re.alg = runs(given[i])
		re.shard, re.ent, re.cur, re.seeded = x.load(re.alg, r)
		if r.Seed > 0 && re.ent == nil {
			from := &ev.rules[r.Seed-1]
			re.cur = seed(from.cur, from.alg, rules[r.Seed-1], re.alg, r, x.now)
			re.seeded = true
		}
		re.next, re.verdict = step(re.cur, re.alg, kept(r), cost, x.now)
		if !r.Shadow && r.Exempt == driver.NotExempt {
			ev.allowed = ev.allowed && re.verdict.Allowed
		}
	}
	return ev
}

// commit stores the rules' states — the stepped ones where the request
// counts (counted) and the rule took the cost (under a counted exempt
// override, exempt, every rule; else a rule exempt counted,
// driver.ExemptCounted: past its limit up to driver.MaxUsed; a rule
// exempt uncounted takes nothing), the seeds on any consuming take —
// records which rules took the cost (ruleEval.took) and writes each
// rule's result to out.
func (x *txn) commit(ev evaluation, rules []driver.Rule, out []driver.RuleResult, cost int64, consume, counted, exempt bool) {
	for i, r := range rules {
		re := &ev.rules[i]
		st := re.cur
		if counted && r.Exempt != driver.ExemptUncounted {
			switch {
			case re.verdict.Allowed:
				re.took, re.units = true, cost
			case exempt || r.Exempt == driver.ExemptCounted:
				re.next, re.units = x.exempt(re, r, cost)
				re.took = re.units > 0
			}
			// A shadow rule that would deny is not consumed.
			if re.took {
				st = re.next
				x.store(re.shard, re.ent, re.alg, r, st)
			}
		}
		if consume && re.seeded && !re.took {
			// A seed is kept by any take, allowed or not: the carried
			// units, never the cost.
			x.store(re.shard, re.ent, re.alg, r, st)
		}
		used, reset := report(st, re.alg, r, x.now)
		out[i] = ruleResult(r.ReportedLimit(), used, reset, re.verdict)
		if r.Keep > 0 {
			out[i].Remaining = max(0, kept(r).Limit-used)
		}
		out[i].Strategy = strategyName(re.alg)
	}
}

// kept returns r as it decides for an attempt keeping r.Keep units
// (driver.Rule.Keep): its limit less Keep, which may be zero or less (a
// limit no cost fits: CostTooHigh). Only the admission reads it; r's
// state, layout and reported limit stay r's.
func kept(r driver.Rule) driver.Rule {
	r.Limit -= r.Keep
	return r
}

// quietEnd returns the End of the span of quiet that holds now
// (driver.Request.Quiet: [Start, End)), zero when none does.
func quietEnd(quiet []driver.Span, now time.Time) time.Time {
	for _, sp := range quiet {
		if !now.Before(sp.Start) && now.Before(sp.End) {
			return sp.End
		}
	}
	return time.Time{}
}

// exempt returns re's state after a counted exempt's cost, counted past
// r's limit but saturating (driver.MaxUsed, driver.MaxDebt), and the
// units counted (none: the rule is already at MaxUsed, and stays as it
// is).
func (x *txn) exempt(re *ruleEval, r driver.Rule, cost int64) (ruleState, int64) {
	if re.alg == driver.GCRA {
		next := re.cur
		next.tat = alg.GCRAExempt(re.cur.tat, r, cost, x.now)
		return next, cost
	}
	used, _ := report(re.cur, re.alg, r, x.now)
	n := alg.Exempt(used, cost)
	if n == 0 {
		return re.cur, 0
	}
	next, _ := step(re.cur, re.alg, unbounded(r), n, x.now)
	return next, n
}

// remember stores an idempotent request's Result under its key, and adds
// the trail to an inspection's.
func (x *txn) remember(o op, req driver.Request, res *driver.Result) {
	if idempotent(o, req) {
		s := x.shard(req.IdempotencyKey)
		stored := cloneResult(*res)
		s.put(&entry{key: req.IdempotencyKey, kind: kindIdem, idem: &stored}, x.now.Add(req.IdempotencyTTL), x.now)
	}
	if o == opInspect && req.TrailKey != "" {
		if e := x.shard(req.TrailKey).get(req.TrailKey, x.now); e != nil && e.kind == kindTrail {
			res.Trail = slices.Clone(e.trail)
			slices.Reverse(res.Trail) // stored oldest first, returned newest first
		}
	}
}

// seed returns the state rule r (running on a) starts from when it has
// none of its own (driver.Rule.Seed): what a take of the units its
// predecessor from (running on fa) counts at now (from's state st) leaves
// on empty state, whatever r's limit.
func seed(st ruleState, fa driver.Algorithm, from driver.Rule, a driver.Algorithm, r driver.Rule, now time.Time) ruleState {
	u, _ := report(st, fa, from, now)
	if u <= 0 {
		return ruleState{}
	}
	if r.Algorithm == driver.GCRA {
		// u*T must not overflow: beyond twice the burst's worth plus the
		// maximum tolerance, more units only delay a full bucket further.
		t, _, _ := r.GCRAParams()
		u = min(u, int64(driver.MaxTolerance/t)+1)
	}
	seeded, _ := step(ruleState{}, a, unbounded(r), u, now)
	return seeded
}

// unbounded returns r with a limit no cost reaches, so that its step
// always admits: the algorithms' own arithmetic for units that must be
// counted whatever the limit (a seed, a counted exempt). The caller keeps
// r's algorithm (runs): the limit no longer says.
func unbounded(r driver.Rule) driver.Rule {
	if r.Algorithm == driver.GCRA {
		r.Burst = math.MaxInt64 - 1
	} else {
		r.Limit = math.MaxInt64 / 2
	}
	return r
}

// cloneResult copies r so that the copy shares no slice with it.
func cloneResult(r driver.Result) driver.Result {
	r.Rules = slices.Clone(r.Rules)
	r.Trail = slices.Clone(r.Trail)
	return r
}

// store saves the new state of r (running on a) in s, where load found e
// (nil: none, or another algorithm's state, which put replaces).
func (x *txn) store(s *shard, e *entry, a driver.Algorithm, r driver.Rule, st ruleState) {
	if e == nil {
		e = &entry{kind: kindOf(a)}
		e.key, e.group = keep(r.Key, r.Group) // kept: not the caller's buffer
	}
	e.written = x.now
	e.fixed, e.sliding, e.log, e.tat = st.fixed, st.sliding, st.log, st.tat
	if a == driver.GCRA {
		e.interval, _, _ = r.GCRAParams()
	}
	s.put(e, expiry(st, a, r), x.now)
}

// keep returns copies of a rule's key and group (driver.Rule.Group; ""
// for none, or the key itself) in one allocation: entries outlive the
// caller's buffer.
func keep(key, group string) (string, string) {
	if group == "" || group == key {
		return strings.Clone(key), ""
	}
	var b strings.Builder
	b.Grow(len(key) + len(group))
	b.WriteString(key)
	b.WriteString(group)
	s := b.String()
	return s[:len(key)], s[len(key):]
}

// deny writes the trail entries of a Take or Reserve: a Block's one
// entry (block non-nil); else quiet hours' one entry (res.Quiet set);
// else, for a denied request, one per denying rule; and one per shadow
// or exempt rule that would have denied, whether the request was allowed
// or not (Denial.Shadow, Denial.Exempt).
func (x *txn) deny(req driver.Request, rules []driver.Rule, res driver.Result, cost int64, block *driver.Override) {
	if req.TrailKey == "" || req.TrailMax <= 0 || req.TrailTTL <= 0 {
		return
	}
	// noted: rule i writes an entry of its own (the request not denied
	// by a block or quiet hours).
	noted := func(i int) bool {
		return !res.Rules[i].Allowed && (rules[i].Shadow || rules[i].Exempt != driver.NotExempt || !res.Allowed)
	}
	write := block != nil || !res.Quiet.IsZero()
	for i := range res.Rules {
		write = write || noted(i)
	}
	if !write {
		return
	}
	s := x.shard(req.TrailKey)
	e := s.get(req.TrailKey, x.now)
	if e == nil || e.kind != kindTrail {
		e = &entry{key: strings.Clone(req.TrailKey), kind: kindTrail} // put replaces any other; kept: not the caller's buffer
	}
	// The trail is kept oldest first, so that a denial is an append and
	// not a copy of the whole trail; rules later in the request are newer,
	// as with Redis' LPUSH. Dropping the oldest re-slices; append's
	// growth copies only the live entries, so the array stays within
	// twice TrailMax.
	if block != nil {
		d := driver.Denial{At: x.now, Policy: req.Policy, Cost: cost, Override: block.ID, Values: req.TrailValues}
		if !block.Until.IsZero() {
			d.RetryAfter = block.Until.Sub(x.now)
		}
		e.trail = append(e.trail, d)
	} else if !res.Quiet.IsZero() {
		e.trail = append(e.trail, driver.Denial{
			At: x.now, Policy: req.Policy, Cost: cost, Quiet: true,
			RetryAfter: res.Quiet.Sub(x.now), Values: req.TrailValues,
		})
	} else {
		for i, rr := range res.Rules {
			if !noted(i) {
				continue
			}
			e.trail = append(e.trail, driver.Denial{
				At: x.now, Policy: req.Policy, Rule: rules[i].Name,
				Used: rr.Used, Limit: rr.Limit, Cost: cost,
				RetryAfter: rr.RetryAfter, CostTooHigh: rr.CostTooHigh,
				Shadow: rules[i].Shadow, Exempt: rules[i].Exempt != driver.NotExempt,
				Values: req.TrailValues,
			})
		}
	}
	if n := len(e.trail); n > req.TrailMax {
		e.trail = e.trail[n-req.TrailMax:]
	}
	s.put(e, x.now.Add(req.TrailTTL), x.now)
}

// Commit keeps the units of the reservation id under resKey. Lapsed
// reservations under resKey are refunded first.
func (b *Backend) Commit(ctx context.Context, resKey, id string) error {
	return b.settle(ctx, resKey, id, true)
}

// Cancel is Commit that gives the units back.
func (b *Backend) Cancel(ctx context.Context, resKey, id string) error {
	return b.settle(ctx, resKey, id, false)
}

func (b *Backend) settle(ctx context.Context, resKey, id string, commit bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: settle: %w", err)
	}
	keys := []string{resKey}
	for attempt := 0; ; attempt++ {
		x := b.begin(keys)
		// The refunds may name keys of other shards (keys without a
		// common hash tag): lock those too, then look again.
		need := x.reservationKeys(resKey)
		missing := false
		for _, k := range need {
			if x.shard(k) == nil {
				missing = true
			}
		}
		if missing && attempt < 2 {
			x.end()
			keys = append([]string{resKey}, need...)
			continue
		}
		err := x.settle(resKey, id, commit)
		x.end()
		return err
	}
}

// Reset deletes the state of every rule in req.Rules and every reservation under
// req.ReservationKey. The denial trail is kept.
func (b *Backend) Reset(ctx context.Context, req driver.Request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: reset: %w", err)
	}
	keys := make([]string, 0, len(req.Rules)+1)
	for _, r := range req.Rules {
		keys = append(keys, r.Key)
	}
	if req.ReservationKey != "" {
		keys = append(keys, req.ReservationKey)
	}
	x := b.begin(keys)
	defer x.end()
	for _, k := range keys {
		x.shard(k).del(k)
	}
	return nil
}

// strategyName is the strategy the memory backend uses for a.
func strategyName(a driver.Algorithm) string {
	switch a {
	case driver.FixedWindow:
		return "counter"
	case driver.SlidingWindow:
		return "cells"
	case driver.SlidingLog:
		return "log-runs"
	case driver.GCRA:
		return "gcra-tat"
	}
	return ""
}

// Describe reports the backend's kind and strategies.
func (b *Backend) Describe(ctx context.Context) (driver.Description, error) {
	strats := make(map[driver.Algorithm]driver.Strategy, 4)
	for _, a := range []driver.Algorithm{driver.FixedWindow, driver.SlidingWindow, driver.SlidingLog, driver.GCRA} {
		strats[a] = driver.Strategy{Name: strategyName(a), Reason: "in-process, exact"}
	}
	return driver.Description{
		Name:       "memory",
		Target:     "process memory",
		Strategies: strats,
		Notes: []string{
			fmt.Sprintf("State lives in this process only, in %d shards locked by hash tag.", len(b.shards)),
		},
	}, nil
}

// Sweep deletes every expired entry now. Calls sweep incrementally anyway;
// Sweep is for tests and for callers that want memory back at once.
func (b *Backend) Sweep() {
	now := b.clock.Now().Round(0)
	for _, s := range b.shards {
		s.mu.Lock()
		s.sweep(now, -1)
		s.mu.Unlock()
	}
}

// Len reports how many entries (rule states, trails, reservation sets,
// idempotency records, override sets, links, persons) the backend holds, including
// expired ones not yet swept.
func (b *Backend) Len() int {
	n := 0
	for _, s := range b.shards {
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// validate checks what the sdk promises, so a misuse is an error rather
// than a wrong answer.
func validate(o op, req driver.Request) error {
	if o != opInspect && req.Cost < 1 {
		return fmt.Errorf("memory: %v: cost must be >= 1, got %d", o, req.Cost)
	}
	for i, r := range req.Rules {
		var err error
		switch {
		case r.Key == "":
			err = errors.New("empty key")
		case kindOf(r.Algorithm) == 0:
			err = fmt.Errorf("unknown algorithm %d", r.Algorithm)
		case r.Limit <= 0:
			err = fmt.Errorf("limit must be > 0, got %d", r.Limit)
		case r.Window <= 0:
			err = fmt.Errorf("window must be > 0, got %v", r.Window)
		case r.Burst < 0:
			err = fmt.Errorf("burst must be >= 0, got %d", r.Burst)
		case r.Seed < 0 || r.Seed > i:
			err = fmt.Errorf("seed must name an earlier rule (1 to %d), got %d", i, r.Seed)
		case r.Keep < 0:
			err = fmt.Errorf("keep must be >= 0, got %d", r.Keep)
		case r.Keep > 0 && r.Algorithm == driver.GCRA:
			err = errors.New("keep on a gcra rule")
		case r.Exempt > driver.ExemptUncounted:
			err = fmt.Errorf("unknown exemption %d", r.Exempt)
		case r.Exempt != driver.NotExempt && r.Shadow:
			err = errors.New("exempt and shadow")
		}
		if err != nil {
			return fmt.Errorf("memory: %v: rule %q: %w", o, r.Name, err)
		}
	}
	if len(req.Quiet) > driver.MaxQuietSpans {
		return fmt.Errorf("memory: %v: %d quiet spans, at most %d", o, len(req.Quiet), driver.MaxQuietSpans)
	}
	for i, sp := range req.Quiet {
		if !sp.Start.Before(sp.End) || i > 0 && sp.Start.Before(req.Quiet[i-1].End) {
			return fmt.Errorf("memory: %v: quiet span %d: not after the previous one, or empty", o, i)
		}
	}
	if idempotent(o, req) && req.IdempotencyTTL <= 0 {
		return fmt.Errorf("memory: %v: idempotency ttl must be > 0, got %v", o, req.IdempotencyTTL)
	}
	if o == opReserve {
		switch {
		case req.ReservationKey == "" || req.ReservationID == "":
			return errors.New("memory: reserve: needs ReservationKey and ReservationID")
		case req.ReservationTTL <= 0:
			return fmt.Errorf("memory: reserve: reservation ttl must be > 0, got %v", req.ReservationTTL)
		}
	}
	return nil
}
