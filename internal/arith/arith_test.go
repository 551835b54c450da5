package arith

import "testing"

func TestFloorDiv(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{7, 2, 3}, {6, 2, 3}, {0, 5, 0}, {-1, 5, -1}, {-5, 5, -1}, {-6, 5, -2}, {1795215617870091, 1000000, 1795215617},
	} {
		if got := FloorDiv(tc.a, tc.b); got != tc.want {
			t.Errorf("FloorDiv(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
