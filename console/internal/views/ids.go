package views

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// idPart is a run of an id as shown: plain text, or one character made
// visible (Esc).
type idPart struct {
	Text string
	Esc  bool
}

// hiddenRune reports whether r would be invisible or change how the text
// around it reads: control characters; format characters (the bidi
// overrides and isolates U+202A–U+202E and U+2066–U+2069, zero-width
// spaces and joiners, the BOM, the soft hyphen); the other default-ignorable
// code points (Unicode's Default_Ignorable_Code_Point: the combining
// grapheme joiner U+034F, the Hangul fillers U+115F, U+1160, U+3164 and
// U+FFA0, variation selectors, …), which fonts draw as nothing; letters
// and symbols drawn blank (blankRunes); unassigned and private-use code
// points, which a font may draw as nothing too; and white space other
// than a space.
func hiddenRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) ||
		blankRunes[r] || unicode.Is(unicode.Co, r) || unicode.Is(unicode.Cn, r) ||
		(unicode.IsSpace(r) && r != ' ') || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		r == utf8.RuneError
}

// blankRunes are assigned letters and symbols, not default-ignorable,
// that fonts draw as an empty cell: they pass for a space or nothing.
var blankRunes = map[rune]bool{
	0x2800: true, // BRAILLE PATTERN BLANK
}

// idParts splits id for display: each hidden rune, and each space at
// either end, becomes an escaped part (\u202E, \u0020) that the page
// marks, so that "user\u202Eexe.txt" cannot pass for "usertxt.exe" nor
// "a\u3164b" for "ab". It is the pages' one marking of ids: every id
// shown (subject values, keys, the audit's and the header's names, the
// overview's most denied subjects) goes through idText, its template.
func idParts(id string) []idPart {
	var parts []idPart
	var plain strings.Builder
	flush := func() {
		if plain.Len() > 0 {
			parts = append(parts, idPart{Text: plain.String()})
			plain.Reset()
		}
	}
	lead := len(id) - len(strings.TrimLeft(id, " "))
	trail := len(strings.TrimRight(id, " "))
	for i := 0; i < len(id); {
		r, n := utf8.DecodeRuneInString(id[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			flush()
			parts = append(parts, idPart{Text: fmt.Sprintf(`\x%02X`, id[i]), Esc: true})
		case hiddenRune(r) || (r == ' ' && (i < lead || i >= trail)):
			flush()
			parts = append(parts, idPart{Text: escapeRune(r), Esc: true})
		default:
			plain.WriteRune(r)
		}
		i += n
	}
	flush()
	return parts
}

func escapeRune(r rune) string {
	if r > 0xFFFF {
		return fmt.Sprintf(`\U%08X`, r)
	}
	return fmt.Sprintf(`\u%04X`, r)
}

// hasHidden reports whether some value of fields shows escaped parts.
func hasHidden(fields []Field) bool {
	for _, f := range fields {
		for _, p := range idParts(f.Value) {
			if p.Esc {
				return true
			}
		}
	}
	return false
}

// auditSubject is an entry's subject as sorted (dimension, value) pairs.
func auditSubject(s map[string]string) []Field {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Field, len(keys))
	for i, k := range keys {
		out[i] = Field{Name: k, Value: s[k]}
	}
	return out
}
