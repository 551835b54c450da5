package memory

import (
	"math"
	"strconv"
	"testing"
)

// TestUniqueCount: sets count exactly up to uniqueExactMax members, then
// within 4 standard errors (the HyperLogLog's is 1.04/√16384 = 0.81%;
// hashing is deterministic, so the counts are the same every run); a
// union of an exact set and a HyperLogLog counts their overlap once.
func TestUniqueCount(t *testing.T) {
	add := func(u *uniqueSet, from, to int) {
		for i := from; i < to; i++ {
			u.add(uniqueHash("m" + strconv.Itoa(i)))
		}
	}
	tests := []struct {
		name   string
		sets   [][2]int // member ranges, one set each
		want   int64
		approx bool
	}{
		{"empty", nil, 0, false},
		{"one set", [][2]int{{0, 100}}, 100, false},
		{"overlap, exact", [][2]int{{0, 100}, {50, 150}}, 150, false},
		{"at the exact bound", [][2]int{{0, uniqueExactMax}}, uniqueExactMax, false},
		{"union beyond the bound", [][2]int{{0, 3000}, {2000, 5000}}, 5000, true},
		{"registers and exact", [][2]int{{0, 100000}, {99000, 101000}}, 101000, true},
		{"large", [][2]int{{0, 1000000}}, 1000000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sets []*uniqueSet
			for _, r := range tc.sets {
				u := &uniqueSet{}
				add(u, r[0], r[1])
				sets = append(sets, u)
			}
			sets = append(sets, nil) // a missing key counts nothing
			got := uniqueCount(sets)
			if !tc.approx && got != tc.want {
				t.Errorf("uniqueCount = %d, want exactly %d", got, tc.want)
			}
			const bound = 4 * 1.04 / 128 // 4 standard errors: 1.04/√(2^14) each
			if tc.approx && math.Abs(float64(got)/float64(tc.want)-1) > bound {
				t.Errorf("uniqueCount = %d, want %d within %.1f%%", got, tc.want, 100*bound)
			}
			t.Logf("uniqueCount = %d of %d", got, tc.want)
		})
	}
}
