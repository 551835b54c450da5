package views

import "testing"

// TestIDParts: hidden characters, invalid bytes and spaces at either end
// become escaped parts; the rest stays plain. (Moved here from console's
// TestHiddenCharactersShown with the helper.)
func TestIDParts(t *testing.T) {
	tests := []struct {
		name string
		id   string
		want []idPart
	}{
		{"plain", "user-42", []idPart{{Text: "user-42"}}},
		{"zero width and NUL", "a\u200Bb\x00", []idPart{{Text: "a"}, {Text: `\u200B`, Esc: true}, {Text: "b"}, {Text: `\u0000`, Esc: true}}},
		{"bidi override", "user\u202Eexe.txt", []idPart{{Text: "user"}, {Text: `\u202E`, Esc: true}, {Text: "exe.txt"}}},
		{"spaces at the ends", " 4 2 ", []idPart{{Text: `\u0020`, Esc: true}, {Text: "4 2"}, {Text: `\u0020`, Esc: true}}},
		{"invalid byte", "u\xff", []idPart{{Text: "u"}, {Text: `\xFF`, Esc: true}}},
		{"hangul filler", "a\u3164b", []idPart{{Text: "a"}, {Text: `\u3164`, Esc: true}, {Text: "b"}}},
		{"hangul choseong filler", "\u115Fu", []idPart{{Text: `\u115F`, Esc: true}, {Text: "u"}}},
		{"hangul jungseong filler", "u\u1160", []idPart{{Text: "u"}, {Text: `\u1160`, Esc: true}}},
		{"halfwidth hangul filler", "u\uFFA0", []idPart{{Text: "u"}, {Text: `\uFFA0`, Esc: true}}},
		{"braille pattern blank", "u\u2800v", []idPart{{Text: "u"}, {Text: `\u2800`, Esc: true}, {Text: "v"}}},
		{"combining grapheme joiner", "u\u034Fv", []idPart{{Text: "u"}, {Text: `\u034F`, Esc: true}, {Text: "v"}}},
		{"soft hyphen", "u\u00ADv", []idPart{{Text: "u"}, {Text: `\u00AD`, Esc: true}, {Text: "v"}}},
		{"variation selector", "u\uFE0F", []idPart{{Text: "u"}, {Text: `\uFE0F`, Esc: true}}},
		{"variation selector supplement", "u\U000E0100", []idPart{{Text: "u"}, {Text: `\U000E0100`, Esc: true}}},
		{"khmer inherent vowel", "u\u17B4", []idPart{{Text: "u"}, {Text: `\u17B4`, Esc: true}}},
		{"mongolian variation selector", "u\u180B", []idPart{{Text: "u"}, {Text: `\u180B`, Esc: true}}},
		{"tag character", "u\U000E0041", []idPart{{Text: "u"}, {Text: `\U000E0041`, Esc: true}}},
		{"private use", "u\uE000", []idPart{{Text: "u"}, {Text: `\uE000`, Esc: true}}},
		{"unassigned", "u\u0378", []idPart{{Text: "u"}, {Text: `\u0378`, Esc: true}}},
		{"ideographic space", "a\u3000b", []idPart{{Text: "a"}, {Text: `\u3000`, Esc: true}, {Text: "b"}}},
		{"letters, marks and emoji stay", "Zoë日本\u00e9\u0301✓", []idPart{{Text: "Zoë日本\u00e9\u0301✓"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := idParts(tc.id)
			if len(got) != len(tc.want) {
				t.Fatalf("idParts(%q) = %+v, want %+v", tc.id, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("idParts(%q)[%d] = %+v, want %+v", tc.id, i, got[i], tc.want[i])
				}
			}
		})
	}
}
