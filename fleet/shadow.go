package fleet

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/internal/hash64"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver/stats"
)

// subjectHash is a subject's 64-bit identity from its shard values as
// keys hold them (sdk.Event.Shard): the same in every process (FNV-1a,
// then the SplitMix64 finaliser to spread its bits), with no allocation.
// It stands for the subject in the shadow rules' people counts and picks
// the subjects of the traffic sample.
func subjectHash(shard string) uint64 { return hash64.String(shard) }

// peopleKey is a subject a rule denied (enforced) or a shadow rule would
// have denied: the rule's index in its policy, the ShadowPeopleStep
// bucket, the subject's hash.
type peopleKey struct {
	rule     int32
	enforced bool
	bucket   int64
	subject  uint64
}

// peopleSet holds a stripe's peopleKeys until a flush takes them.
type peopleSet struct {
	mu sync.Mutex
	m  map[peopleKey]struct{}
}

func (s *peopleSet) add(k peopleKey, lost *atomic.Int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; ok {
		return
	}
	if s.m == nil {
		s.m = make(map[peopleKey]struct{})
	}
	if len(s.m) >= maxPeoplePending {
		lost.Add(1)
		return
	}
	s.m[k] = struct{}{}
}

func (s *peopleSet) drain() map[peopleKey]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	s.m = nil
	return m
}

// appendPeople adds the drained people of ps to us, one stats.Unique per
// rule and bucket (merged with those already there).
func (r *Recorder) appendPeople(us []stats.Unique, ps *policyStats, m map[peopleKey]struct{}) []stats.Unique {
	for k := range m {
		if int(k.rule) >= len(ps.rules) {
			continue
		}
		start := time.Unix(k.bucket*int64(ShadowPeopleStep/time.Second), 0)
		key := peopleKeyName(r.prefix, ps.name, peopleKind(k.enforced), ps.rules[k.rule], start)
		i := len(us) - 1
		for ; i >= 0 && us[i].Key != key; i-- {
		}
		if i < 0 {
			us = append(us, stats.Unique{Key: key, ExpireAt: start.Add(ShadowPeopleStep + StatsCoarseRetention)})
			i = len(us) - 1
		}
		us[i].Add = append(us[i].Add, hex(k.subject))
	}
	return us
}

// peopleKeyName is the distinct-subject counter of a rule's
// ShadowPeopleStep bucket starting at start, of kind "shadow" (would have
// denied) or "denied": "<prefix>:stats:{<policy>:<kind>:<rule>}:<unix>".
// The hash tag holds the policy, the kind and the rule, so that one
// PFCOUNT counts a window's buckets on a cluster.
func peopleKeyName(prefix, policy, kind, rule string, start time.Time) string {
	return prefix + ":stats:{" + policy + ":" + kind + ":" + rule + "}:" + strconv.FormatInt(start.Unix(), 10)
}

// peopleKind names a people counter's kind in its key.
func peopleKind(enforced bool) string {
	if enforced {
		return "denied"
	}
	return "shadow"
}

// ShadowStats is what a policy's shadow rules would have denied over a
// window, summed over every process recording to the same storage
// (Reader.Shadow).
type ShadowStats struct {
	Policy string
	// From and To bound the window, as Stats's do.
	From, To time.Time
	// Rules holds the policy's shadow rules in policy order, then any
	// other rule that was shadow during the window (by name).
	Rules []ShadowRuleStats
	// Enforced holds, to compare with, the denials of the policy's other
	// rules over the same window, in policy order.
	Enforced []RuleDenials
}

// RuleDenials is what an enforced rule denied over a window: Attempts
// as RuleStats.Denied counts them, People the distinct subjects among
// them, counted as ShadowRuleStats.People is.
type RuleDenials struct {
	Rule             string
	Attempts, People int64
	PeopleFrom       time.Time
}

// ShadowRuleStats is what one shadow rule would have denied.
type ShadowRuleStats struct {
	Rule string
	// Shadow reports that the rule is a shadow rule of the policy passed
	// to Reader.Shadow (false: it was one earlier in the window).
	Shadow bool
	// Attempts counts the decisions it would have denied; Allowed, those
	// of them that were allowed (what enforcing it would have added to
	// the denials).
	Attempts, Allowed int64
	// People is the number of distinct subjects (shard values) among
	// Attempts, counted over the ShadowPeopleStep buckets from PeopleFrom
	// to To (so over up to one step more than the window): a
	// HyperLogLog's estimate on Redis (standard error 0.81%, nearly exact
	// for small numbers), exact up to 4096 on the memory backend.
	People     int64
	PeopleFrom time.Time
}

// Shadow reads what the shadow rules of policy p (by name) would have
// denied over the window ending now (at most StatsCoarseRetention):
// attempts, from the statistics Stats reads, and distinct people; and,
// beside them, what p's enforced rules denied. Keys read beyond Stats's:
// "<prefix>:stats:{<policy>:shadow:<rule>}:<unix>" and
// "<prefix>:stats:{<policy>:denied:<rule>}:<unix>", one HyperLogLog per
// rule per ShadowPeopleStep.
func (rd *Reader) Shadow(ctx context.Context, p *sdk.Policy, window time.Duration) (ShadowStats, error) {
	st, err := rd.stats(ctx, "shadow", p, window)
	if err != nil {
		return ShadowStats{}, err
	}
	out := ShadowStats{Policy: st.Policy, From: st.From, To: st.To}
	shadow := map[string]bool{}
	for _, r := range p.Rules() {
		shadow[r.Name] = r.Shadow
	}
	for _, rs := range st.Rules {
		if shadow[rs.Rule] || rs.ShadowDenied > 0 {
			out.Rules = append(out.Rules, ShadowRuleStats{Rule: rs.Rule, Shadow: shadow[rs.Rule], Attempts: rs.ShadowDenied, Allowed: rs.ShadowAllowed})
		}
	}
	for _, r := range p.Rules() {
		if !r.Shadow {
			out.Enforced = append(out.Enforced, RuleDenials{Rule: r.Name})
		}
	}
	for i := range out.Enforced {
		for _, rs := range st.Rules {
			if rs.Rule == out.Enforced[i].Rule {
				out.Enforced[i].Attempts = rs.Denied
			}
		}
	}
	if len(out.Rules)+len(out.Enforced) == 0 {
		return out, nil
	}
	from := st.To.Add(-window).Truncate(ShadowPeopleStep)
	var q stats.Query
	group := func(kind, rule string) []string {
		var g []string
		for at := from; !at.After(st.To); at = at.Add(ShadowPeopleStep) {
			g = append(g, peopleKeyName(rd.prefix, st.Policy, kind, rule, at))
		}
		return g
	}
	for _, r := range out.Rules {
		q.Uniques = append(q.Uniques, group(peopleKind(false), r.Rule))
	}
	for _, r := range out.Enforced {
		q.Uniques = append(q.Uniques, group(peopleKind(true), r.Rule))
	}
	ctx, cancel := rd.withTimeout(ctx)
	defer cancel()
	data, err := rd.st.ReadStats(ctx, q)
	if err != nil {
		return ShadowStats{}, fmt.Errorf("fleet: shadow: %w", err)
	}
	if len(data.Uniques) != len(q.Uniques) {
		return ShadowStats{}, fmt.Errorf("fleet: shadow: backend answered %d counts, want %d", len(data.Uniques), len(q.Uniques))
	}
	for i := range out.Rules {
		out.Rules[i].People, out.Rules[i].PeopleFrom = data.Uniques[i], from
	}
	for i := range out.Enforced {
		out.Enforced[i].People, out.Enforced[i].PeopleFrom = data.Uniques[len(out.Rules)+i], from
	}
	return out, nil
}
