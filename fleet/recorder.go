// Package fleet is the decision telemetry of every process sharing a
// storage: a Recorder, fed by a Limiter's observer hook
// (sdk.WithObserver(rec.Observe)), counts decisions per policy and rule,
// what shadow rules would have denied, the decisions overrides, message
// classes and quiet hours decided, the most denied subjects, logs the
// attempts of a sample of
// subjects, and announces the policies it sees and the policy-store
// version it runs; a Reader reads what every process's Recorder flushed
// (Stats, Shadow, Traffic) and which policies they run (Announced).
// Package fleet/whatif replays the sample through proposed policies. The
// storage is a backend implementing package sdk/driver/stats's optional
// interface (backends/memory and backends/redis do).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/internal/arith"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// The recorder's buckets, retention and bounds.
const (
	// StatsStep is the width of the fine buckets, kept StatsFineRetention.
	StatsStep          = 10 * time.Second
	StatsFineRetention = time.Hour
	// StatsCoarseStep is the width of the coarse buckets (and of the top
	// denied subjects' intervals), kept StatsCoarseRetention.
	StatsCoarseStep      = time.Minute
	StatsCoarseRetention = 24 * time.Hour
	// StatsTopKeep is how many denied subjects are stored per policy per
	// coarse bucket (the highest counts).
	StatsTopKeep = 32
	// MaxRecordedPolicies bounds the policies one Recorder counts (by
	// name and rules: a policy built again with the same rules counts
	// once); the decisions of policies beyond it are not recorded.
	MaxRecordedPolicies = 256
	// DefaultNearLimit is Options.NearLimit's default: an allowed
	// decision is near the limit for a rule left with at most 10% of its
	// limit.
	DefaultNearLimit = 0.1
	// DefaultTopK is Options.TopK's default.
	DefaultTopK = 16
	// recorderStripes is the number of stripes of a policy's in-process
	// counts: decisions are spread over them by their subject's hash, so
	// that concurrent decisions rarely touch the same cache line or lock.
	recorderStripes = 8
	// announceEvery is how often a policy is announced again, so that
	// readers see which policies are still run.
	announceEvery = time.Minute
	// ShadowPeopleStep is the width of the buckets of the distinct
	// subjects a rule denied, or a shadow rule would have denied (one
	// HyperLogLog per rule per bucket), kept StatsCoarseRetention.
	ShadowPeopleStep = 10 * time.Minute
	// maxPeoplePending bounds the distinct (rule, bucket, subject,
	// enforced) keys a stripe holds between two flushes; beyond, subjects
	// are not counted as people (their attempts still are) and Lost
	// counts them.
	maxPeoplePending = 1 << 14
)

// Options configures a Recorder or a Reader (which reads only Prefix, Now,
// Timeout and SampleKeep). The zero value means defaults.
type Options struct {
	// Prefix is the first segment of the statistics keys (default
	// "fc", as the sdk's), escaped as sdk.WithPrefix escapes it. A Reader
	// reads what the Recorders of its prefix flushed: give them the same
	// one (the Limiters' own, by convention).
	Prefix string
	// Now is the clock of announcements and flush expiries, and a
	// Reader's "now" (default: the backend's clock when it decides on one
	// of this process, as the memory backend does, else time.Now). Counts
	// are bucketed by each decision's own time (Decision.At: the
	// backend's clock), so every process agrees on bucket boundaries.
	Now func() time.Time
	// Timeout bounds each of a Reader's reads (0, the default: only the
	// caller's context does).
	Timeout time.Duration
	// FlushEvery is how often the recorder's goroutine flushes (default
	// 1s, the shortest allowed). A negative value starts no goroutine:
	// the caller flushes (Flush) and Close only flushes. Memory holds the
	// counts of two StatsStep buckets: flush more often than every 10 s,
	// or the counts of a bucket left unflushed are added to a later one.
	FlushEvery time.Duration
	// NearLimit is the fraction of a rule's limit at or below which an
	// allowed decision's remaining units count as near the limit
	// (default DefaultNearLimit; at most 1).
	NearLimit float64
	// TopK is the number of denied subjects each policy tracks between
	// two flushes in each of its 8 stripes (subjects are spread over the
	// stripes by hash; the space-saving algorithm in each). Counts are
	// exact while at most TopK distinct subjects of a stripe are denied
	// between two flushes; beyond,
	// a subject that took a tracked subject's place is counted from then
	// on (a lower bound: the count flushed never exceeds its denials),
	// and the heaviest subjects stay tracked. Default DefaultTopK.
	TopK int
	// OnError receives flush errors, from the recorder's goroutine (or
	// Close). Default: errors are only counted (Recorder.Lost).
	OnError func(error)
	// FlushTimeout bounds one flush (default 5s).
	FlushTimeout time.Duration
	// Sample is the share of subjects whose every counted attempt the
	// Recorder logs for what-if replays (package fleet/whatif): 1 in
	// Sample subjects, picked by a hash of their shard values that every
	// process computes alike, so a sampled subject's attempts are logged
	// by every service. A power of two; 1 logs every subject; default
	// DefaultSample; negative: no log. Entries are kept per policy per
	// SampleStep, SampleRetention after it (see Reader.Traffic).
	Sample int
	// SampleKeep bounds each list of the log (one per policy per
	// SampleStep): the newest SampleKeep entries are kept (default
	// DefaultSampleKeep).
	SampleKeep int
	// Service names this process in its announcements
	// (Announcement.Service), so that readers tell which service runs
	// which version, e.g. "push-api/host-3": at most MaxServiceLen
	// printable ASCII bytes, no spaces. Empty (the default): announcements
	// name no process.
	Service string
}

// Recorder counts the decisions of the Limiters that observe with it
// (sdk.WithObserver(rec.Observe)), per policy and rule — allowed, denied,
// and allowed but near the limit; for a shadow rule, what it would have
// denied; what message classes are exempt from; denials for headroom —
// in StatsStep buckets, the decisions per-person overrides
// decided by kind, those denied for quiet hours, per message class those
// its exemptions decided, the most denied subjects per policy, the distinct
// subjects each rule denied (or, shadow, would have) per
// ShadowPeopleStep, and every attempt of a sample of subjects
// (Options.Sample), and flushes them to a backend implementing
// stats.Counters, where every process's counts add up and Reader.Stats,
// Reader.Shadow and Reader.Traffic read them.
//
// Only consuming decisions are counted (take, reserve, wait — each
// attempt Wait makes, so a Wait that sleeps once counts a denial and then
// an allowed decision; not peeks, inspections, replays of idempotent
// attempts, degraded decisions or errors). A cached denial
// (sdk.Policy.HotDenyCache) counts like any denial.
// Recording a decision is an in-memory increment (atomic counters in one
// of the policy's 8 stripes, chosen by the subject's hash, and for a
// denial that stripe's small top-K and a set of subject hashes under
// their mutexes; for a decision a message class's exemption decided, the
// class's counts under the bucket's mutex; for a subject of the sample,
// its entry): no I/O, no allocation for a subject outside the sample but
// a map's growth (and a class's counts, once per class per flush), and it
// never fails or delays a decision.
//
// The Recorder owns a goroutine (started by NewRecorder unless
// FlushEvery < 0) that flushes every FlushEvery: one pipeline per flush
// (one per cluster node). Close stops it and flushes what is left.
//
// Memory per process: per policy, 8 stripes of 2 buckets of 7+7×rules
// counters (and, between two flushes, two per message class an
// exemption decided for) and a top-K of TopK subjects (their shard values; 128 per
// policy by default), for at most MaxRecordedPolicies policies: about
// 20 KB per policy with short subject values; between two flushes, the
// hashes of the subjects shadow rules would have denied (at most 16 384
// per stripe) and the sampled attempts (at most 16 384 per policy).
// Storage, per policy: one hash per 10 s bucket kept 1 h (360 keys), one
// hash and one sorted set of at most StatsTopKeep subjects per 1 min
// bucket kept 24 h (2 × 1440 keys), per rule one HyperLogLog per
// ShadowPeopleStep with a denial in it, kept 24 h (at most 145 keys of up
// to 12 KB; a shadow rule's would-be denials have their own), and one
// list of at most SampleKeep sampled attempts per SampleStep kept
// SampleRetention after it (25 lists; an entry takes about 60 bytes plus
// 20 per subject value), each with its own expiry; plus one hash of
// announcements for all policies (see Reader.Stats, Reader.Shadow and
// Reader.Traffic for the key names). Where the backend reports evictions
// (stats.Evictions: Redis), each flush that starts a 10 s bucket also
// samples the servers' evicted_keys (one INFO stats per master) into one
// hash per 10 s bucket kept 1 h and per 1 min bucket kept 24 h, shared by
// every process (Reader.Evictions). Only the shard values of denied
// subjects are stored (those the denial trail keys already hold): the
// people counters and the sample hold 64-bit hashes of subjects and
// values, never the values.
//
// A Recorder is safe for concurrent use and may be shared by Limiters; the
// zero Recorder is not usable, call NewRecorder.
type Recorder struct {
	st     stats.Counters
	prefix string
	now    func() time.Time
	near   float64
	topK   int
	onErr  func(error)
	tmo    time.Duration
	// sampleN is Options.Sample (0: no log), sampleKeep SampleKeep.
	sampleN, sampleKeep int
	service             string // Options.Service

	seed    maphash.Seed // picks a subject's stripe
	version atomic.Int64 // SetPolicyVersion
	gen     atomic.Int64 // how many times SetPolicyVersion changed the version
	pols    sync.Map     // *sdk.Policy -> *policyStats
	mu      sync.Mutex
	idents  map[string]*policyStats // ident(p) -> its counts (mu)
	list    []*policyStats          // every policyStats, in first-use order (mu)

	flushMu sync.Mutex // serialises flushes
	lost    atomic.Int64
	// evictedAt is the start (unix s) of the fine bucket of the last
	// evicted_keys sample (evictions.go; under flushMu).
	evictedAt int64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// policyStats is one policy's in-process counts.
type policyStats struct {
	p       atomic.Pointer[sdk.Policy] // the latest build (Announce, stats)
	name    string                     // p's name
	rules   []string                   // p's rule names
	stripes [recorderStripes]stripe
	// announced is when the policy was last announced (unix ms; 0: never).
	announced atomic.Int64
	// gen is the Recorder's gen when the policy was last named by
	// Announce or used by a decision: it is announced while gen is the
	// Recorder's.
	gen atomic.Int64
	// sample holds the sampled attempts until a flush.
	sample samplePending
}

// stripe is a share of a policy's counts: the decisions of the subjects
// hashed to it.
type stripe struct {
	slots  [2]bucketSlot // by fine bucket parity
	top    topK
	people peopleSet
	_      [64]byte // keeps stripes off each other's cache lines
}

// bucketSlot holds the counts of one fine bucket until a flush takes them.
type bucketSlot struct {
	bucket          atomic.Int64 // fine bucket number: unix seconds / 10
	allowed, denied atomic.Int64
	// overrides counts the decisions an override decided or changed, by
	// kind (Exempt, Block, Limit: index kind-1).
	overrides [3]atomic.Int64
	// quiet counts the decisions denied for quiet hours.
	quiet atomic.Int64
	rules []ruleCounts
	// classes counts, per message class, the decisions its exemptions
	// decided (classMu; nil until a class is counted: classes are few
	// and such decisions the exception).
	classMu sync.Mutex
	classes map[string]*classCounts
}

// ruleCounts are one rule's verdicts; shadow counts what a shadow rule
// would have denied, shadowAllowed those of them the decision allowed;
// exempted what the rule would have denied but the attempt's class is
// exempt from; headroom its denials for headroom only (also in denied).
type ruleCounts struct {
	allowed, denied, near, shadow, shadowAllowed atomic.Int64
	exempted, headroom                           atomic.Int64
}

// classCounts are a message class's decisions: exempted, some rule would
// have denied (sdk.Decision.Exempted); quietPassed, made in quiet hours
// that the class passes.
type classCounts struct{ exempted, quietPassed int64 }

// addClass counts a decision of class c (exempted, passed quiet hours).
func (s *bucketSlot) addClass(c string, exempted, quietPassed bool) {
	s.classMu.Lock()
	defer s.classMu.Unlock()
	if s.classes == nil {
		s.classes = map[string]*classCounts{}
	}
	cc := s.classes[c]
	if cc == nil {
		cc = &classCounts{}
		s.classes[c] = cc
	}
	if exempted {
		cc.exempted++
	}
	if quietPassed {
		cc.quietPassed++
	}
}

// drainClasses returns the class counts since the last drain.
func (s *bucketSlot) drainClasses() map[string]*classCounts {
	s.classMu.Lock()
	defer s.classMu.Unlock()
	m := s.classes
	s.classes = nil
	return m
}

// NewRecorder returns a Recorder flushing to b, which must implement
// stats.Counters (the memory and Redis backends do; else the error
// wraps errors.ErrUnsupported). Nil opts means defaults. Unless
// opts.FlushEvery < 0 it starts the flushing goroutine: call Close.
func NewRecorder(b driver.Backend, opts *Options) (*Recorder, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	st, now, err := open(b, &o, "recorder")
	if err != nil {
		return nil, err
	}
	if o.NearLimit < 0 || o.NearLimit > 1 || o.TopK < 0 {
		return nil, fmt.Errorf("fleet: recorder: near limit must be in [0, 1] and top k >= 0, got %v and %d", o.NearLimit, o.TopK)
	}
	switch {
	case o.Sample == 0:
		o.Sample = DefaultSample
	case o.Sample < 0:
		o.Sample = 0
	case o.Sample&(o.Sample-1) != 0:
		return nil, fmt.Errorf("fleet: recorder: sample must be a power of two, got %d", o.Sample)
	}
	if o.Service != "" && !validService(o.Service) {
		return nil, fmt.Errorf("fleet: recorder: service must be 1 to %d printable ASCII bytes without spaces", MaxServiceLen)
	}
	if o.SampleKeep < 0 {
		return nil, fmt.Errorf("fleet: recorder: sample keep must be >= 0, got %d", o.SampleKeep)
	}
	if o.SampleKeep == 0 {
		o.SampleKeep = DefaultSampleKeep
	}
	r := &Recorder{seed: maphash.MakeSeed(), st: st, prefix: keyname.Prefix(o.Prefix, keyname.DefaultPrefix), now: now, near: o.NearLimit, topK: o.TopK,
		onErr: o.OnError, tmo: o.FlushTimeout, done: make(chan struct{}), idents: map[string]*policyStats{},
		sampleN: o.Sample, sampleKeep: o.SampleKeep, service: o.Service}
	if r.near == 0 {
		r.near = DefaultNearLimit
	}
	if r.topK == 0 {
		r.topK = DefaultTopK
	}
	if r.tmo <= 0 {
		r.tmo = 5 * time.Second
	}
	if o.FlushEvery < 0 {
		close(r.done)
		return r, nil
	}
	every := max(o.FlushEvery, time.Second)
	r.stop = make(chan struct{})
	go r.loop(every)
	return r, nil
}

// open returns b's statistics store and the clock o names (b's own when
// o names none and b decides on one of this process, else time.Now).
func open(b driver.Backend, o *Options, op string) (stats.Counters, func() time.Time, error) {
	st, ok := b.(stats.Counters)
	if !ok {
		return nil, nil, fmt.Errorf("fleet: %s: backend %T cannot store statistics: %w", op, b, errors.ErrUnsupported)
	}
	if o.Now != nil {
		return st, o.Now, nil
	}
	if cb, ok := b.(interface{ Clock() driver.Clock }); ok && cb.Clock() != nil {
		return st, cb.Clock().Now, nil
	}
	return st, time.Now, nil
}

func (r *Recorder) loop(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.flushReport()
		}
	}
}

// flushReport flushes under the recorder's timeout and reports an error.
func (r *Recorder) flushReport() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.tmo)
	defer cancel()
	err := r.Flush(ctx)
	if err != nil && r.onErr != nil {
		r.onErr(err)
	}
	return err
}

// Close stops the flushing goroutine, waits for it, and flushes what was
// counted since the last flush. It returns that flush's error. Decisions
// recorded after Close stay in memory until a Flush.
func (r *Recorder) Close() error {
	r.once.Do(func() {
		if r.stop != nil {
			close(r.stop)
		}
	})
	<-r.done
	return r.flushReport()
}

// Lost returns the number of counts (decision counts, subject counts and
// sampled attempts) lost to failed flushes, and of shadow-denied subjects
// and sampled attempts dropped because too many waited for a flush. A
// failed flush is not retried: its counts may have been partly stored,
// and are never stored twice.
func (r *Recorder) Lost() int64 { return r.lost.Load() }

// Announce marks policies to be announced at the next flush (and every
// minute after) as run by this process, so that readers (Reader.Announced,
// the console) can compare them with their own. Policies a recorded
// decision used are announced without being named here. Of a policy
// built again with the same rules (see Recorder), the latest build given
// here or decided with is announced.
//
// After SetPolicyVersion, only the policies named here or used by a
// decision since are announced: call Announce with the new version's
// policies right after SetPolicyVersion.
func (r *Recorder) Announce(ps ...*sdk.Policy) {
	g := r.gen.Load()
	for _, p := range ps {
		if p.Name() == "" { // not built by sdk.NewPolicy
			continue
		}
		if st := r.stats(p); st != nil {
			st.p.Store(p)
			st.gen.Store(g)
		}
	}
}

// Observe counts one decision; pass it to sdk.WithObserver. It counts
// the consuming decisions only (see Recorder) and never blocks on I/O.
func (r *Recorder) Observe(e sdk.Event) {
	switch e.Op {
	case "peek", "inspect":
		return
	}
	d := &e.Decision
	if e.PolicyRef == nil || e.Err != nil || d.Degraded || d.Replayed || len(d.Rules) == 0 {
		return
	}
	ps := r.stats(e.PolicyRef)
	if ps == nil {
		return
	}
	if g := r.gen.Load(); ps.gen.Load() != g { // read-mostly: no write per decision
		ps.gen.Store(g)
	}
	sec := d.At.Unix()
	b := arith.FloorDiv(sec, int64(StatsStep/time.Second))
	tag := e.Shard
	var h uint64 // the subject's hash, computed when needed (hashed says so)
	hashed := false
	if r.sampleN > 0 { // the sampling decision first: nothing more for the others
		h, hashed = subjectHash(tag), true
		if sampled(h, r.sampleN) {
			r.sample(ps, &e, h)
		}
	}
	st := &ps.stripes[maphash.String(r.seed, tag)%recorderStripes]
	s := &st.slots[b&1]
	for {
		old := s.bucket.Load()
		if old >= b || s.bucket.CompareAndSwap(old, b) {
			break
		}
	}
	if d.Allowed {
		s.allowed.Add(1)
	} else {
		s.denied.Add(1)
	}
	exempt := false // an exempt decided: the rules' verdicts denied no one
	if o := d.Override; o.ID != 0 && o.Kind >= driver.Exempt && o.Kind <= driver.Limit {
		s.overrides[o.Kind-driver.Exempt].Add(1)
		exempt = o.Kind == driver.Exempt
	}
	inQuiet := !d.Quiet.IsZero()
	if inQuiet && !d.Allowed {
		s.quiet.Add(1)
	}
	if d.Class != "" && (len(d.Exempted) > 0 || inQuiet && d.Allowed) {
		s.addClass(d.Class, len(d.Exempted) > 0, inQuiet && d.Allowed)
	}
	j, formerDenied := 0, false // j: the rule's index in ps.rules
	for i := range d.Rules {
		rd := &d.Rules[i]
		if rd.Before != 0 { // a rule's former self, enforced beside it: part of its verdict
			formerDenied = formerDenied || !rd.Allowed
			continue
		}
		if j >= len(s.rules) || rd.Rule != ps.rules[j] {
			break
		}
		rc, allowed := &s.rules[j], rd.Allowed && !formerDenied || exempt
		switch {
		case !allowed && rd.Exempt != driver.NotExempt:
			rc.exempted.Add(1) // the attempt's class passed it: no denial
			rc.allowed.Add(1)
		case rd.Shadow && !allowed:
			rc.shadow.Add(1)
			if d.Allowed {
				rc.shadowAllowed.Add(1)
			}
			if !hashed {
				h, hashed = subjectHash(tag), true
			}
			st.people.add(peopleKey{rule: int32(j), bucket: arith.FloorDiv(sec, int64(ShadowPeopleStep/time.Second)), subject: h}, &r.lost)
		case !allowed:
			rc.denied.Add(1)
			if rd.Headroom {
				rc.headroom.Add(1)
			}
			if !hashed {
				h, hashed = subjectHash(tag), true
			}
			st.people.add(peopleKey{rule: int32(j), bucket: arith.FloorDiv(sec, int64(ShadowPeopleStep/time.Second)), subject: h, enforced: true}, &r.lost)
		default:
			rc.allowed.Add(1)
			if d.Allowed && !rd.Shadow && float64(rd.Remaining) <= r.near*float64(rd.Limit) {
				rc.near.Add(1)
			}
		}
		j, formerDenied = j+1, false
	}
	if !d.Allowed {
		st.top.add(tag, arith.FloorDiv(sec, int64(StatsCoarseStep/time.Second)), r.topK)
	}
}

// stats returns p's counts, registering p on first use (nil beyond
// MaxRecordedPolicies). Policies are told apart by their name and their
// rules' names and ids, so a policy built again with the same rules (a
// reload) shares the counts of the first.
func (r *Recorder) stats(p *sdk.Policy) *policyStats {
	if v, ok := r.pols.Load(p); ok {
		return v.(*policyStats)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.pols.Load(p); ok {
		return v.(*policyStats)
	}
	var rules []string
	ident := []string{p.Name()}
	ids := p.RuleIDs()
	for i, rule := range p.Rules() {
		rules = append(rules, rule.Name)
		ident = append(ident, rule.Name+"."+ids[i])
	}
	key := strings.Join(ident, "\x00")
	if ps, ok := r.idents[key]; ok {
		r.pols.Store(p, ps)
		ps.p.Store(p) // the newest build is announced (its limits, shadow flags)
		return ps
	}
	if len(r.list) >= MaxRecordedPolicies {
		return nil
	}
	ps := &policyStats{name: p.Name(), rules: rules}
	ps.p.Store(p)
	ps.gen.Store(r.gen.Load())
	for k := range ps.stripes {
		for i := range ps.stripes[k].slots {
			ps.stripes[k].slots[i].rules = make([]ruleCounts, len(rules))
		}
	}
	r.list = append(r.list, ps)
	r.idents[key] = ps
	r.pols.Store(p, ps)
	return ps
}

// topK is a space-saving heavy-hitters summary of one policy's denied
// subjects (their escaped shard values) in one coarse bucket; a summary
// of an earlier bucket waits in done for the next flush.
type topK struct {
	mu     sync.Mutex
	minute int64
	idx    map[string]int
	ent    []topEntry
	done   []topDone
}

type topEntry struct {
	subject string
	count   int64 // the space-saving count: an upper bound
	err     int64 // the count inherited from the entry replaced: count-err is a lower bound
}

type topDone struct {
	minute int64
	ent    []topEntry
}

// maxTopDone bounds the summaries of past buckets waiting for a flush.
const maxTopDone = 4

func (t *topK) add(subject string, minute int64, k int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idx == nil {
		t.idx = make(map[string]int, k)
		t.ent = make([]topEntry, 0, k)
	}
	if minute != t.minute && len(t.ent) > 0 {
		if len(t.done) == maxTopDone {
			t.done = t.done[1:]
		}
		t.done = append(t.done, topDone{minute: t.minute, ent: t.ent})
		t.ent = make([]topEntry, 0, k)
		clear(t.idx)
	}
	t.minute = minute
	if i, ok := t.idx[subject]; ok {
		t.ent[i].count++
		return
	}
	subject = strings.Clone(subject) // kept: not the decision's key buffer
	if len(t.ent) < k {
		t.idx[subject] = len(t.ent)
		t.ent = append(t.ent, topEntry{subject: subject, count: 1})
		return
	}
	m := 0
	for i := range t.ent {
		if t.ent[i].count < t.ent[m].count {
			m = i
		}
	}
	delete(t.idx, t.ent[m].subject)
	t.idx[subject] = m
	t.ent[m] = topEntry{subject: subject, count: t.ent[m].count + 1, err: t.ent[m].count}
}

// drain returns the summaries counted since the last drain and empties
// the current one.
func (t *topK) drain() []topDone {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.done
	t.done = nil
	if len(t.ent) > 0 {
		out = append(out, topDone{minute: t.minute, ent: t.ent})
		t.ent = make([]topEntry, 0, cap(t.ent))
		clear(t.idx)
	}
	return out
}

// Flush sends what was counted since the last flush, in one
// stats.Counters call, and the announcements that are due. Flushes are
// serialised. On error the counts of this flush are lost (Lost).
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	list := r.list[:len(r.list):len(r.list)]
	// The current set and its version, read together (SetPolicyVersion
	// changes them under r.mu): only the policies of the set are announced.
	gen, version := r.gen.Load(), r.version.Load()
	r.mu.Unlock()
	now := r.now()
	var (
		batch  stats.Batch
		hashes = map[string]int{} // key -> index in batch.Hashes
		tops   = map[string]int{} // key -> index in batch.Tops
		counts int64
	)
	hash := func(key string, exp time.Time) int {
		i, ok := hashes[key]
		if !ok {
			i = len(batch.Hashes)
			hashes[key] = i
			batch.Hashes = append(batch.Hashes, stats.Hash{Key: key, ExpireAt: exp})
		}
		return i
	}
	add := func(hi int, field string, n int64) {
		h := &batch.Hashes[hi]
		for i := range h.Incr {
			if h.Incr[i].Name == field {
				h.Incr[i].Value += n
				return
			}
		}
		h.Incr = append(h.Incr, stats.Field{Name: field, Value: n})
	}
	var ann []stats.Field
	for _, ps := range list {
		name := ps.name
		for i := range 2 * recorderStripes {
			s := &ps.stripes[i/2].slots[i%2]
			b := s.bucket.Load()
			fields := make([]stats.Field, 0, 2+3*len(s.rules))
			take := func(field string, c *atomic.Int64) {
				if n := c.Swap(0); n != 0 {
					fields = append(fields, stats.Field{Name: field, Value: n})
					counts += n
				}
			}
			take(fieldAllowed, &s.allowed)
			take(fieldDenied, &s.denied)
			for k, f := range overrideFields {
				take(f, &s.overrides[k])
			}
			take(fieldQuiet, &s.quiet)
			for c, cc := range s.drainClasses() {
				for _, f := range [...]stats.Field{{Name: fieldClassExempted + ":" + c, Value: cc.exempted}, {Name: fieldClassQuiet + ":" + c, Value: cc.quietPassed}} {
					if f.Value != 0 {
						fields = append(fields, f)
						counts += f.Value
					}
				}
			}
			for j, rule := range ps.rules {
				take(fieldAllowed+":"+rule, &s.rules[j].allowed)
				take(fieldDenied+":"+rule, &s.rules[j].denied)
				take(fieldNear+":"+rule, &s.rules[j].near)
				take(fieldShadow+":"+rule, &s.rules[j].shadow)
				take(fieldShadowAllowed+":"+rule, &s.rules[j].shadowAllowed)
				take(fieldExempted+":"+rule, &s.rules[j].exempted)
				take(fieldHeadroom+":"+rule, &s.rules[j].headroom)
			}
			if b2 := s.bucket.Load(); b2 != b { // a decision of a new bucket came in
				b = b2
			}
			if len(fields) == 0 {
				continue
			}
			start := time.Unix(b*int64(StatsStep/time.Second), 0)
			fine := hash(r.fineKey(name, start), start.Add(StatsStep+StatsFineRetention))
			cstart := start.Truncate(StatsCoarseStep)
			coarse := hash(r.coarseKey(name, cstart), cstart.Add(StatsCoarseStep+StatsCoarseRetention))
			for _, f := range fields {
				add(fine, f.Name, f.Value)
				add(coarse, f.Name, f.Value)
			}
		}
		for k := range ps.stripes {
			for _, td := range ps.stripes[k].top.drain() {
				cstart := time.Unix(td.minute*int64(StatsCoarseStep/time.Second), 0)
				key := r.coarseKey(name, cstart) + ":top"
				ti, ok := tops[key]
				if !ok {
					ti = len(batch.Tops)
					tops[key] = ti
					batch.Tops = append(batch.Tops, stats.Top{Key: key, Keep: StatsTopKeep,
						ExpireAt: cstart.Add(StatsCoarseStep + StatsCoarseRetention)})
				}
				for _, e := range td.ent { // stripes hold disjoint subjects
					batch.Tops[ti].Incr = append(batch.Tops[ti].Incr, stats.Field{Name: e.subject, Value: e.count - e.err})
					counts += e.count - e.err
				}
			}
		}
		for k := range ps.stripes {
			batch.Uniques = r.appendPeople(batch.Uniques, ps, ps.stripes[k].people.drain())
		}
		var n int
		batch.Logs, n = r.appendSample(batch.Logs, ps)
		counts += int64(n)
		if last := ps.announced.Load(); ps.gen.Load() == gen && (last == 0 || now.Sub(time.UnixMilli(last)) >= announceEvery) {
			ps.announced.Store(now.UnixMilli())
			a := AnnouncementOf(ps.p.Load())
			a.Version, a.Service = version, r.service
			ann = append(ann, stats.Field{Name: a.field(), Value: now.UnixMilli()})
		}
	}
	if len(ann) > 0 {
		day := now.UTC().Truncate(24 * time.Hour)
		batch.Hashes = append(batch.Hashes, stats.Hash{Key: announceKey(r.prefix, day), Set: ann, ExpireAt: day.Add(2 * 24 * time.Hour)})
	}
	sampleErr := r.sampleEvictions(ctx, now, &batch) // reported after the counts are flushed
	if batch.Empty() {
		return sampleErr
	}
	if err := r.st.FlushStats(ctx, batch); err != nil {
		r.lost.Add(counts)
		for _, ps := range list { // announce again at the next flush
			ps.announced.Store(0)
		}
		return fmt.Errorf("fleet: recorder: flush: %w", err)
	}
	return sampleErr
}

// Statistics fields of a bucket's hash: decisions allowed and denied, the
// decisions overrides decided or changed by kind ("oe", "ob", "ol"), those
// denied for quiet hours ("q"), per message class ("x:<class>",
// "xq:<class>") the decisions its exemptions decided: some rule would
// have denied, or made in quiet hours it passes; and per rule
// ("a:<rule>", "d:<rule>", "n:<rule>") the rule's verdicts and its
// near-limit allowed decisions, its would-be denials a class is exempt
// from ("e:<rule>", counted as allowed) and its denials for headroom only
// ("h:<rule>", counted in "d:<rule>" too), and for a shadow rule
// ("s:<rule>", "sa:<rule>") the decisions it would have denied and those
// of them that were allowed. Rule and class names hold no ':'.
const (
	fieldAllowed       = "a"
	fieldDenied        = "d"
	fieldNear          = "n"
	fieldShadow        = "s"
	fieldShadowAllowed = "sa"
	fieldExempted      = "e"
	fieldHeadroom      = "h"
	fieldQuiet         = "q"
	fieldClassExempted = "x"
	fieldClassQuiet    = "xq"
)

// overrideFields are the fields of the override counts, by kind - 1.
var overrideFields = [3]string{"oe", "ob", "ol"}

// fineKey is the hash of a policy's 10 s bucket starting at start:
// "<prefix>:stats:{<policy>:10s:<unix>}". The hash tag holds the policy
// and the bucket, so one flush spreads over the cluster's nodes.
func (r *Recorder) fineKey(policy string, start time.Time) string {
	return statsKey(r.prefix, policy, "10s", start)
}

func (r *Recorder) coarseKey(policy string, start time.Time) string {
	return statsKey(r.prefix, policy, "1m", start)
}

func statsKey(prefix, policy, step string, start time.Time) string {
	return prefix + ":stats:{" + policy + ":" + step + ":" + strconv.FormatInt(start.Unix(), 10) + "}"
}

// announceKey is the hash of the announcements made on the UTC day
// starting at day: "<prefix>:stats:{policies}:<unix>", kept 2 days, so
// that versions no longer run vanish with their day's key.
func announceKey(prefix string, day time.Time) string {
	return prefix + ":stats:{policies}:" + strconv.FormatInt(day.Unix(), 10)
}
