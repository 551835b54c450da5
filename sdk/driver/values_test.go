package driver

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// testValues returns n stamped values (written a ms apart, the last
// newest) and u unstamped ones (expiring a ms apart), in no order.
func testValues(n, u int) []Value {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var vals []Value
	for i := range n {
		vals = append(vals, Value{Group: fmt.Sprintf("g%03d", i), ID: fmt.Sprintf("s%03d", i), Written: t0.Add(time.Duration(i) * time.Millisecond), Expires: t0.Add(time.Hour)})
	}
	for i := range u {
		vals = append(vals, Value{ID: fmt.Sprintf("u%03d", i), Expires: t0.Add(time.Hour + time.Duration(i)*time.Millisecond)})
	}
	// A deterministic shuffle.
	for i := range vals {
		j := (i*7919 + 13) % len(vals)
		vals[i], vals[j] = vals[j], vals[i]
	}
	return vals
}

func ids(vals []Value) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v.ID
	}
	return out
}

// TestSortValues: stamped values first, newest first; then the others,
// latest expiry first; ties by id.
func TestSortValues(t *testing.T) {
	vals := testValues(3, 3)
	t0 := vals[0].Expires
	vals = append(vals, Value{ID: "s000b", Written: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Expires: t0})
	SortValues(vals)
	want := []string{"s002", "s001", "s000", "s000b", "u002", "u001", "u000"}
	if got := ids(vals); !slices.Equal(got, want) {
		t.Errorf("SortValues(…) = %v, want %v", got, want)
	}
}

// TestPageValues: paging forward with Next covers every value once, in
// order, in full pages but the last; Prev walks the same pages back; the
// end cursor gives the last page.
func TestPageValues(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stamped, old int
		limit        int
	}{
		{"empty", 0, 0, 5},
		{"one page", 3, 1, 5},
		{"exact pages", 10, 10, 5},
		{"ragged", 23, 8, 7},
		{"limit 1", 4, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := testValues(tc.stamped, tc.old)
			want := slices.Clone(all)
			SortValues(want)
			type pg struct {
				ids        []string
				next, prev string
			}
			var pages []pg
			var got []string
			for cur := ""; ; {
				page, next, prev, err := PageValues(slices.Clone(all), cur, tc.limit)
				if err != nil {
					t.Fatalf("PageValues(page %d) error: %v", len(pages), err)
				}
				pages = append(pages, pg{ids(page), next, prev})
				got = append(got, ids(page)...)
				if next == "" {
					break
				}
				if len(page) != tc.limit {
					t.Errorf("page %d holds %d values, want %d", len(pages)-1, len(page), tc.limit)
				}
				cur = next
			}
			if !slices.Equal(got, ids(want)) {
				t.Errorf("pages = %v, want %v", got, ids(want))
			}
			if pages[0].prev != "" {
				t.Errorf("first page: prev = %q, want none", pages[0].prev)
			}
			for k := len(pages) - 1; k > 0; k-- {
				page, next, _, err := PageValues(slices.Clone(all), pages[k].prev, tc.limit)
				if err != nil {
					t.Fatalf("PageValues(prev of page %d) error: %v", k, err)
				}
				if !slices.Equal(ids(page), pages[k-1].ids) || next != pages[k-1].next {
					t.Errorf("prev of page %d = %v (next %q), want %v (next %q)", k, ids(page), next, pages[k-1].ids, pages[k-1].next)
				}
			}
			page, _, _, err := PageValues(slices.Clone(all), endCursor, tc.limit)
			if w := ids(want)[max(len(want)-tc.limit, 0):]; err != nil || !slices.Equal(ids(page), w) {
				t.Errorf("PageValues(end) = %v, %v; want %v", ids(page), err, w)
			}
		})
	}
}

// TestPageValuesMoving: between pages a value not shown yet is written
// (it moves to the front) and a shown one expires; the pages after the
// cursor show every other value once and none twice, and an empty page
// past the end still leads back.
func TestPageValuesMoving(t *testing.T) {
	all := testValues(12, 4)
	SortValues(all)
	page1, next, _, err := PageValues(slices.Clone(all), "", 5)
	if err != nil {
		t.Fatal(err)
	}
	moved := all[9]
	moved.Written = all[0].Written.Add(time.Second)
	later := slices.Clone(all[1:]) // all[0], shown, expired
	later[8] = moved
	seen := map[string]int{}
	for _, v := range page1 {
		seen[v.ID]++
	}
	for cur := next; cur != ""; {
		page, n, _, err := PageValues(slices.Clone(later), cur, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range page {
			seen[v.ID]++
		}
		cur = n
	}
	for _, v := range all {
		want := 1
		if v.ID == moved.ID {
			want = 0 // moved in front of the cursor
		}
		if seen[v.ID] != want {
			t.Errorf("value %s shown %d times, want %d", v.ID, seen[v.ID], want)
		}
	}
	// Everything after the last value gone: an empty page, whose prev is
	// the last page.
	last := writeCursor(true, placeOf(all[len(all)-1]))
	page, n, p, err := PageValues(slices.Clone(all[:10]), last, 5)
	if err != nil || len(page) != 0 || n != "" || p != endCursor {
		t.Errorf("PageValues(past the end) = %v, next %q, prev %q, %v; want an empty page, prev %q", ids(page), n, p, err, endCursor)
	}
}

// TestPageValuesBadCursor: a cursor PageValues did not write is
// ErrInvalidCursor.
func TestPageValuesBadCursor(t *testing.T) {
	good := writeCursor(true, placeOf(Value{ID: "x", Written: time.Unix(5, 0), Expires: time.Unix(9, 0)}))
	for _, c := range []string{"x", "n", "n!!!", "nAA", "pAgA", good[:len(good)-3], "q" + good[1:]} {
		if _, _, _, err := PageValues(testValues(3, 1), c, 2); !errors.Is(err, ErrInvalidCursor) {
			t.Errorf("PageValues(%q) error = %v, want ErrInvalidCursor", c, err)
		}
	}
	if _, _, _, err := PageValues(testValues(3, 1), good, 2); err != nil {
		t.Errorf("PageValues(a good cursor) error = %v", err)
	}
}
