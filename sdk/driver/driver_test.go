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

func TestRuleSpan(t *testing.T) {
	tests := []struct {
		w          time.Duration
		cells      int
		size, back int64 // µs, cells
	}{
		{time.Minute, 10, 6e6, 10},
		{24 * time.Hour, 10, 8640e6, 10},
		{59 * time.Second, 10, 5.9e6, 10},
		{time.Second, 3, 333e3, 4},         // 3 cells of 333ms do not reach back a whole second
		{10 * time.Second, 3, 3333e3, 4},   // nor 3 of 3.333s ten seconds
		{5 * time.Millisecond, 10, 1e3, 5}, // 1ms cells: 5 reach back 5ms
	}
	for _, tc := range tests {
		r := Rule{Window: tc.w, SubWindows: tc.cells}
		sp := r.Span(time.Microsecond)
		if sp.Size != tc.size || sp.Back != tc.back {
			t.Errorf("Rule{Window: %v, SubWindows: %d}.Span(µs) = %+v, want {Size:%d Back:%d}", tc.w, tc.cells, sp, tc.size, tc.back)
		}
		if got, want := sp.Leaves(7), (7+tc.back+1)*tc.size; got != want {
			t.Errorf("Span(%v/%d).Leaves(7) = %d, want %d", tc.w, tc.cells, got, want)
		}
		// The guarantee: every instant within Window (closed) before t
		// lies in a cell counted at t, and nothing counts past Leaves.
		w := tc.w.Microseconds()
		for _, at := range []int64{0, 1, tc.size - 1, tc.size, 5*tc.size + 17, 1795215617870091} {
			i := sp.Index(at)
			if j := sp.Index(at - w); j < sp.Oldest(i) {
				t.Errorf("Span(%v/%d): at %d (cell %d) the instant Window before is in cell %d, older than Oldest %d", tc.w, tc.cells, at, i, j, sp.Oldest(i))
			}
			if l := sp.Leaves(sp.Oldest(i)); l <= at || l > at+tc.size {
				t.Errorf("Span(%v/%d): at %d the oldest counted cell leaves at %d, want within the next cell", tc.w, tc.cells, at, l)
			}
		}
	}
	if got := (CellSpan{Size: 10, Back: 1}).Index(-1); got != -1 {
		t.Errorf("Index(-1) = %d, want -1 (floor)", got)
	}
}
