package driver

import "testing"

func TestHashTag(t *testing.T) {
	tests := []struct{ key, tag string }{
		{"fc:{u1}:push:recv.abc", "u1"},
		{"fc:{u1}:push:!t", "u1"},
		{"fc:{}:x", "fc:{}:x"},
		{"plain", "plain"},
		{"a{b", "a{b"},
		{"a{b}{c}", "b"},
	}
	for _, tc := range tests {
		if got := HashTag(tc.key); got != tc.tag {
			t.Errorf("HashTag(%q) = %q, want %q", tc.key, got, tc.tag)
		}
	}
}
