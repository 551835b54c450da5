package hash64

import "testing"

// TestString pins the hash: the sample a recorder picks and the people it
// counts must agree across processes and versions.
func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xf52a15e9a9b5e89b},
		{"u42", 0xe7f2759525176925},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
	if String("a") == String("b") {
		t.Error(`String("a") == String("b")`)
	}
}
