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
// around it reads: control characters, format characters (the bidi
// overrides and isolates U+202A–U+202E and U+2066–U+2069, zero-width
// spaces and joiners, the BOM), and white space other than a space.
func hiddenRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) ||
		(unicode.IsSpace(r) && r != ' ') || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		r == utf8.RuneError
}

// idParts splits id for display: each hidden rune, and each space at
// either end, becomes an escaped part (\u202E, \u0020) that the page
// marks, so that "user\u202Eexe.txt" cannot pass for "usertxt.exe".
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
