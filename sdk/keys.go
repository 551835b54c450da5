package sdk

import (
	"slices"
	"time"
	"unsafe"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

const hexDigits = keyname.Hex

// escapeValue escapes a subject value for a key: '%', '{', '}', ':' and
// bytes below 0x21 or equal to 0x7f become %XX; everything else (unicode
// included) passes unchanged. The result never contains a brace or a
// colon, and distinct values give distinct results.
func escapeValue(v string) string { return escapeWith(v, mustEscape) }

// escapeWith replaces every byte of v for which esc is true by %XX.
func escapeWith(v string, esc func(byte) bool) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if esc(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	buf := appendEscapedWith(make([]byte, 0, len(v)+2*n), v, esc)
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

// appendEscapedWith appends v to buf with every byte for which esc is
// true replaced by %XX.
func appendEscapedWith(buf []byte, v string, esc func(byte) bool) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; esc(c) {
			buf = append(buf, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			buf = append(buf, c)
		}
	}
	return buf
}

func mustEscape(c byte) bool {
	return c < 0x21 || c == 0x7f || c == '%' || c == '{' || c == '}' || c == ':'
}

// sanitizePrefix escapes a prefix as keyname.Prefix does (an empty prefix
// means "fc").
func sanitizePrefix(p string) string { return keyname.Prefix(p, keyname.DefaultPrefix) }

// resolved is a policy applied to a subject: the driver rules and keys.
type resolved struct {
	rules          []driver.Rule
	skipped        []string // rules left out (partial subjects only)
	base           string   // the start of every key: "<prefix>:{<shard values>}:<policy>:"
	subject        Subject  // the subject resolved (for the trail's values)
	trailKey       string
	reservationKey string
	overrideKey    string // base+"!o" under a policy WithOverrides, else ""
	// before is, per rule, the Change.Version of a predecessor (0: the
	// rule itself); nil when no rule has a predecessor.
	before []int64
}

// resolve builds the keys of p for s. With partial set, rules whose
// non-shard dimensions s lacks are skipped instead of failing; the shard
// dimensions are always required, and a value given must be valid. Each
// rule gets its own key and its dimension set's (driver.Rule.Group).
//
// A rule with changes (WithChange) is preceded by the predecessors still
// in reach at now() (every one when now is nil: Reset forgets them all),
// oldest first, each seeded by the one before it, the rule by the newest
// one (driver.Rule.Seed). now is called only for such policies.
// Errors wrap ErrInvalidSubject and ErrInvalidPolicy and never contain
// values.
func resolve(prefix string, p *Policy, s Subject, partial bool, now func() time.Time) (resolved, error) {
	var res resolved
	if err := p.valid(); err != nil {
		return res, err
	}
	// Every key is written into one buffer and cut out of one string: a
	// decision's keys cost one allocation, not one each. buf's size is the
	// most the policy's keys have taken so far (p.keyCap); append grows it
	// where a subject's are longer, and the offsets stay valid.
	buf, err := appendBase(make([]byte, 0, max(p.keyCap.Load(), 128)), prefix, p, s)
	if err != nil {
		return res, err
	}
	nb := len(buf)
	buf = appendSubjectKeys(buf, p.overrides)
	var arr [16]keySpan
	spans := arr[:0] // per entry of res.rules
	var garr [16][2]int
	groups := garr[:0] // per rule of p: its group key (zero: skipped)
	var at time.Time
	if p.hasChanges {
		res.before = make([]int64, 0, len(p.rules)+2)
		if now != nil {
			at = now()
		}
	}
	res.subject = s
	res.rules = make([]driver.Rule, 0, len(p.rules))
	for i, r := range p.rules {
		var sp keySpan
		var ok bool
		buf, sp.key, ok, err = appendRuleKey(buf, nb, p, i, s, partial)
		if err != nil {
			return res, err
		}
		if !ok {
			res.skipped = append(res.skipped, r.Name)
			groups = append(groups, [2]int{})
			continue
		}
		buf, sp.group = appendGroupSpan(buf, nb, p, i, s, groups)
		groups = append(groups, sp.group)
		dr := driverRule(r)
		dr.Wide = p.wideRule != nil && p.wideRule[i]
		if p.hasChanges {
			buf, spans, dr.Seed = res.addPredecessors(buf, nb, p, i, s, sp.group, spans, now, at)
		}
		spans = append(spans, sp)
		res.rules = append(res.rules, dr)
	}
	p.growKeyCap(len(buf))
	res.cutKeys(unsafe.String(unsafe.SliceData(buf), len(buf)), nb, p.overrides, spans)
	return res, nil
}

// keySpan is where, in resolve's buffer, one entry of resolved.rules has
// its key and its group key (start and end offsets).
type keySpan struct{ key, group [2]int }

// appendBase appends base, the start of every key of p for s, to buf:
// "<prefix>:{<shard values>}:<policy>:". It fails if s lacks or
// misspells a shard dimension.
func appendBase(buf []byte, prefix string, p *Policy, s Subject) ([]byte, error) {
	buf = append(buf, prefix...)
	buf = append(buf, ":{"...)
	for i, d := range p.shardBy {
		v, err := s.value(d)
		if err != nil {
			return buf, err
		}
		if i > 0 {
			buf = append(buf, ':')
		}
		buf = appendEscaped(buf, v)
	}
	buf = append(buf, "}:"...)
	buf = append(buf, p.name...)
	return append(buf, ':'), nil
}

// appendSubjectKeys appends, after base (all of buf), the subject's own
// keys' suffixes and copies of base: the trail's key starts with base
// (base is its prefix), the reservations' and the overrides' have their
// own copy. buf ends as base "!t" base "!h" [base "!o"].
func appendSubjectKeys(buf []byte, overrides bool) []byte {
	nb := len(buf)
	buf = append(buf, "!t"...)
	buf = append(buf, buf[:nb]...)
	buf = append(buf, "!h"...)
	if overrides {
		buf = append(buf, buf[:nb]...)
		buf = append(buf, "!o"...)
	}
	return buf
}

// appendRuleKey appends rule i's key for s to buf (base is buf[:nb]) and
// returns its span. With partial set, a rule whose non-shard dimension s
// does not give is skipped: buf comes back as it was and ok false.
func appendRuleKey(buf []byte, nb int, p *Policy, i int, s Subject, partial bool) (_ []byte, span [2]int, ok bool, _ error) {
	span[0] = len(buf)
	buf = append(buf, buf[:nb]...)
	buf = append(buf, p.rules[i].Name...)
	buf = append(buf, '.')
	buf = append(buf, p.ids[i]...)
	for _, d := range p.others[i] {
		v, err := s.value(d)
		if err != nil {
			if _, given := s[d]; partial && !given {
				return buf[:span[0]], span, false, nil
			}
			return buf, span, false, err
		}
		buf = append(buf, ':')
		buf = appendEscaped(buf, v)
	}
	span[1] = len(buf)
	return buf, span, true, nil
}

// appendGroupSpan returns the span of rule i's group key, appending it
// to buf unless groups (the spans of the rules before i) hold it: rules
// of one dimension set share their group key (the first rule's, unless
// it was skipped).
func appendGroupSpan(buf []byte, nb int, p *Policy, i int, s Subject, groups [][2]int) ([]byte, [2]int) {
	if f := p.firstOfGroup[i]; f < i && groups[f][1] > 0 {
		return buf, groups[f]
	}
	start := len(buf)
	buf = appendGroupKey(buf, buf[:nb], p, i, s)
	return buf, [2]int{start, len(buf)}
}

// addPredecessors adds before rule i the predecessors (p.changes) in
// reach at at (every one when now is nil), oldest first (changes are kept
// newest first), each seeded by the one before it; their keys go to buf
// and spans, their group key is rule i's (group). It returns the seed of
// rule i itself, and records rule i's entry of res.before.
func (res *resolved) addPredecessors(buf []byte, nb int, p *Policy, i int, s Subject, group [2]int, spans []keySpan, now func() time.Time, at time.Time) ([]byte, []keySpan, int) {
	r := &p.rules[i]
	seed := 0
	for k := len(p.changes[i]) - 1; k >= 0; k-- {
		ch := &p.changes[i][k]
		if now != nil && !ch.end.After(at) {
			continue
		}
		ps := keySpan{group: group}
		ps.key[0] = len(buf)
		buf = append(buf, buf[:nb]...)
		buf = append(buf, r.Name...)
		buf = append(buf, '.')
		buf = append(buf, ch.id...)
		for _, d := range ch.others {
			buf = append(buf, ':')
			buf = appendEscaped(buf, s[d]) // checked by appendRuleKey: same dimensions
		}
		ps.key[1] = len(buf)
		spans = append(spans, ps)
		pr := driverRule(ch.From)
		pr.Name, pr.Seed = r.Name, seed
		pr.Shadow = r.Shadow || ch.From.Shadow
		pr.Wide = p.wideRule != nil && p.wideRule[i] // From has the rule's dimensions
		res.rules = append(res.rules, pr)
		res.before = append(res.before, ch.Version)
		seed = len(res.rules)
	}
	res.before = append(res.before, 0)
	return buf, spans, seed
}

// growKeyCap raises p.keyCap, the buffer size resolve starts with, to n
// if n is more.
func (p *Policy) growKeyCap(n int) {
	for n := int64(n); ; {
		if c := p.keyCap.Load(); n <= c || p.keyCap.CompareAndSwap(c, n) {
			return
		}
	}
}

// cutKeys sets res's keys from all, resolve's buffer as one string
// (base is all[:nb], then appendSubjectKeys's keys, then the rules'
// at spans).
func (res *resolved) cutKeys(all string, nb int, overrides bool, spans []keySpan) {
	res.base = all[:nb]
	res.trailKey = all[:nb+2]
	res.reservationKey = all[nb+2 : 2*nb+4]
	if overrides {
		res.overrideKey = all[2*nb+4 : 3*nb+6]
	}
	for j, sp := range spans {
		res.rules[j].Key = all[sp.key[0]:sp.key[1]]
		res.rules[j].Group = all[sp.group[0]:sp.group[1]]
	}
}

// appendEscaped appends escapeValue(v) to buf.
func appendEscaped(buf []byte, v string) []byte { return appendEscapedWith(buf, v, mustEscape) }

// appendGroupKey appends the key of rule i's dimension set
// (driver.Rule.Group) to buf: base, "=", the rule's non-shard dimensions
// sorted and comma-separated, then ":" and each one's escaped value. Rule
// names never start with '=', so no rule key is a group key. The values
// were checked by the caller. base may alias buf.
func appendGroupKey(buf, base []byte, p *Policy, i int, s Subject) []byte {
	buf = append(buf, base...)
	buf = append(buf, p.groups[i]...)
	for _, d := range p.sorted[i] {
		buf = append(buf, ':')
		buf = appendEscaped(buf, s[d])
	}
	return buf
}

// KeyLayout is where a subject's state under a policy is kept, key by
// key (Admin.KeyLayout). Every key shares the subject's hash tag.
type KeyLayout struct {
	// Sets are the rules the subject gives the dimensions of, by set of
	// dimensions, in policy order of each set's first rule.
	Sets []KeySet
	// Trail holds the subject's recent denials (a list on Redis).
	Trail string
	// Overrides holds the subject's per-person overrides (empty unless
	// the policy reads them: WithOverrides).
	Overrides string
	// Reservations holds the subject's open reservations (a hash on
	// Redis).
	Reservations string
}

// KeySet is the rules of a policy that share their dimensions, for one
// subject.
type KeySet struct {
	// Dimensions are the rules' dimensions, sorted.
	Dimensions []string
	// Key is the set's key. The Redis backend keeps the state of the
	// set's rules there: fixed windows, sliding-window counters, GCRA
	// and sliding logs up to driver.LogLine packed into one string; larger
	// sliding logs in a sorted set at Key plus a suffix; a rule on a
	// module strategy under its own key plus a suffix (docs/DESIGN.md,
	// "Keys"). A set over more than the shard dimensions keeps its packed
	// state inside the key of the set of the shard dimensions alone (the
	// one whose Key ends in "="), as a section of its value, even when
	// the policy has no rule of that set: one key per subject
	// (docs/DESIGN.md, "One key per subject").
	Key string
	// Rules are the set's rules, in policy order, each with its own key:
	// where the memory backend keeps the rule's state. A changed rule's
	// predecessors still in reach come just before it (RuleKey.Before).
	Rules []RuleKey
}

// RuleKey is a rule's own key for one subject.
type RuleKey struct {
	Rule string
	Key  string
	// Before, when nonzero, marks the key of the rule as it was before
	// the change of that version (WithChange), still in reach: listed
	// just before the rule's own key.
	Before int64
}

// KeyLayout returns the keys of s under p (see KeyLayout), for the
// rules s gives the dimensions of. It returns the zero KeyLayout when s
// lacks a shard dimension or p is invalid. It touches no backend.
func (ad *Admin) KeyLayout(p *Policy, s Subject) KeyLayout {
	l := ad.lim()
	res, err := resolve(l.prefix, p, s, true, l.now)
	if err != nil {
		return KeyLayout{}
	}
	out := KeyLayout{Trail: res.trailKey, Reservations: res.reservationKey, Overrides: res.overrideKey}
	for n, r := range res.rules {
		i := slices.IndexFunc(out.Sets, func(k KeySet) bool { return k.Key == r.Group })
		if i < 0 {
			j := slices.IndexFunc(p.rules, func(pr Rule) bool { return pr.Name == r.Name })
			out.Sets = append(out.Sets, KeySet{Dimensions: slices.Sorted(slices.Values(p.rules[j].Dimensions)), Key: r.Group})
			i = len(out.Sets) - 1
		}
		rk := RuleKey{Rule: r.Name, Key: r.Key}
		if res.before != nil {
			rk.Before = res.before[n]
		}
		out.Sets[i].Rules = append(out.Sets[i].Rules, rk)
	}
	return out
}
