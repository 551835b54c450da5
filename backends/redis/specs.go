package redis

import (
	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/bounded"
	"github.com/freqcap/freqcap/sdk/driver"
)

// specCacheMax bounds the rule specifications a Backend keeps: when a new
// one would exceed it, the cache is emptied and refills from the rules in
// use. A policy has a handful of rules, so a bound this size is only
// reached by a process that keeps changing its rules.
const specCacheMax = 1024

// specKey identifies a rule's static specification: the whole driver.Rule
// but its Key and Group (the per-subject fields), and the strategy the server's
// report chose for its algorithm. A rule changed in any field (limit,
// window, cells, burst, calendar, zone) or moved to another strategy (a
// redetection) has another key, so the cache never returns a stale spec.
type specKey struct {
	rule     driver.Rule
	strategy capability.Strategy
}

// forcedPlain is the spec key strategy of a rule forced onto plain Lua
// (plainOnly): never a report's choice.
const forcedPlain capability.Strategy = 255

// ruleSpec is what encode sends for one rule that does not depend on the
// request: how take.lua runs it (its algorithm code, chooseRule's choice
// without the state key but with its suffix) and its staticArgs ARGV
// values, boxed once (a calendar rule's boundaries are filled in per
// call).
type ruleSpec struct {
	code, suffix          string
	cellCount, cellPeriod int64
	args                  [staticArgs]any
	// window is the rule's window in µs (a fast script's GCRA rate under
	// a limit override).
	window int64
}

// specCache maps specKey to ruleSpec, at most specCacheMax entries. It is
// safe for concurrent use.
type specCache struct {
	c bounded.Map[specKey, *ruleSpec]
}

func (c *specCache) get(k specKey) *ruleSpec    { s, _ := c.c.Get(k); return s }
func (c *specCache) put(k specKey, s *ruleSpec) { c.c.Put(k, s, specCacheMax) }
func (c *specCache) len() int                   { return c.c.Len() }

// spec returns r's static specification under rep's choices (plain: on
// plain Lua whatever they say, plainOnly), from the cache or built and
// cached. r is already validated.
func (b *Backend) spec(rep *capability.Report, r *driver.Rule, plain bool) (*ruleSpec, error) {
	k := specKey{rule: *r, strategy: rep.Choice(r.Algorithm).Strategy}
	if plain {
		k.strategy = forcedPlain
	}
	k.rule.Key, k.rule.Group = "", ""
	if s := b.specs.get(k); s != nil {
		return s, nil
	}
	ch, err := chooseRule(rep, r)
	if err != nil {
		return nil, err
	}
	if plain {
		ch = ruleChoice{key: r.Key}
	}
	s := &ruleSpec{suffix: keySuffix(ch.code), cellCount: ch.cellCount, cellPeriod: ch.cellPeriod, window: r.Window.Microseconds()}
	if err := ruleArgs(r, ch, &s.args); err != nil {
		return nil, err
	}
	s.code = s.args[0].(string)
	b.specs.put(k, s)
	return s, nil
}

// specMemo is the specs of one policy's rules (by Request.Policy) as a
// request last had them: a request whose rules are the same in every
// field a spec depends on (its per-subject and per-attempt fields aside:
// Key, Group, Keep, Exempt), under the same report and plainOnly choice,
// has the same specs, found by comparing its rules with these, cheaper
// than hashing each rule for the spec cache.
type specMemo struct {
	rep   *capability.Report
	n     int
	rules [lua.FastMax]driver.Rule // their static fields (staticRule)
	plain [lua.FastMax]bool
	specs [lua.FastMax]*ruleSpec
}

// staticRule is r without its per-subject and per-attempt fields.
func staticRule(r *driver.Rule) driver.Rule {
	s := *r
	s.Key, s.Group, s.Keep, s.Exempt = "", "", 0, driver.NotExempt
	return s
}

// newSpecMemo returns the memo of req's rules' specs under rep.
func newSpecMemo(rep *capability.Report, req *driver.Request, specs *[lua.FastMax]*ruleSpec) *specMemo {
	m := &specMemo{rep: rep, n: len(req.Rules), specs: *specs}
	for i := range req.Rules {
		m.rules[i], m.plain[i] = staticRule(&req.Rules[i]), plainOnly(req, &req.Rules[i])
	}
	return m
}

// memoSpec returns the spec of rule i of req under rep, validated
// already: m's (m may be nil) when it holds it (hit), else Backend.spec's
// (nil if it fails).
func (b *Backend) memoSpec(m *specMemo, rep *capability.Report, req *driver.Request, i int) (sp *ruleSpec, hit bool) {
	r := &req.Rules[i]
	plain := plainOnly(req, r)
	if m != nil && m.rep == rep && m.n == len(req.Rules) && m.plain[i] == plain && m.rules[i] == staticRule(r) {
		return m.specs[i], true
	}
	sp, err := b.spec(rep, r, plain)
	if err != nil {
		return nil, false
	}
	return sp, false
}
