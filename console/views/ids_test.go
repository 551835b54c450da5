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
