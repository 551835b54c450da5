// Package keyname holds the rules of names and key segments shared by sdk
// (which builds the decision keys) and fleet (which builds the statistics
// keys and reads back the shard values sdk escaped).
package keyname

import "strings"

// DefaultPrefix is the first segment of every key unless sdk.WithPrefix
// (fleet.Options.Prefix, --prefix) says otherwise.
const DefaultPrefix = "fc"

// MaxName is the longest name a policy, rule or dimension may have.
const MaxName = 64

// Hex is the digits of a %XX escape.
const Hex = "0123456789ABCDEF"

// NameByte reports whether c may appear in a name: [A-Za-z0-9_.-].
func NameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '-'
}

// Valid reports whether s is 1 to max bytes of NameByte.
func Valid(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !NameByte(s[i]) {
			return false
		}
	}
	return true
}

// Prefix keeps the NameByte bytes of p and escapes every other byte as
// %XX, so a prefix can neither open a hash tag nor add a separator, and
// distinct prefixes stay distinct. An empty p means def.
func Prefix(p, def string) string {
	if p == "" {
		return def
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if NameByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(Hex[c>>4])
		b.WriteByte(Hex[c&15])
	}
	return b.String()
}

// Unescape undoes a %XX escape of every byte (a '%' not followed by two
// hex digits stays as it is).
func Unescape(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			hi, lo := strings.IndexByte(Hex, v[i+1]), strings.IndexByte(Hex, v[i+2])
			if hi >= 0 && lo >= 0 {
				b.WriteByte(byte(hi<<4 | lo))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
