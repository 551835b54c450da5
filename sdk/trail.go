package sdk

import (
	"slices"
	"strconv"
	"strings"
)

// The values field of a denial trail entry: what was blocked. This file
// owns its format. The sdk encodes it once per consuming request
// (driver.Request.TrailValues), a backend stores it verbatim as the last
// field of each trail entry it writes ("at µs|policy|rule|used|limit|cost|
// retry µs|ctl|values") and returns it verbatim (driver.Denial.Values),
// and denials decodes it. It lists the attempt's values of the policy's
// dimensions other than the shard ones (ShardBy: those are in the trail's
// key already), in the policy's dimension order, as "name=value" pairs
// joined by ','. Names and values are escaped as in storage keys
// (escapeValue) and also '|', ',' and '=' become %XX, so neither the
// entry's separator nor the pairs' can appear inside them. An empty field
// (or an entry written before values were recorded) means no values.

// Bounds of what a denial trail entry records of its attempt
// (Denial.Values): the values of the policy's dimensions other than the
// shard ones, at most maxTrailValues of them in at most maxTrailValuesLen
// bytes once escaped. Values that do not fit are left out, and
// Denial.ValuesPartial says so.
const (
	// maxTrailValues is the most dimension values one trail entry records.
	maxTrailValues = 8
	// maxTrailValuesLen bounds the encoded values of one trail entry, in
	// bytes (a value of MaxValueLen bytes, every one escaped, takes 768).
	maxTrailValuesLen = 1024
)

// trailMore marks an encoding from which some pairs were left out.
const trailMore = "+"

// escapeTrail escapes v for the values field: as escapeValue, and '|', ','
// and '=' too.
func escapeTrail(v string) string {
	return escapeWith(v, func(c byte) bool { return mustEscape(c) || c == '|' || c == ',' || c == '=' })
}

// unescape reverses escapeValue and escapeTrail: %XX becomes the byte
// 0xXX. It reports false on a malformed escape.
func unescape(v string) (string, bool) {
	if !strings.Contains(v, "%") {
		return v, true
	}
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(v) {
			return "", false
		}
		hi, lo := unhex(v[i+1]), unhex(v[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// trailValues encodes the values of s for p's trail entries (see above).
// It returns "" when p has no dimension beyond the shard ones, or s gives
// none of them.
func trailValues(p *Policy, s Subject) string {
	if len(p.dims) == len(p.shardBy) {
		return "" // no other dimension: the common case costs nothing
	}
	var b strings.Builder
	n := 0
	for _, d := range p.dims {
		if slices.Contains(p.shardBy, d) {
			continue
		}
		v, ok := s[d]
		if !ok || v == "" {
			continue
		}
		ed, ev := escapeTrail(d), escapeTrail(v) // no copy when nothing is escaped
		sep := 0
		if n > 0 {
			sep = 1
		}
		if n == maxTrailValues || b.Len()+sep+len(ed)+1+len(ev)+len(","+trailMore) > maxTrailValuesLen {
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteString(trailMore)
			break
		}
		if n == 0 {
			b.Grow(len(ed) + 1 + len(ev))
		} else {
			b.WriteByte(',')
		}
		b.WriteString(ed)
		b.WriteByte('=')
		b.WriteString(ev)
		n++
	}
	return b.String()
}

// parseTrailValues decodes a values field. Malformed pairs (never written
// by this sdk) are skipped and make the result partial.
func parseTrailValues(f string) (vals map[string]string, partial bool) {
	if f == "" {
		return nil, false
	}
	for _, pair := range strings.Split(f, ",") {
		if pair == trailMore {
			partial = true
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" || v == "" {
			partial = true
			continue
		}
		k, okk := unescape(k)
		v, okv := unescape(v)
		if !okk || !okv {
			partial = true
			continue
		}
		if vals == nil {
			vals = map[string]string{}
		}
		vals[k] = v
	}
	return vals, partial
}

// The trail values' pairs that record the attempt's messaging fields
// (never a dimension: dimension names hold no '@').
const (
	trailClass    = "@class"
	trailPriority = "@priority"
	trailIdentity = "@identity"
)

// withTrailMeta returns tv with a's class, priority and identity first
// (each when given); the dimension values are left out, marked partial,
// when both would pass maxTrailValuesLen.
func withTrailMeta(tv string, a Attempt) string {
	if a.Class == "" && a.Priority == 0 && a.Identity == "" {
		return tv
	}
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(escapeTrail(v))
	}
	if a.Class != "" {
		add(trailClass, a.Class)
	}
	if a.Priority != 0 {
		add(trailPriority, strconv.Itoa(a.Priority))
	}
	if a.Identity != "" {
		add(trailIdentity, a.Identity)
	}
	switch {
	case tv == "":
	case b.Len()+1+len(tv) <= maxTrailValuesLen:
		b.WriteByte(',')
		b.WriteString(tv)
	default:
		b.WriteByte(',')
		b.WriteString(trailMore)
	}
	return b.String()
}

// trailMeta moves the messaging pairs out of vals into d.
func trailMeta(d *Denial) {
	if d.Values == nil {
		return
	}
	if v, ok := d.Values[trailClass]; ok {
		d.Class = v
		delete(d.Values, trailClass)
	}
	if v, ok := d.Values[trailPriority]; ok {
		d.Priority, _ = strconv.Atoi(v)
		delete(d.Values, trailPriority)
	}
	if v, ok := d.Values[trailIdentity]; ok {
		d.Identity = v
		delete(d.Values, trailIdentity)
	}
	if len(d.Values) == 0 {
		d.Values = nil
	}
}
