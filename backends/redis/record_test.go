package redis

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// unstrategied returns res with its rules' Strategy cleared: parseTake
// leaves it empty, the backend names the rules' strategies after it.
func unstrategied(res driver.Result) driver.Result {
	res.Rules = slices.Clone(res.Rules)
	for i := range res.Rules {
		res.Rules[i].Strategy = ""
	}
	return res
}

// TestIdempotencyRecordRoundTrip: the record take.lua writes decodes with
// the Go decoder (decodeRecord), encodes back to the same bytes
// (record.encode: bare mode's writer), and replays through parseTake as
// the first decision, replayed, exactly as take.lua's own replay does.
func TestIdempotencyRecordRoundTrip(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	tests := []struct {
		name string
		// setup prepares the subject and returns the idempotent request.
		setup func(s subject) request
		first int64 // the record's first element
		hold  string
	}{
		{"take allowed", func(s subject) request {
			return s.request(opTake, 2, s.fixed("a", 10, time.Hour), s.gcra("g", 10, time.Hour, 4), s.sliding("s", 700, time.Hour, 10))
		}, 1, ""},
		{"take denied", func(s subject) request {
			req := s.request(opTake, 1, s.fixed("a", 1, time.Hour), s.fixed("b", 5, time.Minute))
			take(t, b, req)
			return req
		}, 0, ""},
		{"cost too high", func(s subject) request {
			return s.request(opTake, 3, s.fixed("a", 2, time.Hour))
		}, 0, ""},
		{"no rules", func(s subject) request { return s.request(opTake, 1) }, 1, ""},
		{"limit override", func(s subject) request {
			setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": 3}, By: "ann", Reason: "vip | with bars, commas"})
			return s.withOverrides(s.request(opTake, 1, s.fixed("a", 1, time.Hour), s.gcra("g", 1, time.Hour, 2)))
		}, 5, ""},
		{"block override", func(s subject) request {
			setOverride(t, b, s, driver.Override{Kind: driver.Block, Reason: "abuse"})
			return s.withOverrides(s.request(opTake, 1, s.fixed("a", 5, time.Hour)))
		}, 4, ""},
		{"reservation", func(s subject) request {
			req := s.request(opReserve, 2, s.fixed("a", 5, time.Hour), s.sliding("s", 50, time.Hour, 6))
			req.ReservationID, req.ReservationTTL = "hold-7", time.Hour
			return req
		}, 1, "hold-7"},
		{"reservation denied", func(s subject) request {
			req := s.request(opReserve, 6, s.fixed("a", 5, time.Hour))
			req.ReservationID, req.ReservationTTL = "hold-8", time.Hour
			return req
		}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "record")
			req := tc.setup(s)
			req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:rt", time.Hour
			first := take(t, b, req)
			raw, err := c.Get(ctx, req.IdempotencyKey).Result()
			if err != nil {
				t.Fatalf("GET the record: %v", err)
			}
			rec, err := decodeRecord(raw)
			if err != nil {
				t.Fatalf("decodeRecord(%q) = %v", raw, err)
			}
			if rec.first != tc.first || rec.hold != tc.hold || rec.now != first.Now.UnixMicro() || len(rec.rules) != len(req.Rules)*perRuleBytes {
				t.Errorf("decodeRecord(take.lua's record) = %+v, want first %d, hold %q, now %d, %d bytes of rules",
					rec, tc.first, tc.hold, first.Now.UnixMicro(), len(req.Rules)*perRuleBytes)
			}
			if enc, err := rec.encode(); err != nil || enc != raw {
				t.Errorf("decodeRecord(%q).encode() = %q, %v; want take.lua's bytes again", raw, enc, err)
			}
			want := unstrategied(first)
			want.Replayed = true
			got, err := parseTake(rec.replay(), req.Rules)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("parseTake(record.replay()) = %+v, %v; want the first decision replayed %+v", got, err, want)
			}
			again := take(t, b, req)
			if !reflect.DeepEqual(unstrategied(again), want) {
				t.Errorf("take.lua's replay = %+v, want %+v (as the Go decoder's)", again, want)
			}
		})
	}
}

// TestIdempotencyRecordFromGo: take.lua replays a record the Go encoder
// wrote (bare mode's), and a legacy text record, exactly as the Go
// decoder replays them (bare mode's replay), writing nothing.
func TestIdempotencyRecordFromGo(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	const at = 1700000000000001
	rules := func(ints ...[perRuleReply]int64) string {
		var bin []byte
		for _, r := range ints {
			bin = appendRule(bin, r)
		}
		return string(bin)
	}
	encoded := func(r record) string {
		t.Helper()
		v, err := r.encode()
		if err != nil {
			t.Fatalf("%+v.encode() = %v", r, err)
		}
		return v
	}
	tests := []struct {
		name   string
		stored string
		check  func(res driver.Result) bool
	}{
		{"allowed", encoded(record{first: 1, now: at, rules: rules([4]int64{1, 4, 1500, 0}, [4]int64{1, 9, 2, 0})}), func(res driver.Result) bool {
			return res.Allowed && res.Rules[0].Used == 4 && res.Rules[0].ResetAfter == 1500*time.Microsecond && res.Rules[1].Used == 9
		}},
		{"denied, negative reset", encoded(record{first: 0, now: at, rules: rules([4]int64{0, 10, -3, 250}, [4]int64{2, 1, 1 << 52, 0})}), func(res driver.Result) bool {
			return !res.Allowed && !res.Rules[0].Allowed && res.Rules[0].ResetAfter == -3*time.Microsecond &&
				res.Rules[0].RetryAfter == 250*time.Microsecond && res.Rules[1].CostTooHigh && res.Rules[1].ResetAfter == (1<<52)*time.Microsecond
		}},
		{"override, hold id", encoded(record{first: 5, now: at, rules: rules([4]int64{1, 2, 7, 0}, [4]int64{1, 1, 7, 0}),
			override: "12|40,10|l|0|0|1700000000000000|a=40|3|annvip", hold: "h9"}), func(res driver.Result) bool {
			return res.Allowed && res.Override.ID == 12 && res.Override.Reason == "vip" && res.Rules[0].Limit == 40 && res.ReservationID == "h9"
		}},
		{"quiet", encoded(record{first: 8, now: at, rules: rules([4]int64{1, 2, 7, 0}, [4]int64{0, 10, 7, 5}), quiet: at + 3600000000}), func(res driver.Result) bool {
			return !res.Allowed && res.Quiet.Equal(time.UnixMicro(at+3600000000)) && res.Rules[1].Used == 10
		}},
		{"keeps", encoded(record{first: 16, now: at, rules: rules([4]int64{0, 8, 7, 5}, [4]int64{1, 1, 7, 0}), keeps: "2,0"}), func(res driver.Result) bool {
			return !res.Allowed && res.Rules[0].Remaining == 0 && res.Rules[1].Remaining == 9
		}},
		{"override and quiet", encoded(record{first: 12, now: at, rules: rules([4]int64{1, 2, 7, 0}, [4]int64{1, 1, 7, 0}),
			override: "12|40,10|l|0|0|1700000000000000|a=40|3|annvip", quiet: at + 1}), func(res driver.Result) bool {
			return !res.Allowed && res.Override.ID == 12 && res.Rules[0].Limit == 40 && res.Quiet.Equal(time.UnixMicro(at+1))
		}},
		{"legacy text", "|1,1700000000000001,1,4,1500,0,0,3,1,2", func(res driver.Result) bool {
			return res.Allowed && res.Rules[0].Used == 4 && res.Rules[1].Used == 3 && res.Rules[1].RetryAfter == 2*time.Microsecond
		}},
		{"legacy text, hold id", "h7|1,1700000000000001,1,4,1500,0,1,3,1,0", func(res driver.Result) bool {
			return res.Allowed && res.ReservationID == "h7" && res.Rules[0].Used == 4
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "gorecord")
			req := s.request(opTake, 1, s.fixed("a", 10, time.Hour), s.fixed("b", 10, time.Minute))
			req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:go", time.Hour
			if err := c.Set(ctx, req.IdempotencyKey, tc.stored, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			res := take(t, b, req)
			if !res.Replayed || !res.Now.Equal(time.UnixMicro(at)) || !tc.check(res) {
				t.Errorf("take with the record %q = %+v, want it replayed", tc.stored, res)
			}
			rec, err := decodeRecord(tc.stored)
			if err != nil {
				t.Fatalf("decodeRecord(%q) = %v", tc.stored, err)
			}
			got, err := parseTake(rec.replay(), req.Rules)
			if err != nil || !reflect.DeepEqual(got, unstrategied(res)) {
				t.Errorf("the Go decoder's replay = %+v, %v; want take.lua's %+v", got, err, res)
			}
			for _, r := range req.Rules {
				if e, ok := entryOf(t, c, r); ok {
					t.Errorf("a replay wrote state: %+v", e)
				}
			}
		})
	}
}

// TestIdempotencyRecordErrors: what the Go decoder and encoder refuse.
func TestIdempotencyRecordErrors(t *testing.T) {
	head := func(first byte, rulesLen int) string {
		b := appendLE([]byte{recordMark, first}, 5, 7)
		return string(appendLE(b, int64(rulesLen), recordLen))
	}
	rule := binRule(1, 1, 1, 0)
	for _, tc := range []struct {
		name, rec, want string
	}{
		{"empty", "", "neither format"},
		{"no separator", "abc", "neither format"},
		{"short header", "\x02\x01\x05", "want at least 11"},
		{"rules past the end", head(1, 22) + rule[:21], "22 bytes of rules past its end"},
		{"no override length", head(5, 22) + rule + "\x09", "no override element's length"},
		{"override past the end", head(4, 0) + "\x09\x00abc", "9 bytes of override element past its end"},
		{"replay's first element", head(3, 22) + rule, "first element 3"},
		{"first element too large", head(9, 0), "first element 9"},
		{"legacy, too few integers", "|1", "1 integers"},
		{"legacy, half a rule", "|1,5,1,2", "4 integers"},
		{"legacy, not an integer", "|1,5,1,2,x,4", `"x" is not an integer`},
		{"legacy, override first element", "|5,5", "first element 5"},
	} {
		if r, err := decodeRecord(tc.rec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decodeRecord(%q) = %+v, %v; want an error containing %q", tc.name, tc.rec, r, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		r    record
		want string
	}{
		{"override without its flag", record{first: 1, override: "x"}, "first element 1 with 1 bytes"},
		{"flag without override", record{first: 5}, "first element 5 with 0 bytes"},
		{"replay's first element", record{first: 2}, "first element 2"},
		{"quiet and allowed", record{first: 9}, "first element 9"},
		{"too many rules", record{first: 1, rules: strings.Repeat(rule, 2979)}, "65538 bytes of rules"},
	} {
		if v, err := tc.r.encode(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: encode() = %q, %v; want an error containing %q", tc.name, v, err, tc.want)
		}
	}
}
