package driver

import (
	"testing"
	"time"
)

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

func TestRuleCells(t *testing.T) {
	tests := []struct {
		w     time.Duration
		cells int
		size  time.Duration
	}{
		{time.Minute, 10, 6 * time.Second},
		{59 * time.Second, 10, 5900 * time.Millisecond},
		{time.Second, 3, 333 * time.Millisecond},
		{5 * time.Millisecond, 10, time.Millisecond},
		{time.Minute, 0, 6 * time.Second},
	}
	for _, tc := range tests {
		wantN := int64(tc.cells)
		if wantN == 0 {
			wantN = DefaultSubWindows
		}
		if got, n := (Rule{Window: tc.w, SubWindows: tc.cells}).Cells(); got != tc.size || n != wantN {
			t.Errorf("Rule{Window: %v, SubWindows: %d}.Cells() = %v, %d; want %v, %d", tc.w, tc.cells, got, n, tc.size, wantN)
		}
	}
}
