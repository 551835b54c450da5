package sdk

import (
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

// DefaultPrefix is the first segment of every key unless WithPrefix says
// otherwise.
const DefaultPrefix = "fc"

const hexDigits = "0123456789ABCDEF"

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
	var b strings.Builder
	b.Grow(len(v) + 2*n)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if esc(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func mustEscape(c byte) bool {
	return c < 0x21 || c == 0x7f || c == '%' || c == '{' || c == '}' || c == ':'
}

// sanitizePrefix keeps [A-Za-z0-9_.-] and escapes every other byte as %XX,
// so a prefix can neither open a hash tag nor add a separator, and distinct
// prefixes stay distinct. An empty prefix means DefaultPrefix.
func sanitizePrefix(p string) string {
	if p == "" {
		return DefaultPrefix
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if nameByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

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
// dimensions are always required, and a value given must be valid. With
// groups set, each rule gets its dimension set's key (driver.Rule.Group).
// Errors wrap ErrInvalidSubject and
// ErrInvalidPolicy and never contain values.
func resolve(prefix string, p *Policy, s Subject, partial, groups bool) (resolved, error) {
	var res resolved
	if err := p.valid(); err != nil {
		return res, err
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(p.name) + 4 + 24*len(p.shardBy))
	b.WriteString(prefix)
	b.WriteString(":{")
	for i, d := range p.shardBy {
		v, err := s.value(d)
		if err != nil {
			return res, err
		}
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(escapeValue(v))
	}
	b.WriteString("}:")
	b.WriteString(p.name)
	b.WriteByte(':')
	base := b.String()
	res.base = base
	res.subject = s
	res.trailKey = base + "!t"
	res.reservationKey = base + "!h"
	res.rules = make([]driver.Rule, 0, len(p.rules))
	var seen [16]string // group keys by rule index, for the first 16 rules
rules:
	for i, r := range p.rules {
		var k strings.Builder
		k.Grow(len(base) + len(r.Name) + 8 + 24*len(p.others[i]))
		k.WriteString(base)
		k.WriteString(r.Name)
		k.WriteByte('.')
		k.WriteString(p.ids[i])
		for _, d := range p.others[i] {
			v, err := s.value(d)
			if err != nil {
				if _, given := s[d]; partial && !given {
					res.skipped = append(res.skipped, r.Name)
					continue rules
				}
				return res, err
			}
			k.WriteByte(':')
			k.WriteString(escapeValue(v))
		}
		// Rules of one dimension set share their group key's string;
		// only a driver.Grouped backend gets one (groups).
		var group string
		switch f := p.firstOfGroup[i]; {
		case !groups:
		case f < i && f < len(seen) && seen[f] != "":
			group = seen[f]
		default:
			group = groupKey(base, p, i, s)
		}
		if i < len(seen) {
			seen[i] = group
		}
		res.rules = append(res.rules, driver.Rule{
			Name:       r.Name,
			Key:        k.String(),
			Group:      group,
			Algorithm:  driver.Algorithm(r.Algorithm),
			Limit:      r.Limit,
			Window:     r.Window,
			SubWindows: r.SubWindows,
			Burst:      r.Burst,
			Calendar:   driver.CalendarUnit(r.Calendar),
			Location:   r.Location,
		})
	}
	return res, nil
}

// groupKey returns the key of rule i's dimension set (driver.Rule.Group):
// base, "=", the rule's non-shard dimensions sorted and comma-separated,
// then ":" and each one's escaped value. Rule names never start with '=',
// so no rule key is a group key. The values were checked by the caller.
func groupKey(base string, p *Policy, i int, s Subject) string {
	g := p.groups[i]
	var b strings.Builder
	b.Grow(len(base) + len(g) + 24*len(p.others[i]))
	b.WriteString(base)
	b.WriteString(g)
	for _, d := range p.sorted[i] {
		b.WriteByte(':')
		b.WriteString(escapeValue(s[d]))
	}
	return b.String()
}
