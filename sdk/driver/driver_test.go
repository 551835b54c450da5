package driver

import (
	"math"
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

func TestRuleGCRAParams(t *testing.T) {
	const maxUs = time.Duration(math.MaxInt64 / 1000 * 1000)
	tests := []struct {
		name         string
		w            time.Duration
		limit, burst int64
		t, tol       time.Duration
		reported     int64
	}{
		{"whole", time.Minute, 10, 4, 6 * time.Second, 30 * time.Second, 5},
		{"7 per 3s", 3 * time.Second, 7, 1, 428571 * time.Microsecond, 857142 * time.Microsecond, 2},
		{"1 per 3s/3", time.Second, 3, 0, 333333 * time.Microsecond, 333333 * time.Microsecond, 1},
		{"sub-µs ns dropped", 2500 * time.Millisecond, 1000000, 0, 2 * time.Microsecond, 2 * time.Microsecond, 1},
		{"at least 1µs", time.Millisecond, 5000, 2, time.Microsecond, 3 * time.Microsecond, 3},
		{"tolerance saturates", time.Hour, 1, math.MaxInt64 / 2, time.Hour, maxUs, math.MaxInt64/2 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Rule{Algorithm: GCRA, Limit: tc.limit, Window: tc.w, Burst: tc.burst}
			gt, gtol, gl := r.GCRAParams()
			if gt != tc.t || gtol != tc.tol || gl != tc.reported {
				t.Errorf("GCRAParams() = %v, %v, %d; want %v, %v, %d", gt, gtol, gl, tc.t, tc.tol, tc.reported)
			}
			if gt%time.Microsecond != 0 || gtol%time.Microsecond != 0 {
				t.Errorf("GCRAParams() = %v, %v; want whole microseconds", gt, gtol)
			}
			if got := r.ReportedLimit(); got != tc.reported {
				t.Errorf("ReportedLimit() = %d, want %d", got, tc.reported)
			}
		})
	}
	if got := (Rule{Algorithm: SlidingLog, Limit: 7, Window: time.Second}).ReportedLimit(); got != 7 {
		t.Errorf("ReportedLimit() of a sliding log of 7 = %d, want 7", got)
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

func TestRuleReach(t *testing.T) {
	tests := []struct {
		name string
		r    Rule
		want time.Duration
	}{
		{"fixed", Rule{Algorithm: FixedWindow, Limit: 5, Window: time.Hour}, time.Hour},
		{"calendar day", Rule{Algorithm: FixedWindow, Limit: 5, Window: 24 * time.Hour, Calendar: Day, Location: time.UTC}, 25 * time.Hour},
		{"calendar hour", Rule{Algorithm: FixedWindow, Limit: 5, Window: time.Hour, Calendar: Hour, Location: time.UTC}, 2 * time.Hour},
		{"calendar week", Rule{Algorithm: FixedWindow, Limit: 5, Window: 168 * time.Hour, Calendar: Week, Location: time.UTC}, 169 * time.Hour},
		// The longest month, 31 days, and a DST hour.
		{"calendar month", Rule{Algorithm: FixedWindow, Limit: 5, Window: 744 * time.Hour, Calendar: Month, Location: time.UTC}, 745 * time.Hour},
		{"sliding divides", Rule{Algorithm: SlidingWindow, Limit: 500, Window: time.Minute, SubWindows: 10}, 66 * time.Second},
		{"sliding default cells", Rule{Algorithm: SlidingWindow, Limit: 500, Window: time.Minute}, 66 * time.Second},
		// 3 cells of 333ms: Back = ceil(1000/333) = 4, reach 5*333ms.
		{"sliding uneven", Rule{Algorithm: SlidingWindow, Limit: 500, Window: time.Second, SubWindows: 3}, 1665 * time.Millisecond},
		// At most LogLine: an exact log (ExactLog), reach Window.
		{"sliding as a log", Rule{Algorithm: SlidingWindow, Limit: LogLine, Window: time.Minute, SubWindows: 10}, time.Minute},
		{"log", Rule{Algorithm: SlidingLog, Limit: 5, Window: time.Minute}, time.Minute},
		// T = 60s/6 = 10s, tol = 10s*(2+1).
		{"gcra", Rule{Algorithm: GCRA, Limit: 6, Window: time.Minute, Burst: 2}, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Reach(); got != tc.want {
				t.Errorf("Reach() = %v, want %v", got, tc.want)
			}
			if tc.r.Algorithm == SlidingWindow && !tc.r.ExactLog() {
				sp := tc.r.Span(time.Nanosecond)
				if got, want := tc.r.Reach(), time.Duration((sp.Back+1)*sp.Size); got != want {
					t.Errorf("Reach() = %v, want (Back+1)*Size = %v", got, want)
				}
			}
		})
	}
}

// TestCalendarUnits: every unit reads back from its String, has its
// nominal window, and nothing else parses.
func TestCalendarUnits(t *testing.T) {
	for _, tc := range []struct {
		u       CalendarUnit
		name    string
		nominal time.Duration
	}{
		{Day, "day", 24 * time.Hour},
		{Hour, "hour", time.Hour},
		{Week, "week", 7 * 24 * time.Hour},
		{Month, "month", 31 * 24 * time.Hour},
	} {
		if got := tc.u.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", tc.u, got, tc.name)
		}
		if got, ok := ParseCalendarUnit(tc.name); !ok || got != tc.u {
			t.Errorf("ParseCalendarUnit(%q) = %v, %t, want %v, true", tc.name, got, ok, tc.u)
		}
		if got := tc.u.Nominal(); got != tc.nominal {
			t.Errorf("%v.Nominal() = %v, want %v", tc.u, got, tc.nominal)
		}
	}
	for _, s := range []string{"", "Day", "days", "fortnight", "year"} {
		if u, ok := ParseCalendarUnit(s); ok {
			t.Errorf("ParseCalendarUnit(%q) = %v, true, want false", s, u)
		}
	}
	if NoCalendar.String() != "" || NoCalendar.Nominal() != 0 || CalendarUnit(9).Nominal() != 0 {
		t.Errorf("NoCalendar = %q, %v; unit 9's nominal %v, want \"\", 0, 0", NoCalendar.String(), NoCalendar.Nominal(), CalendarUnit(9).Nominal())
	}
}

// TestParseOverrideKind: every kind reads back from its String, and
// nothing else reads as a kind.
func TestParseOverrideKind(t *testing.T) {
	for _, k := range []OverrideKind{Exempt, Block, Limit} {
		if got, ok := ParseOverrideKind(k.String()); !ok || got != k {
			t.Errorf("ParseOverrideKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	for _, s := range []string{"", "unknown", "Exempt", "blocks"} {
		if _, ok := ParseOverrideKind(s); ok {
			t.Errorf("ParseOverrideKind(%q) ok", s)
		}
	}
}
