package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestParseReply: take.lua's reply (as bare mode builds it too, and as
// an idempotency record replays), {first, now, the rules' bytes, then
// the override element, trail entries or a replay's reservation id},
// through parseTake.
func TestParseReply(t *testing.T) {
	rules := []driver.Rule{{Name: "a", Algorithm: driver.SlidingWindow, Limit: 5}}
	gcra := []driver.Rule{{Name: "g", Algorithm: driver.GCRA, Limit: 30, Burst: 4}}
	rule := binRule(1, 2, 1500, 0)
	ok := []any{int64(1), int64(1700000000000001), rule}
	tests := []struct {
		name    string
		v       any
		rules   []driver.Rule
		wantErr string
		check   func(t *testing.T, r driver.Result)
	}{
		{name: "one rule", v: ok, check: func(t *testing.T, r driver.Result) {
			want := driver.RuleResult{Allowed: true, Used: 2, Limit: 5, Remaining: 3, ResetAfter: 1500 * time.Microsecond}
			if !r.Allowed || r.Rules[0] != want || !r.Now.Equal(time.UnixMicro(1700000000000001)) {
				t.Errorf("parseTake = %+v, want allowed, now 1700000000000001µs, %+v", r, want)
			}
		}},
		{name: "integer strings, cost too high", v: []any{"0", "5", binRule(2, 7, 0, 0)}, check: func(t *testing.T, r driver.Result) {
			want := driver.RuleResult{Used: 7, Limit: 5, CostTooHigh: true}
			if r.Allowed || r.Rules[0] != want {
				t.Errorf("parseTake = %+v, want denied %+v", r, want)
			}
		}},
		{name: "gcra limit is burst+1", v: []any{int64(0), int64(5), binRule(0, 5, 30, 6)}, rules: gcra, check: func(t *testing.T, r driver.Result) {
			want := driver.RuleResult{Used: 5, Limit: 5, ResetAfter: 30 * time.Microsecond, RetryAfter: 6 * time.Microsecond}
			if r.Rules[0] != want {
				t.Errorf("parseTake = %+v, want %+v", r.Rules[0], want)
			}
		}},
		{name: "trail", v: append(append([]any{}, ok...), "1700000000000000|push|recv-1m|15|15|1|2500|0"), check: func(t *testing.T, r driver.Result) {
			want := driver.Denial{At: time.UnixMicro(1700000000000000), Policy: "push", Rule: "recv-1m", Used: 15, Limit: 15, Cost: 1, RetryAfter: 2500 * time.Microsecond}
			if len(r.Trail) != 1 || r.Trail[0] != want {
				t.Errorf("parseTake trail = %+v, want [%+v]", r.Trail, want)
			}
		}},
		{name: "trail with values", v: append(append([]any{}, ok...), "1700000000000000|push|content-59s|2|2|1|2500|0|content=a%7Cb%2C"), check: func(t *testing.T, r driver.Result) {
			want := driver.Denial{At: time.UnixMicro(1700000000000000), Policy: "push", Rule: "content-59s", Used: 2, Limit: 2, Cost: 1, RetryAfter: 2500 * time.Microsecond, Values: "content=a%7Cb%2C"}
			if len(r.Trail) != 1 || r.Trail[0] != want {
				t.Errorf("parseTake trail = %+v, want [%+v]", r.Trail, want)
			}
		}},
		{name: "trail long entry", v: append(append([]any{}, ok...), "1|p|r|1|1|1|1|0|v|w"), wantErr: "want 8 or 9 fields"},
		{name: "not an array", v: int64(3), wantErr: "want an array"},
		{name: "too short", v: ok[:2], wantErr: "want at least 3"},
		{name: "replayed reserve", v: append(append([]any{int64(3)}, ok[1:]...), "h1"), check: func(t *testing.T, r driver.Result) {
			if !r.Allowed || !r.Replayed || r.ReservationID != "h1" || r.Rules[0].Used != 2 {
				t.Errorf("parseTake = %+v, want allowed, replayed, reservation h1, used 2", r)
			}
		}},
		{name: "bad allowed", v: append([]any{int64(32)}, ok[1:]...), wantErr: "must be 0..31"},
		{name: "replay with keeps", v: append([]any{int64(19)}, append(ok[1:], "2", "")...), rules: []driver.Rule{{Name: "r", Algorithm: driver.FixedWindow, Limit: 5, Keep: 3}}, check: func(t *testing.T, r driver.Result) {
			if got := r.Rules[0]; !r.Replayed || got.Remaining != 1 {
				t.Errorf("parseTake(replay, keeps 2) = %+v, want remaining 1 (the original's keep, not the retry's 3)", got)
			}
		}},
		{name: "replay without keeps", v: append([]any{int64(3)}, append(ok[1:], "")...), rules: []driver.Rule{{Name: "r", Algorithm: driver.FixedWindow, Limit: 5, Keep: 3}}, check: func(t *testing.T, r driver.Result) {
			if got := r.Rules[0]; got.Remaining != 3 {
				t.Errorf("parseTake(replay of an attempt without headroom) = %+v, want remaining 3", got)
			}
		}},
		{name: "keeps element short", v: append([]any{int64(17)}, append(ok[1:], "1,2")...), wantErr: "want 1 values"},
		{name: "quiet", v: append([]any{int64(8)}, append(ok[1:], int64(1700000000360000), "1|p||0|0|1|5|16")...), check: func(t *testing.T, r driver.Result) {
			if r.Allowed || !r.Quiet.Equal(time.UnixMicro(1700000000360000)) || len(r.Trail) != 1 || !r.Trail[0].Quiet || r.Trail[0].Rule != "" {
				t.Errorf("parseTake = %+v, want denied for quiet hours until 1700000000360000µs, one quiet trail entry", r)
			}
		}},
		{name: "quiet without its end", v: append([]any{int64(8)}, ok[1:]...), wantErr: "quiet span's end"},
		{name: "override and quiet", v: append([]any{int64(12)}, append(ok[1:], "12|40|l|0|0|1700000000000000|r=40|3|annvip", int64(99))...), check: func(t *testing.T, r driver.Result) {
			if r.Allowed || r.Override.ID != 12 || !r.Quiet.Equal(time.UnixMicro(99)) || r.Trail != nil {
				t.Errorf("parseTake = %+v, want denied for quiet hours until 99µs under limit override 12", r)
			}
		}},
		{name: "keep", v: ok, rules: []driver.Rule{{Name: "r", Algorithm: driver.FixedWindow, Limit: 5, Keep: 2}}, check: func(t *testing.T, r driver.Result) {
			if got := r.Rules[0]; got.Limit != 5 || got.Remaining != 1 {
				t.Errorf("parseTake(keep 2) = %+v, want limit 5, remaining 1 (limit-keep-used)", got)
			}
		}},
		{name: "override", v: append([]any{int64(5)}, append(ok[1:], "12|40|l|0|0|1700000000000000|r=40|3|annvip")...), check: func(t *testing.T, r driver.Result) {
			o := r.Override
			if !r.Allowed || r.Replayed || o.ID != 12 || o.Kind != driver.Limit || o.Limits["r"] != 40 || o.By != "ann" || o.Reason != "vip" || r.Rules[0].Limit != 40 {
				t.Errorf("parseTake = %+v, want allowed under limit override 12 (ann, vip), rule limit 40", r)
			}
		}},
		{name: "override without element", v: append([]any{int64(5)}, ok[1:]...), wantErr: "override element"},
		{name: "override limits short", v: append([]any{int64(4)}, append(ok[1:], "12|1,2|b|0|0|1||0|")...), wantErr: "want 1 limits, got 2"},
		{name: "trail flags", v: append(append([]any{}, ok...), "1|p|r|2|1|1|5|3", "1|p|7|0|0|1|0|4|v"), check: func(t *testing.T, r driver.Result) {
			if len(r.Trail) != 2 || !r.Trail[0].Shadow || !r.Trail[0].CostTooHigh || r.Trail[0].Override != 0 ||
				r.Trail[1].Override != 7 || r.Trail[1].Rule != "" || r.Trail[1].Shadow || r.Trail[1].Values != "v" {
				t.Errorf("parseTake(…).Trail = %+v, want a shadow cost-too-high entry and override 7's", r.Trail)
			}
		}},
		{name: "trail exempt and quiet flags", v: append(append([]any{}, ok...), "1|p|r|2|1|1|5|8", "1|p||0|0|1|5|16"), check: func(t *testing.T, r driver.Result) {
			if len(r.Trail) != 2 || !r.Trail[0].Exempt || r.Trail[0].Quiet || r.Trail[0].Rule != "r" || !r.Trail[1].Quiet || r.Trail[1].Exempt {
				t.Errorf("parseTake(…).Trail = %+v, want r's exempt entry and a quiet one", r.Trail)
			}
		}},
		{name: "trail flags out of range", v: append(append([]any{}, ok...), "1|p|r|2|1|1|5|32"), wantErr: "flags 32"},
		{name: "trail override without id", v: append(append([]any{}, ok...), "1|p|r|2|1|1|5|4"), wantErr: "without an override ID"},
		{name: "replay without reservation id", v: append([]any{int64(2)}, ok[1:]...), wantErr: "want the reservation id"},
		{name: "bad flags", v: []any{int64(0), int64(1), binRule(3, 0, 0, 0)}, wantErr: "flags must be"},
		{name: "bad now", v: []any{int64(1), "x", rule}, wantErr: "want an integer"},
		{name: "nil rules", v: []any{int64(1), int64(1), nil}, wantErr: "want a string"},
		{name: "float element", v: []any{int64(1), 1.5, rule}, wantErr: "want an integer, got float64"},
		{name: "trail not a string", v: append(append([]any{}, ok...), int64(3)), wantErr: "want a string"},
		{name: "trail short entry", v: append(append([]any{}, ok...), "1|p|r"), wantErr: "want 8 or 9 fields"},
		{name: "trail bad number", v: append(append([]any{}, ok...), "1|p|r|x|1|1|1|0"), wantErr: "field 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := tc.rules
			if rs == nil {
				rs = rules
			}
			r, err := parseTake(tc.v, rs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseTake(%v) error = %v, want one containing %q", tc.v, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTake(%v) error = %v", tc.v, err)
			}
			tc.check(t, r)
		})
	}
}

// binRule packs one rule's numbers as take.lua does (struct '<Bi7i7i7').
func binRule(flags byte, used, reset, retry int64) string {
	b := []byte{flags}
	for _, n := range []int64{used, reset, retry} {
		for i := 0; i < 7; i++ {
			b = append(b, byte(n>>(8*i)))
		}
	}
	return string(b)
}

// TestParseTake: take.lua's reply, the rules' numbers as bytes.
func TestParseTake(t *testing.T) {
	rules := []driver.Rule{{Name: "a", Algorithm: driver.SlidingWindow, Limit: 5}, {Name: "g", Algorithm: driver.GCRA, Limit: 30, Burst: 4}}
	bin := binRule(1, 2, 1500, 0) + binRule(2, 1<<50, 1<<52-1, 0)
	r, err := parseTake([]any{int64(0), int64(1700000000000001), bin, "1700000000000000|p|g|5|5|7|0|1"}, rules)
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.RuleResult{
		{Allowed: true, Used: 2, Limit: 5, Remaining: 3, ResetAfter: 1500 * time.Microsecond},
		{CostTooHigh: true, Used: 1 << 50, Limit: 5, ResetAfter: (1<<52 - 1) * time.Microsecond},
	}
	if r.Allowed || !r.Now.Equal(time.UnixMicro(1700000000000001)) || len(r.Rules) != 2 || r.Rules[0] != want[0] || r.Rules[1] != want[1] || len(r.Trail) != 1 {
		t.Errorf("parseTake = %+v, want denied, %+v, one trail entry", r, want)
	}
	// Negative numbers (a clock that went back) sign-extend.
	r, err = parseTake([]any{int64(1), int64(5), binRule(1, 0, -3, 0)}, rules[:1])
	if err != nil || r.Rules[0].ResetAfter != -3*time.Microsecond {
		t.Errorf("parseTake(reset -3) = %+v, %v, want ResetAfter -3µs", r.Rules, err)
	}
	r, err = parseTake([]any{int64(3), int64(5), binRule(1, 1, 0, 0), "h1"}, rules[:1])
	if err != nil || !r.Replayed || !r.Allowed || r.ReservationID != "h1" {
		t.Errorf("parseTake(replay) = %+v, %v, want replayed with reservation h1", r, err)
	}
	// A fast script's reply: one string, first and now then the rules.
	head := func(first byte, now int64) string { return binRule(first, now, 0, 0)[:fastHead] }
	r, err = parseTake(head(0, 1700000000000001)+bin, rules)
	if err != nil || r.Allowed || !r.Now.Equal(time.UnixMicro(1700000000000001)) || len(r.Rules) != 2 || r.Rules[0] != want[0] || r.Rules[1] != want[1] || r.Trail != nil {
		t.Errorf("parseTake(fast) = %+v, %v, want denied, %+v", r, err, want)
	}
	// Denied for quiet hours: the quiet end after the rules.
	quiet := string(appendLE(nil, 99, lua.ReplyInt))
	r, err = parseTake(head(8, 5)+bin[:perRuleBytes]+quiet, rules[:1])
	if err != nil || r.Allowed || !r.Quiet.Equal(time.UnixMicro(99)) {
		t.Errorf("parseTake(fast, quiet) = %+v, %v, want denied, quiet until 99µs", r, err)
	}
	// Without the quiet bit, the end is 7 bytes too many; with it, missing.
	if _, err := parseTake(head(0, 5)+bin[:perRuleBytes]+quiet, rules[:1]); err == nil || !strings.Contains(err.Error(), "want 30 bytes") {
		t.Errorf("parseTake(fast, an end without the quiet bit) = %v, want the length refused", err)
	}
	if _, err := parseTake(head(8, 5)+bin[:perRuleBytes], rules[:1]); err == nil || !strings.Contains(err.Error(), "quiet span's end") {
		t.Errorf("parseTake(fast, quiet without its end) = %v, want the end asked for", err)
	}
	for _, bad := range []struct {
		v    any
		want string
	}{
		{head(1, 5) + bin[:10], "want 30 bytes for 1 rules, got 18"},
		{"OK", "want 30 bytes"},
		{head(32, 5) + bin[:perRuleBytes], "must be 0..31"},
		{head(1, 5) + binRule(3, 0, 0, 0), "flags must be"},
		{[]any{int64(1), int64(5)}, "at least 3"},
		{[]any{int64(1), int64(5), bin[:10]}, "want 22 bytes"},
		{[]any{int64(1), int64(5), int64(7)}, "want a string"},
		{[]any{int64(1), int64(5), binRule(3, 0, 0, 0)}, "flags must be"},
	} {
		if _, err := parseTake(bad.v, rules[:1]); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseTake(%q) error = %v, want one containing %q", bad.v, err, bad.want)
		}
	}
}

func TestReplyHelpers(t *testing.T) {
	if _, err := replyInt(nil); err == nil {
		t.Errorf("replyInt(nil) error = nil, want an error")
	}
	if n, err := replyInt("-12"); err != nil || n != -12 {
		t.Errorf("replyInt(\"-12\") = %d, %v, want -12", n, err)
	}
	if _, err := replyString(int64(1)); err == nil {
		t.Errorf("replyString(1) error = nil, want an error")
	}
	if _, err := replyArray(nil); err == nil {
		t.Errorf("replyArray(nil) error = nil, want an error")
	}
}

func TestReservationKeys(t *testing.T) {
	plan := "1700000000000000\ns a:{x}:p:r.1 12 1 99\nf a:{x}:p:f.1 1700 1\ns a:{x}:p:r.1 13 1 99\nl a:{x}:p:l.1 m1,m2"
	got := strings.Join(reservationKeys(plan), " ")
	want := "a:{x}:p:r.1 a:{x}:p:f.1 a:{x}:p:l.1"
	if got != want {
		t.Errorf("reservationKeys(%q) = %q, want %q", plan, got, want)
	}
}
