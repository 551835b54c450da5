package sdk

import (
	"slices"
	"unsafe"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// DefaultPrefix is the first segment of every key unless WithPrefix says
// otherwise.
const DefaultPrefix = "fc"

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
// means DefaultPrefix).
func sanitizePrefix(p string) string { return keyname.Prefix(p, DefaultPrefix) }

// resolved is a policy applied to a subject: the driver rules and keys.
type resolved struct {
	rules          []driver.Rule
	skipped        []string // rules left out (partial subjects only)
	base           string   // the start of every key: "<prefix>:{<shard values>}:<policy>:"
	subject        Subject  // the subject resolved (for the trail's values)
	trailKey       string
	reservationKey string
}

// resolve builds the keys of p for s. With partial set, rules whose
// non-shard dimensions s lacks are skipped instead of failing; the shard
// dimensions are always required, and a value given must be valid. Each
// rule gets its own key and its dimension set's (driver.Rule.Group).
// Errors wrap ErrInvalidSubject and
// ErrInvalidPolicy and never contain values.
func resolve(prefix string, p *Policy, s Subject, partial bool) (resolved, error) {
	var res resolved
	if err := p.valid(); err != nil {
		return res, err
	}
	// Every key is written into one buffer and cut out of one string: a
	// decision's keys cost one allocation, not one each. buf's size is the
	// most the policy's keys have taken so far (p.keyCap); append grows it
	// where a subject's are longer, and the offsets stay valid.
	buf := make([]byte, 0, max(p.keyCap.Load(), 128))
	buf = append(buf, prefix...)
	buf = append(buf, ":{"...)
	for i, d := range p.shardBy {
		v, err := s.value(d)
		if err != nil {
			return res, err
		}
		if i > 0 {
			buf = append(buf, ':')
		}
		buf = appendEscaped(buf, v)
	}
	buf = append(buf, "}:"...)
	buf = append(buf, p.name...)
	buf = append(buf, ':')
	nb := len(buf)
	// The trail's key starts with base (base is its prefix), the
	// reservations' has its own copy.
	buf = append(buf, "!t"...)
	buf = append(buf, buf[:nb]...)
	buf = append(buf, "!h"...)
	type span struct{ key, group [2]int } // zero key: the rule was skipped
	var arr [16]span
	spans := arr[:0]
	res.subject = s
	res.rules = make([]driver.Rule, 0, len(p.rules))
rules:
	for i, r := range p.rules {
		var sp span
		sp.key[0] = len(buf)
		buf = append(buf, buf[:nb]...)
		buf = append(buf, r.Name...)
		buf = append(buf, '.')
		buf = append(buf, p.ids[i]...)
		for _, d := range p.others[i] {
			v, err := s.value(d)
			if err != nil {
				if _, given := s[d]; partial && !given {
					res.skipped = append(res.skipped, r.Name)
					buf = buf[:sp.key[0]]
					spans = append(spans, span{})
					continue rules
				}
				return res, err
			}
			buf = append(buf, ':')
			buf = appendEscaped(buf, v)
		}
		sp.key[1] = len(buf)
		// Rules of one dimension set share their group key (the first
		// rule's, unless it was skipped).
		if f := p.firstOfGroup[i]; f < i && spans[f].group[1] > 0 {
			sp.group = spans[f].group
		} else {
			sp.group[0] = len(buf)
			buf = appendGroupKey(buf, buf[:nb], p, i, s)
			sp.group[1] = len(buf)
		}
		spans = append(spans, sp)
		res.rules = append(res.rules, driver.Rule{
			Name:       r.Name,
			Algorithm:  driver.Algorithm(r.Algorithm),
			Limit:      r.Limit,
			Window:     r.Window,
			SubWindows: r.SubWindows,
			Burst:      r.Burst,
			Calendar:   driver.CalendarUnit(r.Calendar),
			Location:   r.Location,
		})
	}
	for n := int64(len(buf)); ; {
		if c := p.keyCap.Load(); n <= c || p.keyCap.CompareAndSwap(c, n) {
			break
		}
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	res.base = all[:nb]
	res.trailKey = all[:nb+2]
	res.reservationKey = all[nb+2 : 2*nb+4]
	j := 0
	for _, sp := range spans {
		if sp.key[1] == 0 {
			continue // skipped
		}
		res.rules[j].Key = all[sp.key[0]:sp.key[1]]
		res.rules[j].Group = all[sp.group[0]:sp.group[1]]
		j++
	}
	return res, nil
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
// key (Limiter.KeyLayout). Every key shares the subject's hash tag.
type KeyLayout struct {
	// Sets are the rules the subject gives the dimensions of, by set of
	// dimensions, in policy order of each set's first rule.
	Sets []KeySet
	// Trail holds the subject's recent denials (a list on Redis).
	Trail string
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
	// set's rules there: fixed windows, sliding-window counters and GCRA
	// packed into one string; sliding logs in a sorted set at Key plus a
	// suffix; a rule on a module strategy under its own key plus a suffix
	// (docs/DESIGN.md, "Keys").
	Key string
	// Rules are the set's rules, in policy order, each with its own key:
	// where the memory backend keeps the rule's state.
	Rules []RuleKey
}

// RuleKey is a rule's own key for one subject.
type RuleKey struct {
	Rule string
	Key  string
}

// KeyLayout returns the keys of s under p (see KeyLayout), for the
// rules s gives the dimensions of. It returns the zero KeyLayout when s
// lacks a shard dimension or p is invalid. It touches no backend.
func (l *Limiter) KeyLayout(p *Policy, s Subject) KeyLayout {
	res, err := resolve(l.prefix, p, s, true)
	if err != nil {
		return KeyLayout{}
	}
	out := KeyLayout{Trail: res.trailKey, Reservations: res.reservationKey}
	for _, r := range res.rules {
		i := slices.IndexFunc(out.Sets, func(k KeySet) bool { return k.Key == r.Group })
		if i < 0 {
			j := slices.IndexFunc(p.rules, func(pr Rule) bool { return pr.Name == r.Name })
			out.Sets = append(out.Sets, KeySet{Dimensions: slices.Sorted(slices.Values(p.rules[j].Dimensions)), Key: r.Group})
			i = len(out.Sets) - 1
		}
		out.Sets[i].Rules = append(out.Sets[i].Rules, RuleKey{Rule: r.Name, Key: r.Key})
	}
	return out
}
