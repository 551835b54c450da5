package redis

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver"
)

//go:embed testdata/onekeyperrule.lua
var oneKeyPerRule string

// TestUpgradeReadsThrough writes state with the script of the
// one-key-per-rule layout (as a deployed older version does), then decides
// on the packed layout: with Options.Upgrade the counts carry over for
// every plain algorithm (a sliding window's cells into its exact log when
// its limit is at most driver.LogLine); without it they start afresh (as
// docs/DESIGN.md says).
func TestUpgradeReadsThrough(t *testing.T) {
	_, c := standalone(t)
	ctx := context.Background()
	for _, upgrade := range []bool{true, false} {
		t.Run(fmt.Sprintf("upgrade=%t", upgrade), func(t *testing.T) {
			s := newSubject(t, "upgrade")
			rules := []driver.Rule{
				s.fixed("f", 10, time.Hour),
				s.sliding("s", 700, time.Hour, 10), // above driver.LogLine: cells
				s.sliding("w", 10, time.Hour, 10),  // up to driver.LogLine: cells then, an exact log now
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

// oldCells is a sliding window's cells as the version before
// driver.LogLine kept them for rule r: the entry of tag ruleTag(r) in its
// set's packed value, units per cell index (newest stored cell top).
func oldCells(r driver.Rule, top int64, units map[int64]int64) packedEntry {
	sp := r.Span(time.Microsecond)
	lo := top
	for j := range units {
		lo = min(lo, j)
	}
	ints := []int64{top, 0}
	for j := lo; j <= top; j++ {
		ints = append(ints, units[j])
		ints[1] += units[j]
	}
	return packedEntry{Tag: ruleTag(&r), Expiry: (sp.Leaves(top) + 999) / 1000, Ints: ints}
}

// cellsAnswer is what the cells (units per index) answer for a take of
// cost 1 at now (µs) under limit, by driver.CellSpan: used, whether it
// is admitted, its reset-after and, denied, its retry-after.
func cellsAnswer(sp driver.CellSpan, units map[int64]int64, limit, now int64) (used int64, allowed bool, reset, retry time.Duration) {
	return cellsAnswerN(sp, units, limit, 1, now)
}

// cellsAnswerN is cellsAnswer for a take of cost.
func cellsAnswerN(sp driver.CellSpan, units map[int64]int64, limit, cost, now int64) (used int64, allowed bool, reset, retry time.Duration) {
	lo := sp.Oldest(sp.Index(now))
	var live []int64
	for j, u := range units {
		if j >= lo && u > 0 {
			live = append(live, j)
			used += u
		}
	}
	slices.Sort(live)
	if len(live) > 0 {
		reset = time.Duration(sp.Leaves(live[len(live)-1])-now) * time.Microsecond
	}
	if used+cost <= limit {
		return used, true, reset, 0
	}
	need, acc := used+cost-limit, int64(0)
	for _, j := range live {
		if acc += units[j]; acc >= need {
			return used, false, reset, time.Duration(sp.Leaves(j)-now) * time.Microsecond
		}
	}
	panic("unreachable: the live cells hold used units")
}

// TestUpgradeCarriesCells: a sliding window of limit at most
// driver.LogLine counted in cells before it was an exact log (its cells
// an entry of the set's packed value under its cells' tag, ruleTag).
// Under Options.Upgrade its log, where it has none yet, is built from the
// cells that still count, each cell's units a record that leaves the
// window exactly when the cell would have stopped counting, so the
// subject answers as the cells did (used, denied, retry- and reset-after)
// and is admitted no earlier; nothing is counted twice, and once the log
// is written the cells are not read again. Without Upgrade the counts
// start afresh (docs/DESIGN.md). Cells that divide the window (their
// records at the cells' ends) and cells that do not (later), in a root
// set and in a nested set (kept at its own key before nesting), on a
// standalone server and a cluster.
func TestUpgradeCarriesCells(t *testing.T) {
	ctx := context.Background()
	_, sc := standalone(t)
	_, cc := cluster(t)
	for _, srv := range []struct {
		name string
		c    goredis.UniversalClient
	}{{"standalone", sc}, {"cluster", cc}} {
		for _, tc := range []struct {
			name   string
			cells  int
			nested bool
		}{{"10 cells", 10, false}, {"7 cells (not dividing the window)", 7, false}, {"nested", 10, true}} {
			for _, upgrade := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/upgrade=%t", srv.name, tc.name, upgrade), func(t *testing.T) {
					c := srv.c
					b := New(c, &Options{Upgrade: upgrade})
					s := newSubject(t, "carry")
					const limit = 5
					r := s.sliding("w", limit, time.Hour, tc.cells)
					r.Group = s.base + "="
					if tc.nested {
						r.Group = s.base + "=c:x"
					}
					sp := r.Span(time.Microsecond)
					i := sp.Index(serverNow(t, c).UnixMicro())
					// A dead cell, the oldest counting one, one in the middle
					// and the current one: 4 units count.
					units := map[int64]int64{i - sp.Back - 1: 3, i - sp.Back: 1, i - 3: 2, i: 1}
					// Written where the version before kept it: the set's own key.
					putPacked(t, c, r.Group, oldCells(r, i, units))

					peek := take(t, b, s.request(opPeek, 1, r))
					now := peek.Now.UnixMicro()
					used, _, reset, _ := cellsAnswer(sp, units, limit, now)
					if !upgrade {
						if peek.Rules[0].Used != 0 {
							t.Fatalf("Peek = %+v, want used 0 (afresh)", peek.Rules[0])
						}
						if res := take(t, b, s.request(opTake, 1, r)); !res.Allowed || res.Rules[0].Used != 1 {
							t.Errorf("Take = %+v, want allowed at 1 (afresh)", res.Rules[0])
						}
						return
					}
					if got := peek.Rules[0]; got.Used != used || got.ResetAfter != reset {
						t.Errorf("Peek = %+v, want the cells' used %d, reset-after %v", got, used, reset)
					}
					if _, ok := logOf(t, c, r); ok {
						t.Errorf("a peek wrote the carried log")
					}

					// The take that reaches the limit writes the log: the carried
					// records, then its own unit at now.
					res := take(t, b, s.request(opTake, 1, r))
					now = res.Now.UnixMicro()
					used, allowed, _, _ := cellsAnswer(sp, units, limit, now)
					if res.Allowed != allowed || res.Rules[0].Used != used+1 {
						t.Fatalf("Take = %+v, want allowed %v at %d (the cells' %d and 1)", res.Rules[0], allowed, used+1, used)
					}
					lg, ok := logOf(t, c, r)
					if !ok {
						t.Fatal("no log written by an admitted take")
					}
					w := r.Window.Microseconds()
					type rec struct{ at, units int64 }
					var want []rec
					for j, u := range units {
						if j >= sp.Oldest(sp.Index(now)) {
							want = append(want, rec{sp.Leaves(j) - w, u})
						}
					}
					want = append(want, rec{now, 1})
					slices.SortFunc(want, func(a, b rec) int { return int(a.at - b.at) })
					var got []rec
					for k, prev := 1, lg.Ints[0]; k+1 < len(lg.Ints); k += 2 {
						got = append(got, rec{lg.Ints[k], lg.Ints[k+1] - prev})
						prev = lg.Ints[k+1]
					}
					if !slices.Equal(got, want) {
						t.Errorf("the log's records (at µs, units) = %v, want %v", got, want)
					}
					for j := range units {
						if tc.cells == 10 && sp.Leaves(j)-w != (j+1)*sp.Size {
							t.Errorf("cell %d: a record at %d, not its end %d, though cells divide the window", j, sp.Leaves(j)-w, (j+1)*sp.Size)
						}
					}

					// Capped now, as the cells would be with the unit taken
					// in the current cell: denied until the oldest counting
					// cell stops counting, not earlier.
					units[sp.Index(now)]++
					res = take(t, b, s.request(opTake, 1, r))
					now = res.Now.UnixMicro()
					used, allowed, _, retry := cellsAnswer(sp, units, limit, now)
					if got := res.Rules[0]; res.Allowed != allowed || got.Used != used || got.RetryAfter != retry {
						t.Errorf("Take at the limit = %+v, want the cells' answer: allowed %v, used %d, retry-after %v",
							got, allowed, used, retry)
					}

					// Read once: the old cells stay (an older version running
					// beside this one still counts them) but are not read
					// again, even when they change.
					es := packedOf(t, c, r.Group)
					cellsLeft := false
					for k, e := range es {
						if e.Tag == ruleTag(&r) {
							cellsLeft = true
							es[k].Ints[len(e.Ints)-1] += 50
							es[k].Ints[1] += 50
						}
					}
					if !cellsLeft {
						t.Errorf("the old cells' entry went before its expiry: %+v", es)
					}
					if tc.nested {
						// Moved into its root's value as a section: its own key
						// is gone (and the section is not changed here).
						if n, _ := c.Exists(ctx, r.Group).Result(); n != 0 {
							t.Errorf("the nested set's own key is still there once its section is written")
						}
					} else {
						putPacked(t, c, r.Group, es...)
					}
					if got := take(t, b, s.request(opPeek, 1, r)).Rules[0]; got.Used != limit {
						t.Errorf("Peek after the old cells changed = %+v, want used %d (not read again)", got, limit)
					}
				})
			}
		}
	}
}

// TestUpgradeCappedUntilCellsLetGo: a subject capped by a sliding window
// that counted in cells (its limit at most driver.LogLine; the cells
// written by the cells' own code, as the rule above the line runs: the
// same tag) stays capped under Options.Upgrade until the cells would have
// let it go, each denial's retry-after exactly that instant, and is
// admitted then, counting only its own unit. On the server's clock
// (TIME, which no test can set): the decisions are polled, each judged
// at the instant it reports. On a standalone server and a cluster.
func TestUpgradeCappedUntilCellsLetGo(t *testing.T) {
	_, sc := standalone(t)
	_, cc := cluster(t)
	for _, srv := range []struct {
		name string
		c    goredis.UniversalClient
	}{{"standalone", sc}, {"cluster", cc}} {
		t.Run(srv.name, func(t *testing.T) { cappedUntilCellsLetGo(t, srv.c) })
	}
}

func cappedUntilCellsLetGo(t *testing.T, c goredis.UniversalClient) {
	s := newSubject(t, "letgo")
	old := s.sliding("w", driver.LogLine+1, 2*time.Second, 4) // cells of 500ms
	old.Group = s.base + "="
	res := take(t, New(c, nil), s.request(opTake, 3, old))
	if !res.Allowed || res.Rules[0].Used != 3 {
		t.Fatalf("Take of 3 on cells = %+v, want allowed at 3", res)
	}
	sp := old.Span(time.Microsecond)
	free := sp.Leaves(sp.Index(res.Now.UnixMicro())) // when the cell stops counting
	if _, ok := entryOf(t, c, old); !ok {
		t.Fatal("no cells entry written")
	}

	r := old
	r.Limit = 3 // an exact log now
	b := New(c, &Options{Upgrade: true})
	denials := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := take(t, b, s.request(opTake, 1, r))
		now := res.Now.UnixMicro()
		if res.Allowed {
			if now < free {
				t.Fatalf("admitted at %d, %dµs before the cells let go at %d", now, free-now, free)
			}
			if res.Rules[0].Used != 1 {
				t.Errorf("admitted at %d = %+v, want used 1 (the carried units gone, counted once)", now, res.Rules[0])
			}
			t.Logf("denied %d times, then admitted %dµs after the cells let go", denials, now-free)
			break
		}
		if now >= free {
			t.Fatalf("denied at %d, %dµs after the cells let go at %d: %+v", now, now-free, free, res.Rules[0])
		}
		if want := time.Duration(free-now) * time.Microsecond; res.Rules[0].RetryAfter != want || res.Rules[0].Used != 3 {
			t.Fatalf("denied at %d = %+v, want used 3, retry-after %v", now, res.Rules[0], want)
		}
		denials++
		if time.Now().After(deadline) {
			t.Fatalf("still denied after 10s (the cells let go at %d)", free)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's clock, not passing time
	}
	if denials == 0 {
		t.Errorf("never denied: the first decision came after the cells let go")
	}
}

// TestUpgradeCarriesCellsOverLimit: cells holding more units than the
// limit (a limit lowered, a counted exempt) in more cells than the limit
// are carried whole, in at most Limit records (the oldest folded into the
// oldest kept): every take is answered as the cells answer it, whatever
// its cost.
func TestUpgradeCarriesCellsOverLimit(t *testing.T) {
	_, c := standalone(t)
	b := New(c, &Options{Upgrade: true})
	s := newSubject(t, "fold")
	const limit = 3
	r := s.sliding("w", limit, time.Hour, 10)
	r.Group = s.base + "="
	sp := r.Span(time.Microsecond)
	i := sp.Index(serverNow(t, c).UnixMicro())
	units := map[int64]int64{i - sp.Back: 2, i - 7: 1, i - 5: 3, i - 2: 1, i: 1}
	putPacked(t, c, r.Group, oldCells(r, i, units))
	for cost := int64(1); cost <= limit; cost++ {
		res := take(t, b, s.request(opTake, cost, r))
		used, allowed, reset, retry := cellsAnswerN(sp, units, limit, cost, res.Now.UnixMicro())
		if got := res.Rules[0]; res.Allowed != allowed || got.Used != used || got.ResetAfter != reset || got.RetryAfter != retry {
			t.Errorf("Take of %d = %+v, want the cells' answer: allowed %v, used %d, reset-after %v, retry-after %v",
				cost, got, allowed, used, reset, retry)
		}
	}
}
