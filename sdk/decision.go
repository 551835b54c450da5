package sdk

import (
	"slices"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Decision is the answer to one request: allowed or not, and for every
// rule its count, limit and timing, so that a denial can be explained
// ("recv-1m: 15/15, retry in 12s").
//
// A denial is a Decision with Allowed false, not an error. The zero
// Decision denies with no rules; it is what the methods return alongside
// an error (except Wait, which returns its last denial).
type Decision struct {
	// Allowed reports whether every enforced rule admitted the cost (and,
	// for Take, Allow, TakeBatch, Reserve and Wait, that it was consumed
	// from every rule but the shadow rules that would have denied), or
	// that an Exempt override admitted it; a Block override denies it.
	// Shadow rules never deny (ShadowDenied).
	Allowed bool
	// Policy is the policy's name.
	Policy string
	// At is the backend's clock at the decision (for a degraded decision:
	// the Limiter's clock).
	At time.Time
	// Rules holds one entry per rule, in policy order (nil when Degraded);
	// a rule's former selves still in reach (WithChange) come just before
	// it, under its name, with RuleDecision.Before set.
	Rules []RuleDecision
	// Denied names the rules that denied, in policy order, each once
	// (none when an override decided: see Override).
	Denied []string
	// RetryAfter is the longest RetryAfter of the denying rules, moved
	// past quiet hours (WithQuietHours: until they end when they denied):
	// how long until the request could be admitted if nothing else is
	// taken (NextEligible is that instant). It is zero when allowed, and
	// when only CostTooHigh rules denied. Under a Block override it runs
	// until the block ends (zero without end).
	RetryAfter time.Duration
	// CostTooHigh reports that some rule can never admit this cost.
	CostTooHigh bool
	// Degraded reports that the backend failed and the policy's fail-open
	// setting answered instead; Err holds the failure.
	Degraded bool
	// Err is the backend error behind a degraded decision.
	Err error
	// NonAtomic reports that the backend could not make this decision
	// all-or-nothing: it compensated instead, or, for a denial, may have
	// left units consumed in a rule it could not give them back to
	// (under-admission, never over-admission: docs/MODULES.md, "Bare
	// mode").
	NonAtomic bool
	// Replayed reports that this is the decision first made for the
	// attempt's idempotency key, returned again: nothing was consumed this
	// time, and At and the timings are those of the first decision.
	Replayed bool
	// Cached reports a denial answered by the policy's hot-deny cache,
	// without a backend call: the counts are those of the cached denial,
	// the timings are reduced by the time since its call began, and At is
	// advanced by the time since its answer came back (never past now).
	Cached bool
	// ShadowDenied names the shadow rules (Rule.Shadow) that would have
	// denied, in policy order; they never deny (Denied leaves them out).
	ShadowDenied []string
	// Override is the per-person override that decided this decision
	// (a Block or an Exempt) or changed one of its rules' limits; its ID
	// is 0 when none applied (see Admin.SetOverride).
	Override driver.Override
	// Durable reports that the replicas the backend was asked to wait for
	// (the Redis backend's Options.Durability) acknowledged this
	// decision's writes before the wait's timeout, so that a failover to
	// one of them keeps its count; Replicas is how many replicas did.
	// Both are zero (false, 0) when the backend waits for no replica (the
	// default: replication is asynchronous, docs/DESIGN.md, "Replication
	// and failover"), for decisions that consume nothing (Peek,
	// PeekBatch), for degraded, Cached and Replayed decisions, and when fewer
	// replicas than asked acknowledged in time. The decision stands in
	// every case: it was made and counted on the master, and is never
	// turned into an error (a retry would count it twice). A caller that
	// needs certainty may treat an allowed decision that is not Durable as
	// it sees fit, e.g. as a denial.
	Durable  bool
	Replicas int
	// Class is the attempt's message class (Attempt.Class), "" without.
	// Exempted names the rules that would have denied but exempt the
	// class (Class, WithClass), in policy order: the attempt passed them.
	Class    string
	Exempted []string
	// Headroom reports that some rule denied only because its last units
	// are kept for higher priorities (RuleDecision.Headroom): a higher
	// Attempt.Priority would have been admitted by it.
	Headroom bool
	// Rooms is, for each rule with headroom (Rule.WithHeadroom), what each
	// priority may still use of it, from priority 0 up: one entry for
	// priority 0 and one per tier (Room.Priority, the tier's lowest).
	Rooms []Room
	// Quiet, when not zero, is when the quiet hours the decision fell in
	// end (WithQuietHours): the attempt was denied for them, or, Allowed,
	// passed them as its class allows.
	Quiet time.Time
	// NextEligible is, for a denial, the earliest instant at which the
	// same attempt would be allowed, if nothing else is taken: every rule
	// admits it then (each one's retry-after, calendar windows included)
	// and, unless its class passes them, it is outside quiet hours (in the
	// recipient's zone: WithQuietHours). Zero when allowed, and when no
	// instant will do (CostTooHigh, a block without end). Wait sleeps
	// until it.
	NextEligible time.Time
}

// RuleDecision is one rule's part of a Decision.
type RuleDecision struct {
	// Rule is the rule's name.
	Rule string
	// Algorithm is the rule's algorithm.
	Algorithm driver.Algorithm
	// Allowed reports whether this rule admits the cost.
	Allowed bool
	// Used is the count after the call (including the cost only if it was
	// consumed). Limit is the rule's limit as reported (GCRA: Burst+1),
	// and Remaining is Limit-Used, never negative.
	Used, Limit, Remaining int64
	// ResetAfter is how long until Used is back to zero if nothing more is
	// taken. RetryAfter is, when the rule denies, how long until it will
	// admit the cost.
	ResetAfter, RetryAfter time.Duration
	// CostTooHigh reports that the cost exceeds the rule's limit.
	CostTooHigh bool
	// Strategy names how the backend evaluated the rule (its storage
	// strategy, e.g. "lua-hash" or "tairhash"); empty if it does not say.
	Strategy string
	// Shadow reports a shadow rule (Rule.Shadow): Allowed says what it
	// would have decided; it never denies.
	Shadow bool
	// Exempt is how the attempt's class is exempt from the rule
	// (WithClass; driver.NotExempt: not): an exempt rule never denies, and
	// Allowed says what it would have decided.
	Exempt driver.Exemption
	// Keep is how many of the rule's last units the attempt's priority may
	// not use (Rule.WithHeadroom); Remaining is then what this priority
	// has left. Headroom reports that the rule denied only because of
	// them (Decision.Rooms: what each priority may still use).
	Keep     int64
	Headroom bool
	// Before, when nonzero, reports the rule as it was before the change
	// of that policy-store version (WithChange): enforced beside its
	// successor (same Rule name) until its state proves nothing more.
	Before int64
}

// Inspection is a read-only view of a subject under a policy: each rule's
// state (as a cost-1 peek) and the recent denials. It is what support
// staff read to answer "why was this user blocked?".
type Inspection struct {
	Policy string
	// At is the backend's clock.
	At time.Time
	// Rules are the rules whose dimensions the subject gives, in policy
	// order, each preceded by its former selves still in reach
	// (RuleDecision.Before, as in Decision.Rules).
	Rules []RuleDecision
	// Skipped names the rules needing dimension values the subject lacks.
	Skipped []string
	// Denials are the subject's recent denials under the policy, newest
	// first: at most TrailMax of them.
	Denials []Denial
	// TrailMax and TrailTTL are the policy's trail settings: the trail
	// keeps the newest TrailMax denials, and is dropped TrailTTL after the
	// last one.
	TrailMax int
	TrailTTL time.Duration
	// TrailFull reports that the trail holds TrailMax entries, so older
	// denials may have been dropped: it goes back to the oldest entry's
	// time only. When it is not full it holds every denial since its
	// oldest entry, and there was none in the TrailTTL before that one.
	TrailFull bool
}

// TrailSince returns the time of the oldest denial in the trail (zero
// when it is empty): how far back the trail goes.
func (in Inspection) TrailSince() time.Time {
	if len(in.Denials) == 0 {
		return time.Time{}
	}
	return in.Denials[len(in.Denials)-1].At
}

// Denial is one entry of a denial trail: an attempt that some rule
// denied, at the backend's time.
type Denial struct {
	At         time.Time
	Policy     string
	Rule       string
	Used       int64 // the rule's count when it denied
	Limit      int64
	Cost       int64
	RetryAfter time.Duration
	// CostTooHigh: the cost could never fit; RetryAfter is zero.
	CostTooHigh bool
	// Values are the attempt's values of the policy's dimensions other
	// than the shard ones (e.g. "content": a fingerprint): what was
	// blocked. Nil when the attempt gave none, and for entries written
	// before values were recorded. At most 8 of them.
	Values map[string]string
	// ValuesPartial reports that some of the attempt's values were left
	// out of the entry (more than 8, or more than
	// 1,024 bytes escaped).
	ValuesPartial bool
	// Shadow reports a shadow rule's denial: the rule would have denied,
	// the attempt may well have been allowed.
	Shadow bool
	// Exempt reports an exempt rule's would-be denial (WithClass): the
	// attempt's class passed it. Quiet reports a denial for quiet hours
	// (WithQuietHours): Rule is empty, and RetryAfter runs until they end.
	Exempt bool
	Quiet  bool
	// Class, Priority and Identity are the attempt's (Attempt.Class,
	// Priority, Identity), recorded with the entry; empty and 0 when it
	// gave none.
	Class    string
	Priority int
	Identity string
	// driver.Override, when nonzero, is the Block override that denied ("denied
	// by block until …"): Rule is empty, Until is when the block ends
	// (At for a block without end).
	Override int64
}

// Until is when the rule that denied would admit the cost again, if
// nothing more were taken: At + RetryAfter (At for CostTooHigh).
func (d Denial) Until() time.Time { return d.At.Add(d.RetryAfter) }

// denials converts a driver trail.
func denials(tr []driver.Denial) []Denial {
	if tr == nil {
		return nil
	}
	out := make([]Denial, len(tr))
	for i, d := range tr {
		out[i] = Denial{
			At: d.At, Policy: d.Policy, Rule: d.Rule,
			Used: d.Used, Limit: d.Limit, Cost: d.Cost,
			RetryAfter: d.RetryAfter, CostTooHigh: d.CostTooHigh,
			Shadow: d.Shadow, Override: d.Override,
			Exempt: d.Exempt, Quiet: d.Quiet,
		}
		out[i].Values, out[i].ValuesPartial = parseTrailValues(d.Values)
		trailMeta(&out[i])
	}
	return out
}

// Event reports one decision to the observers set by WithObserver.
type Event struct {
	// Policy is the policy's name; Op is the operation: "take" (Take,
	// Allow, TakeBatch), "peek" (Peek, PeekBatch), "reserve", "wait"
	// (one event per attempt Wait makes) or "inspect".
	Policy, Op string
	// PolicyRef is the policy decided under (the one passed to the call).
	PolicyRef *Policy
	// Shard is the subject's shard values as its storage keys hold them
	// (each escaped, joined by ':'; the keys' hash tag), for every Op but
	// "inspect" (empty). It shares the decision's key buffer: copy it to
	// keep it.
	Shard string
	// Decision is the decision made (zero when Err is set and the policy
	// is fail-closed).
	Decision Decision
	// Err is the backend error, if any (also set for degraded decisions).
	Err error
	// Latency is the time the backend call took, by the Limiter's clock
	// (for a batch: the whole batch's call; zero for a Cached decision).
	Latency time.Duration
	// Batch is the number of attempts of the TakeBatch or PeekBatch
	// call the decision belongs to (0 for single calls).
	Batch int
	// Subject is the attempt's subject as the caller gave it, for every
	// Op but "inspect" (nil): the caller's map, not a copy (read it
	// during the observer's call only, and never change it). Cost is the
	// attempt's cost (0 for "inspect").
	Subject Subject
	Cost    int64
	// Priority, Zone and Identity are the attempt's (Attempt.Priority,
	// Zone, Identity; its class is Decision.Class), for every Op but
	// "inspect", so that an observer can record the attempt whole (a
	// what-if replay decides it again as it was).
	Priority int
	Zone     *time.Location
	Identity string
}

// decide turns a backend result into a Decision. rules are the resolved
// rules sent, in policy order; before is resolved.before (nil: no
// predecessors). Shadow rules never deny: they are named in ShadowDenied
// and leave Denied, RetryAfter and CostTooHigh alone. A rule and its
// predecessors share a name, which Denied and ShadowDenied hold once. An
// Exempt override's decision has no Denied; a Block's has none either and
// waits until the block's end.
func decide(policy string, rules []driver.Rule, before []int64, res driver.Result) Decision {
	d := Decision{
		Allowed:   res.Allowed,
		Policy:    policy,
		At:        res.Now,
		Rules:     ruleDecisions(rules, res.Rules),
		NonAtomic: res.NonAtomic,
		Replayed:  res.Replayed,
		Override:  res.Override,
		Durable:   res.Durable,
		Replicas:  res.Replicas,
	}
	for i, rd := range d.Rules {
		if before != nil {
			d.Rules[i].Before = before[i]
		}
		if rules[i].Exempt != driver.NotExempt {
			continue // never denies: Policy.explain names it
		}
		if rd.Shadow {
			if !rd.Allowed && !slices.Contains(d.ShadowDenied, rd.Rule) {
				d.ShadowDenied = append(d.ShadowDenied, rd.Rule)
			}
			continue
		}
		if rd.CostTooHigh {
			d.CostTooHigh = true
		}
		if !rd.Allowed {
			if before == nil || !slices.Contains(d.Denied, rd.Rule) {
				d.Denied = append(d.Denied, rd.Rule)
			}
			if !d.Allowed && rd.RetryAfter > d.RetryAfter {
				d.RetryAfter = rd.RetryAfter
			}
		}
	}
	if !res.Quiet.IsZero() && res.Quiet.After(res.Now) {
		d.RetryAfter = max(d.RetryAfter, res.Quiet.Sub(res.Now))
	}
	if res.Override.ID != 0 {
		switch res.Override.Kind {
		case driver.Exempt:
			d.Denied, d.RetryAfter, d.CostTooHigh = nil, 0, false
		case driver.Block:
			d.Denied, d.RetryAfter, d.CostTooHigh = nil, 0, false
			if u := res.Override.Until; !u.IsZero() && u.After(res.Now) {
				d.RetryAfter = u.Sub(res.Now)
			}
		}
	}
	return d
}

func ruleDecisions(rules []driver.Rule, rr []driver.RuleResult) []RuleDecision {
	out := make([]RuleDecision, len(rules))
	for i, r := range rules {
		x := rr[i]
		out[i] = RuleDecision{
			Rule:        r.Name,
			Algorithm:   driver.Algorithm(r.Algorithm),
			Allowed:     x.Allowed,
			Used:        x.Used,
			Limit:       x.Limit,
			Remaining:   x.Remaining,
			ResetAfter:  x.ResetAfter,
			RetryAfter:  x.RetryAfter,
			CostTooHigh: x.CostTooHigh,
			Strategy:    x.Strategy,
			Shadow:      r.Shadow,
		}
	}
	return out
}
