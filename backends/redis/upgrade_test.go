package redis

import (
	"context"
	_ "embed"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

//go:embed testdata/onekeyperrule.lua
var oneKeyPerRule string

// TestUpgradeReadsThrough writes state with the script of the
// one-key-per-rule layout (as a deployed older version does), then decides
// on the packed layout: with Options.Upgrade the counts carry over for
// every plain algorithm; without it they start afresh (as docs/DESIGN.md
// says).
func TestUpgradeReadsThrough(t *testing.T) {
	_, c := standalone(t)
	ctx := context.Background()
	for _, upgrade := range []bool{true, false} {
		t.Run(fmt.Sprintf("upgrade=%t", upgrade), func(t *testing.T) {
			s := newSubject(t, "upgrade")
			rules := []driver.Rule{
				s.fixed("f", 10, time.Hour),
				s.sliding("s", 700, time.Hour, 10), // above driver.LogLine: cells
				s.gcra("g", 10, time.Hour, 9),
				s.log("l", 10, time.Hour),
			}
			// The old script: ARGV op, cost, n, tk, hk, trail max, trail
			// TTL, policy, then alg, name, limit, p1, p2 per rule, then ik,
			// idempotency TTL, trail values; KEYS the rules' own keys.
			keys := make([]string, len(rules))
			args := []any{"t", 1, len(rules), 0, 0, 0, 0, "p"}
			for i, r := range rules {
				keys[i] = r.Key
				switch r.Algorithm {
				case driver.FixedWindow:
					args = append(args, "f", r.Name, r.Limit, r.Window.Microseconds(), 0)
				case driver.SlidingWindow:
					sp := r.Span(time.Microsecond)
					args = append(args, "s", r.Name, r.Limit, sp.Back, sp.Size)
				case driver.GCRA:
					tt, tol, l := r.GCRAParams()
					args = append(args, "g", r.Name, l, tt.Microseconds(), tol.Microseconds())
				case driver.SlidingLog:
					args = append(args, "l", r.Name, r.Limit, r.Window.Microseconds(), 0)
				}
			}
			args = append(args, 0, 0, "")
			for i := range 3 {
				v, err := c.Eval(ctx, oneKeyPerRule, keys, args...).Slice()
				if err != nil || len(v) == 0 || v[0] != int64(1) {
					t.Fatalf("old layout take #%d = %v, %v, want allowed", i+1, v, err)
				}
			}
			b := New(c, &Options{Upgrade: upgrade})
			grouped := make([]driver.Rule, len(rules))
			for i, r := range rules {
				r.Group = s.base + "="
				grouped[i] = r
			}
			want := int64(3)
			if !upgrade {
				want = 0
			}
			res := take(t, b, s.request(opPeek, 1, grouped...))
			for i, rr := range res.Rules {
				if rr.Used != want {
					t.Errorf("peek after the old layout's 3 takes: rule %s used %d, want %d", rules[i].Name, rr.Used, want)
				}
			}
			res = take(t, b, s.request(opTake, 1, grouped...))
			for i, rr := range res.Rules {
				if !rr.Allowed || rr.Used != want+1 {
					t.Errorf("take on the packed layout: rule %s = %+v, want allowed, used %d", rules[i].Name, rr, want+1)
				}
			}
			if n, err := c.Exists(ctx, s.base+"=").Result(); err != nil || n != 1 {
				t.Errorf("EXISTS packed key = %d, %v, want 1", n, err)
			}
			// Built from the old keys, then written whole: with its TTL.
			if ttl, err := c.PTTL(ctx, s.base+"=").Result(); err != nil || ttl <= 0 {
				t.Errorf("PTTL packed key = %v, %v, want > 0", ttl, err)
			}
			if v, err := c.Get(ctx, rules[0].Key).Result(); err != nil || v != "3" {
				t.Errorf("the old fixed-window counter = %q, %v, want \"3\" (read, never changed)", v, err)
			}
			// Once written, the packed value is the state: the old keys
			// are not read again.
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			res = take(t, b, s.request(opPeek, 1, grouped...))
			for i, rr := range res.Rules {
				if rr.Used != want+1 {
					t.Errorf("peek after the old keys went: rule %s used %d, want %d", rules[i].Name, rr.Used, want+1)
				}
			}
		})
	}
}

// TestUpgradeReplaysOldRecord: an idempotency record the one-key-per-rule
// layout wrote ("<hold id>|<integers>") still replays after the upgrade.
func TestUpgradeReplaysOldRecord(t *testing.T) {
	b, c := standalone(t)
	s := newSubject(t, "oldrec")
	r := s.fixed("f", 10, time.Hour)
	req := s.request(opTake, 1, r)
	req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:a", time.Hour
	if err := c.Set(context.Background(), req.IdempotencyKey, "|1,1700000000000001,1,4,1500,0", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	res := take(t, b, req)
	if !res.Replayed || !res.Allowed || res.Rules[0].Used != 4 || res.Rules[0].ResetAfter != 1500*time.Microsecond || !res.Now.Equal(time.UnixMicro(1700000000000001)) {
		t.Errorf("take with an old record = %+v, want the record replayed (allowed, used 4)", res)
	}
	if e, ok := entryOf(t, c, r); ok {
		t.Errorf("a replay wrote state: %+v", e)
	}
}
