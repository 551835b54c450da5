package redis

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestBareEval: bare mode counts cells as take.lua does (strict: j >= i-N,
// cell j counting until (j+N+1)·s), on an EXHGETALL reply. It needs no
// server; TestBareTairHash runs bare mode against TairHash.
func TestBareEval(t *testing.T) {
	r := driver.Rule{Name: "s", Algorithm: driver.SlidingWindow, Limit: 3, Window: time.Hour, SubWindows: 10}
	const s = int64(6 * time.Minute / time.Microsecond)
	const i = int64(4_986_000) // a cell in 2026
	now := i*s + s/2
	f := func(j int64) string { return strconv.FormatInt(j, 10) }
	// Cell i-11 is dead; i-10, partly expired, still counts; "x" is no cell.
	kv := []any{f(i - 11), "7", f(i - 10), "1", f(i - 5), "1", "x", "9"}
	reset := (i-5+11)*s - now
	tests := []struct {
		name  string
		cost  int64
		res   []int64 // flags, used, reset µs, retry µs
		other int64
	}{
		{"fits", 1, []int64{1, 2, reset, 0}, 2},
		{"need 1: frees when cell i-10 stops counting", 2, []int64{0, 2, reset, (i-10+11)*s - now}, 2},
		{"need 2: frees when cell i-5 does", 3, []int64{0, 2, reset, (i-5+11)*s - now}, 2},
		{"cost too high", 4, []int64{2, 2, reset, 0}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bareRule{r: &r, sp: r.Span(time.Microsecond)}
			if err := br.eval(kv, now, tc.cost); err != nil {
				t.Fatalf("eval = %v", err)
			}
			if !slices.Equal(br.res, tc.res) || br.other != tc.other || br.i != i {
				t.Errorf("eval(cost %d) = %v, other %d, cell %d; want %v, other %d, cell %d", tc.cost, br.res, br.other, br.i, tc.res, tc.other, i)
			}
		})
	}
	// 1µs before cell i-10 stops counting it still does; at that instant
	// it does not.
	br := bareRule{r: &r, sp: r.Span(time.Microsecond)}
	leave := (i - 10 + 11) * s
	if err := br.eval(kv, leave-1, 2); err != nil || br.res[0] != 0 || br.res[3] != 1 {
		t.Errorf("eval(cost 2) 1µs before cell i-10 leaves = %v, %v; want denied with retry 1µs", br.res, err)
	}
	if err := br.eval(kv, leave, 2); err != nil || br.res[0] != 1 || br.res[1] != 1 {
		t.Errorf("eval(cost 2) as cell i-10 leaves = %v, %v; want allowed with used 1", br.res, err)
	}
}

// TestBareRecord: bare mode's decision is stored as take.lua's record
// (TestIdempotencyRecordRoundTrip proves the encoder writes take.lua's
// bytes) and replays, legacy text records too, as NonAtomic results on
// the bare strategy. It needs no server.
func TestBareRecord(t *testing.T) {
	rules := []driver.Rule{
		{Name: "a", Algorithm: driver.SlidingWindow, Limit: 5, Window: time.Hour, SubWindows: 10},
		{Name: "b", Algorithm: driver.SlidingWindow, Limit: 9, Window: time.Minute, SubWindows: 6, Shadow: true},
	}
	brs := []bareRule{{r: &rules[0], res: []int64{1, 3, 1500, 0}}, {r: &rules[1], res: []int64{0, 9, 20, 7}}}
	const now = 1700000000000001
	want := driver.Result{Allowed: true, Replayed: true, NonAtomic: true, Now: time.UnixMicro(now), Rules: []driver.RuleResult{
		{Allowed: true, Used: 3, Limit: 5, Remaining: 2, ResetAfter: 1500 * time.Microsecond, Strategy: capability.TairHashBare.String()},
		{Used: 9, Limit: 9, ResetAfter: 20 * time.Microsecond, RetryAfter: 7 * time.Microsecond, Strategy: capability.TairHashBare.String()},
	}}
	stored, err := bareRecord(brs, now, true).encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{stored, "|1,1700000000000001,1,3,1500,0,0,9,20,7"} {
		res, err := replayRecord(rec, rules)
		if err != nil || !reflect.DeepEqual(res, want) {
			t.Errorf("replayRecord(%q) = %+v, %v; want %+v", rec, res, err, want)
		}
	}
	if _, err := replayRecord(stored, rules[:1]); err == nil || !strings.Contains(err.Error(), "want 22 bytes for 1 rules") {
		t.Errorf("replayRecord(a record of 2 rules, 1 rule) = %v, want parseTake's error", err)
	}
}
