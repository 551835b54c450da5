package redis

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Helpers for tests that read or plant raw state in the packed layout
// (lua/prelude.lua, storage.go): the fixed-window, calendar, sliding-window
// and GCRA rules of a dimension set keep one entry each in the string
// value at group(&r).

// encodePacked builds a packed value from entries, the inverse of
// decodePacked: the format byte, then per entry the tag, the payload's
// length (3 bytes), the expiry in Unix ms (6 bytes) and the payload
// numbers (7 bytes each), all little-endian.
func encodePacked(entries []packedEntry) string {
	le := func(b []byte, n int64, k int) []byte {
		for i := 0; i < k; i++ {
			b = append(b, byte(n>>(8*i)))
		}
		return b
	}
	b := []byte{packedFormat}
	for _, e := range entries {
		if len(e.Tag) != 4 {
			panic("encodePacked: a tag is 4 bytes, got " + e.Tag)
		}
		b = append(b, e.Tag...)
		b = le(b, int64(len(e.Ints)*packedInt), 3)
		b = le(b, e.Expiry, 6)
		for _, n := range e.Ints {
			b = le(b, n, packedInt)
		}
	}
	return string(b)
}

// packedOf returns the decoded packed value at key: nil when the key does
// not exist. Anything but a packed value fails the test. A nested set's
// value (nests) is its section's entries in its root's value when the key
// itself holds none.
func packedOf(t *testing.T, c goredis.UniversalClient, key string) []packedEntry {
	t.Helper()
	es := packedAt(t, c, key)
	if root := rootOf(key); es == nil && root != "" && nests(key, root) {
		id := sectionID(key)
		for _, e := range packedAt(t, c, root) {
			if e.Tag == id {
				return e.Section
			}
		}
	}
	return es
}

// packedAt returns the decoded packed value stored at key (nil: none).
func packedAt(t *testing.T, c goredis.UniversalClient, key string) []packedEntry {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, goredis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	es, err := decodePacked(v)
	if err != nil {
		t.Fatalf("GET %s = %q: %v", key, v, err)
	}
	return es
}

// entryOf returns r's entry (tag ruleTag(&r)) in the packed value of its
// dimension set, and whether there is one.
func entryOf(t *testing.T, c goredis.UniversalClient, r driver.Rule) (packedEntry, bool) {
	t.Helper()
	tag := ruleTag(&r)
	found, n := packedEntry{}, 0
	for _, e := range packedOf(t, c, group(&r)) {
		if e.Tag == tag {
			found = e
			n++
		}
	}
	if n > 1 {
		t.Fatalf("packed value at %s holds %d entries of rule %s (tag %q), want at most 1", group(&r), n, r.Name, tag)
	}
	return found, n == 1
}

// putPacked writes entries as the packed value at key, expiring at the
// latest entry expiry (as the scripts write it).
func putPacked(t *testing.T, c goredis.UniversalClient, key string, entries ...packedEntry) {
	t.Helper()
	var top int64
	for _, e := range entries {
		top = max(top, e.Expiry)
	}
	ctx := context.Background()
	if err := c.Set(ctx, key, encodePacked(entries), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpireAt(ctx, key, time.UnixMilli(top)).Err(); err != nil {
		t.Fatal(err)
	}
}

// logOf returns r's packed sliding log (its entry: base, then at µs and
// cumulative units per record), and whether there is one.
func logOf(t *testing.T, c goredis.UniversalClient, r driver.Rule) (packedEntry, bool) {
	t.Helper()
	var e packedEntry
	ok := false
	for _, x := range packedOf(t, c, group(&r)) {
		if x.Tag == logTagOf(&r) {
			e, ok = x, true
		}
	}
	if ok && len(e.Ints)%2 != 1 {
		t.Fatalf("packed log %+v: want base then pairs", e)
	}
	return e, ok
}

// logUnits returns the units r's packed log holds (all its records).
func logUnits(t *testing.T, c goredis.UniversalClient, r driver.Rule) int64 {
	t.Helper()
	e, ok := logOf(t, c, r)
	if !ok || len(e.Ints) < 3 {
		return 0
	}
	return e.Ints[len(e.Ints)-1] - e.Ints[0]
}

// sortedSetOf returns the key of r's sliding log: the dimension set's
// sorted set (the same whatever the log rules of rules).
func sortedSetOf(t *testing.T, rules []driver.Rule, r driver.Rule) string {
	t.Helper()
	return logKey(&r)
}

// prevSortedSetOf returns the key of r's sliding log in the previous
// layout: named after the log rules of rules.
func prevSortedSetOf(t *testing.T, rules []driver.Rule, r driver.Rule) string {
	t.Helper()
	return prevLogKey(rules, &r)
}

func TestEncodePackedRoundTrip(t *testing.T) {
	in := []packedEntry{
		{Tag: "AbCd", Expiry: 1795215617870, Ints: []int64{3}},
		{Tag: "wxyz", Expiry: 1, Ints: []int64{123456789, 0, 7, 1<<53 - 1}},
		{Tag: markTag, Expiry: 1<<47 + 5},
	}
	out, err := decodePacked(encodePacked(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decodePacked(encodePacked(%v)) = %v", in, out)
	}
	for i := range in {
		if out[i].Tag != in[i].Tag || out[i].Expiry != in[i].Expiry || len(out[i].Ints) != len(in[i].Ints) {
			t.Fatalf("entry %d = %+v, want %+v", i, out[i], in[i])
		}
		for k := range in[i].Ints {
			if out[i].Ints[k] != in[i].Ints[k] {
				t.Fatalf("entry %d = %+v, want %+v", i, out[i], in[i])
			}
		}
	}
}

// TestPackedSharedKey: the packed rules of one dimension set (one Group)
// share one key, one entry each; a request naming only some of them (a
// policy version without the others, as in a rolling deploy) keeps the
// others' entries while they matter.
func TestPackedSharedKey(t *testing.T) {
	b, c := plainStandalone(t)
	ctx := context.Background()
	s := newSubject(t, "shared")
	g := s.base + "="
	rules := []driver.Rule{
		s.fixed("a", 5, time.Hour),
		s.fixed("b", 9, 24*time.Hour),
		s.sliding("c", 700, time.Minute, 10), // above driver.LogLine: cells
	}
	for i := range rules {
		rules[i].Group = g
	}
	take(t, b, s.request(opTake, 2, rules...))
	res := take(t, b, s.request(opTake, 1, rules...))
	for i, r := range rules {
		checkRule(t, "take #2 rule "+r.Name, res.Rules[i], true, 3, r.Limit)
	}
	for _, r := range rules {
		if n, _ := c.Exists(ctx, r.Key).Result(); n != 0 {
			t.Errorf("rule %s: its own key %s exists, want only the group key", r.Name, r.Key)
		}
	}
	if n, _ := c.Exists(ctx, g).Result(); n != 1 {
		t.Fatalf("group key %s: EXISTS = %d, want 1", g, n)
	}
	es := packedOf(t, c, g)
	if len(es) != 3 {
		t.Fatalf("packed value = %+v, want 3 entries", es)
	}
	byTag := map[string]packedEntry{}
	for _, e := range es {
		byTag[e.Tag] = e
	}
	now := res.Now.UnixMilli()
	var top int64
	for _, r := range rules {
		e, ok := byTag[ruleTag(&r)]
		if !ok {
			t.Fatalf("no entry of rule %s (tag %q) in %+v", r.Name, ruleTag(&r), es)
		}
		top = max(top, e.Expiry)
		if e.Expiry <= now {
			t.Errorf("rule %s: entry expiry %d not after now %d", r.Name, e.Expiry, now)
		}
		switch r.Algorithm {
		case driver.FixedWindow:
			if len(e.Ints) != 1 || e.Ints[0] != 3 {
				t.Errorf("rule %s: entry %+v, want count {3}", r.Name, e)
			}
			end := res.Now.Truncate(r.Window).Add(r.Window).UnixMilli()
			if e.Expiry != end {
				t.Errorf("rule %s: entry expiry %d, want the window end %d", r.Name, e.Expiry, end)
			}
		case driver.SlidingWindow:
			// {newest cell, sum, counts oldest first}: both takes in one
			// cell (6s) or two adjacent ones.
			if len(e.Ints) < 3 || sum(e.Ints[2:]) != 3 || e.Ints[1] != 3 {
				t.Errorf("rule %s: entry %+v, want cells summing to 3", r.Name, e)
			}
			if i := res.Now.UnixMicro() / (6 * time.Second).Microseconds(); len(e.Ints) > 0 && e.Ints[0] != i {
				t.Errorf("rule %s: newest cell %d, want the current cell %d", r.Name, e.Ints[0], i)
			}
		}
	}
	if pet, _ := c.PExpireTime(ctx, g).Result(); pet != time.Duration(top)*time.Millisecond {
		t.Errorf("PEXPIRETIME = %v, want the latest entry expiry %d ms", pet, top)
	}

	// A request without rule c (removed from the policy): c's entry,
	// whose expiry lies ahead, stays as it was; a and b go on counting.
	before := byTag[ruleTag(&rules[2])]
	res = take(t, b, s.request(opTake, 1, rules[0], rules[1]))
	checkRule(t, "take without c, rule a", res.Rules[0], true, 4, 5)
	checkRule(t, "take without c, rule b", res.Rules[1], true, 4, 9)
	es = packedOf(t, c, g)
	if len(es) != 3 {
		t.Fatalf("packed value after a take without c = %+v, want 3 entries (c kept)", es)
	}
	after, ok := entryOf(t, c, rules[2])
	if !ok || len(after.Ints) < 3 || after.Expiry != before.Expiry || sum(after.Ints[2:]) != 3 || after.Ints[1] != 3 || after.Ints[0] != before.Ints[0] {
		t.Errorf("rule c's entry after a take without it = %+v (present %v), want %+v unchanged", after, ok, before)
	}
	res = take(t, b, s.request(opPeek, 1, rules...))
	checkRule(t, "peek with c again, rule c", res.Rules[2], true, 3, 700)
	checkRule(t, "peek with c again, rule a", res.Rules[0], true, 4, 5)
}

// sum adds xs.
func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// TestPackedLogClockBack: a packed log holding records later than the
// server's clock (a clock that went back, or a failover to a server
// behind) takes units at now in order, through the fast script and
// through take.lua alike: a record at now inserted before the first later
// record, with the cumulative count up to it, the later records' counts
// up by as many, the newest record still last; the used count is every
// record's in the window.
func TestPackedLogClockBack(t *testing.T) {
	b, c := plainStandalone(t)
	for _, tc := range []struct {
		name   string
		noFast bool
		past   bool // a record before now too
	}{{"fast", false, true}, {"fast/all later", false, false}, {"take.lua", true, true}, {"take.lua/all later", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b.noFast = tc.noFast
			defer func() { b.noFast = false }()
			s := newSubject(t, "back")
			r := s.log("l", 10, time.Hour)
			now := serverNow(t, c).UnixMicro()
			t2, t3 := now+60_000_000, now+120_000_000 // a minute and two ahead
			ints := []int64{7, t2, 9, t3, 10}         // base 7: units 2 and 1
			if tc.past {
				ints = []int64{7, now - 10_000_000, 8, t2, 10, t3, 11} // units 1, 2, 1
			}
			exp := (t3 + time.Hour.Microseconds() + 999) / 1000 // ms, rounded up
			putPacked(t, c, group(&r), packedEntry{Tag: logTagOf(&r), Expiry: exp, Ints: ints})
			req := s.request(opTake, 2, r)
			if got, fast := decidingScript(t, b, req), tc.noFast == false; (got != takeScript.Hash()) != fast {
				t.Fatalf("deciding script %s, want the fast one: %v", got, fast)
			}
			res := take(t, b, req)
			held := ints[len(ints)-1] - ints[0]
			if !res.Allowed || res.Rules[0].Used != held+2 {
				t.Fatalf("take 2 = %+v, want admitted, used %d", res, held+2)
			}
			e, ok := logOf(t, c, r)
			if !ok {
				t.Fatal("no log after the take")
			}
			at := res.Now.UnixMicro()
			want := []int64{7, at, 9, t2, 11, t3, 12}
			if tc.past {
				want = []int64{7, now - 10_000_000, 8, at, 10, t2, 12, t3, 13}
			}
			if !slices.Equal(e.Ints, want) {
				t.Errorf("log after the take = %v, want %v (a record at now %d inserted in order)", e.Ints, want, at)
			}
			if e.Expiry != exp {
				t.Errorf("log expiry %d, want %d (its newest record's)", e.Expiry, exp)
			}
		})
	}
}
