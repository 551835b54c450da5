package redis

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// TestEpochTag: a rule's packed tag includes its epoch when > 0, and is
// unchanged for epoch 0, so existing state stays valid and a new epoch
// starts afresh (a sliding log's is not: its dimension set's one log is
// shared by all its log rules, epochs included).
func TestEpochTag(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "epoch")
	r := s.fixed("f", 1, time.Hour)
	if got := ruleTag(&r); got != ruleTagV0(&r) {
		t.Errorf("ruleTag(epoch 0) = %q, want the tag before epochs, %q", got, ruleTagV0(&r))
	}
	e1, e2 := r, r
	e1.Epoch, e2.Epoch = 1, 2
	if ruleTag(&e1) == ruleTag(&r) || ruleTag(&e1) == ruleTag(&e2) {
		t.Errorf("ruleTag of epochs 0, 1, 2 = %q, %q, %q, want distinct", ruleTag(&r), ruleTag(&e1), ruleTag(&e2))
	}
	for _, tc := range []struct {
		name string
		r    driver.Rule
	}{
		{"fixed", s.fixed("f", 1, time.Hour)},
		{"sliding", s.sliding("s", 1, time.Hour, 4)},
		{"log", s.log("l", 1, time.Hour)},
		{"gcra", s.gcra("g", 1, time.Hour, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.r
			take(t, b, s.request(opTake, 1, old))
			if res := take(t, b, s.request(opPeek, 1, old)); res.Allowed {
				t.Fatalf("Peek(epoch 0) = allowed, want denied (full)")
			}
			nw := old
			nw.Epoch = 7
			res := take(t, b, s.request(opPeek, 1, nw))
			if !res.Allowed || res.Rules[0].Used != 0 {
				t.Fatalf("Peek(epoch 7) = %+v, want allowed on fresh state", res)
			}
		})
	}
}

// ruleTagV0 is ruleTag as it was before epochs (the tag of existing
// state), for a rule without calendar.
func ruleTagV0(r *driver.Rule) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d\x00%s", r.Name, r.Algorithm, int64(r.Window), r.SubWindows, r.Calendar, "")
	s := h.Sum64()
	var b [4]byte
	for i := range b {
		b[i] = tagAlphabet[s&63]
		s >>= 6
	}
	return string(b[:])
}

// TestSeed: a rule with a seed and no state starts from its seed rule's
// used (placed at now), for each algorithm; its seeded state is written
// by a take, allowed or denied (the carried units alone), never by a
// peek; once it has state of its own, the seed is not applied again.
func TestSeed(t *testing.T) {
	b, c := standalone(t)
	for _, tc := range []struct {
		name string
		nw   func(s subject) driver.Rule
	}{
		{"fixed", func(s subject) driver.Rule { return s.fixed("r", 5, 2*time.Hour) }},
		{"sliding", func(s subject) driver.Rule { return s.sliding("r", 5, 2*time.Hour, 6) }},
		{"log", func(s subject) driver.Rule { return s.log("r", 5, 2*time.Hour) }},
		{"gcra", func(s subject) driver.Rule { return s.gcra("r", 5, 2*time.Hour, 4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "seed-"+tc.name)
			// One dimension set: both rules' packed entries in one value.
			old := s.fixed("r", 10, time.Hour)
			old.Group = s.base + "=set"
			for range 3 {
				take(t, b, s.request(opTake, 1, old))
			}
			nw := tc.nw(s)
			nw.Epoch, nw.Seed = 2, 1
			nw.Key, nw.Group = s.key("r")+"~2", old.Group
			rules := []driver.Rule{old, nw}

			// A peek stores nothing, a denied take the carried units.
			res := take(t, b, s.request(opPeek, 1, rules...))
			checkRule(t, "peek: new rule seeded", res.Rules[1], true, 3, 5)
			if stored(t, c, s, rules, nw) != 0 {
				t.Fatalf("a peek stored the seeded state")
			}
			res = take(t, b, s.request(opTake, 3, rules...))
			if res.Allowed {
				t.Fatalf("Take(cost 3) = allowed, want denied by the seeded rule (3+3 > 5)")
			}
			checkRule(t, "denied: new rule seeded", res.Rules[1], false, 3, 5)
			if got := stored(t, c, s, rules, nw); got != 3 {
				t.Fatalf("after a denied take the new rule's state holds %d units, want the 3 carried", got)
			}

			res = take(t, b, s.request(opTake, 1, rules...))
			if !res.Allowed {
				t.Fatalf("Take = %+v, want allowed", res)
			}
			checkRule(t, "old", res.Rules[0], true, 4, 10)
			checkRule(t, "new, seeded then taken", res.Rules[1], true, 4, 5)
			// Its own state now: the seed (old used 4) is not added again.
			res = take(t, b, s.request(opTake, 1, rules...))
			checkRule(t, "new, own state", res.Rules[1], true, 5, 5)
			res = take(t, b, s.request(opTake, 1, rules...))
			if res.Allowed {
				t.Fatalf("Take = allowed past the new rule's limit")
			}
			// Without the seed (the change's reach passed), the state stays.
			nw.Seed = 0
			res = take(t, b, s.request(opPeek, 1, nw))
			checkRule(t, "new without seed", res.Rules[0], false, 5, 5)
		})
	}
}

// TestSeedBeyondLimit: carried units beyond the new limit deny at once,
// and a seed of nothing seeds nothing.
func TestSeedBeyondLimit(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "seed-beyond")
	old := s.sliding("r", 10, time.Hour, 4)
	take(t, b, s.request(opTake, 8, old))
	for _, nw := range []driver.Rule{s.fixed("r", 5, time.Hour), s.gcra("r", 5, time.Hour, 4), s.log("r", 5, time.Hour)} {
		nw.Epoch, nw.Seed, nw.Key = 3, 1, nw.Key+"~3"
		res := take(t, b, s.request(opTake, 1, old, nw))
		if res.Allowed || res.Rules[1].Allowed {
			t.Errorf("%v rule seeded with 8 of limit 5: Take = %+v, want denied", nw.Algorithm, res)
		}
	}
	empty := s.fixed("e", 10, time.Hour)
	nw := s.fixed("e", 5, 2*time.Hour)
	nw.Epoch, nw.Seed = 3, 1
	res := take(t, b, s.request(opTake, 1, empty, nw))
	checkRule(t, "seed of nothing", res.Rules[1], true, 1, 5)
}

// TestSeedInvalid: a seed that is not an earlier rule is refused.
func TestSeedInvalid(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "seed-invalid")
	for _, seed := range []int{-1, 2, 3} {
		a, r := s.fixed("a", 1, time.Hour), s.fixed("b", 1, time.Minute)
		r.Seed = seed
		if _, err := b.Take(context.Background(), s.request(opTake, 1, a, r).Request); err == nil {
			t.Errorf("Take(seed %d of rule 2) = nil error, want refused", seed)
		}
	}
}

// TestSeedBatchCluster: seeded requests batched, and on a cluster.
func TestSeedBatchCluster(t *testing.T) {
	sb, _ := standalone(t)
	cb, _ := cluster(t)
	for name, b := range map[string]*Backend{"standalone": sb, "cluster": cb} {
		t.Run(name, func(t *testing.T) {
			s := newSubject(t, "seed-batch-"+name)
			old := s.log("r", 10, time.Hour)
			take(t, b, s.request(opTake, 2, old))
			nw := s.sliding("r", 4, time.Hour, 10)
			nw.Epoch, nw.Seed, nw.Key = 1, 1, nw.Key+"~1"
			reqs := []driver.Request{s.request(opTake, 1, old, nw).Request, s.request(opTake, 1, old, nw).Request, s.request(opTake, 1, old, nw).Request}
			out := b.TakeBatch(context.Background(), reqs)
			for i, want := range []bool{true, true, false} {
				if out[i].Err != nil || out[i].Result.Allowed != want {
					t.Errorf("attempt %d = %+v, %v, want allowed %v (2 carried, limit 4)", i, out[i].Result, out[i].Err, want)
				}
			}
		})
	}
}

// stored returns the units r's state holds: a packed entry's count (fixed
// window), cells' sum (sliding window) or TAT in units of T (GCRA), or its
// log's members; 0 without state.
func stored(t *testing.T, c *goredisClient, s subject, rules []driver.Rule, r driver.Rule) int64 {
	t.Helper()
	if r.ExactLog() {
		return logUnits(t, c, r)
	}
	e, ok := entryOf(t, c, r)
	if !ok {
		return 0
	}
	switch r.Algorithm {
	case driver.SlidingWindow:
		return e.Ints[1]
	case driver.GCRA:
		tp, _, _ := r.GCRAParams()
		now := serverNow(t, c).UnixMicro()
		return (e.Ints[0] - now + tp.Microseconds() - 1) / tp.Microseconds()
	}
	return e.Ints[0]
}

// TestLogPerRule: a packed sliding log is its rule's own entry, as the
// memory backend keeps it: a log rule added beside a capped one counts
// only what it admitted, and a rule's successor (new window, new epoch)
// counts its predecessor's units by its seed, once, then as its own.
// Through fast scripts and take.lua.
func TestLogPerRule(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "take.lua"}[noFast], func(t *testing.T) {
			b, c := standalone(t)
			b.noFast = noFast
			s := newSubject(t, "log-rule")
			grp := s.base + "=u"
			in := func(r driver.Rule) driver.Rule { r.Group = grp; return r }
			capped := in(s.log("a", 3, time.Hour))
			take(t, b, s.request(opTake, 3, capped))
			// A log rule added beside it.
			added := in(s.log("b", 10, 2*time.Hour))
			if res := take(t, b, s.request(opTake, 1, capped, added)); res.Allowed || res.Rules[0].Used != 3 || res.Rules[1].Used != 0 {
				t.Errorf("Take(capped, added) = %+v, want denied by a at 3, b at 0", res)
			}
			// Its window changed (epoch 2), its predecessor beside it.
			nw := in(s.log("a", 3, 2*time.Hour))
			nw.Epoch, nw.Seed, nw.Key = 2, 1, nw.Key+"~2"
			res := take(t, b, s.request(opTake, 1, capped, nw))
			if res.Allowed || res.Rules[0].Used != 3 || res.Rules[1].Used != 3 {
				t.Errorf("Take(predecessor, successor) = %+v, want denied, both at 3", res)
			}
			// The successor alone (the predecessor's reach passed): the
			// carried units are its own.
			nw.Seed = 0
			if res := take(t, b, s.request(opTake, 1, nw)); res.Allowed || res.Rules[0].Used != 3 {
				t.Errorf("Take(successor) = %+v, want denied at 3", res)
			}
			if n := logUnits(t, c, nw); n != 3 {
				t.Errorf("the successor's log holds %d units, want the 3 carried", n)
			}
		})
	}
}

// TestLogReadThrough: under Options.Upgrade a packed log not there yet
// is read once from the set's sorted-set log (the layout before packed
// logs), so an upgrade keeps the counts; once the packed log exists the
// sorted set is not read again; without Upgrade it is never read.
func TestLogReadThrough(t *testing.T) {
	for _, upgrade := range []bool{true, false} {
		t.Run(fmt.Sprintf("upgrade=%t", upgrade), func(t *testing.T) {
			_, c := standalone(t)
			b := New(c, &Options{Upgrade: upgrade})
			ctx := context.Background()
			s := newSubject(t, "log-prev")
			grp := s.base + "=u"
			// w, a sliding window evaluated as a log, never counted in the
			// sorted set: it does not read it.
			rules := []driver.Rule{s.log("a", 5, time.Hour), s.log("b", 6, 2*time.Hour), s.sliding("w", 5, time.Hour, 10)}
			for i := range rules {
				rules[i].Group = grp
			}
			now := serverNow(t, c).UnixMicro()
			prev := sortedSetOf(t, rules, rules[0])
			for k := range 3 {
				at := strconv.FormatInt(now-int64(k+1)*1000, 10)
				c.ZAdd(ctx, prev, goredisZ(float64(now-int64(k+1)*1000), at+"11"))
			}
			c.ZAdd(ctx, prev, goredisZ(float64(1<<60), "!123")) // a hold marker: not a unit
			c.Expire(ctx, prev, time.Hour)
			res := take(t, b, s.request(opTake, 1, rules...))
			if !upgrade {
				if !res.Allowed || res.Rules[0].Used != 1 {
					t.Fatalf("Take = %+v, want allowed at 1 (the sorted set not read)", res)
				}
				return
			}
			if !res.Allowed || res.Rules[0].Used != 4 || res.Rules[1].Used != 4 || res.Rules[2].Used != 1 {
				t.Fatalf("Take = %+v, want allowed at 4 (3 read through), the sliding window at 1", res)
			}
			if n := logUnits(t, c, rules[0]); n != 4 {
				t.Errorf("the packed log holds %d units, want the 3 read through and 1", n)
			}
			// The set nests in the subject's root key (grp extends it).
			if ttl, _ := c.PTTL(ctx, rootOf(grp)).Result(); ttl <= 0 || ttl > 2*time.Hour+time.Second {
				t.Errorf("the packed value's PTTL = %v, want in (0, 2h+1s]", ttl)
			}
			// A packed log of its own: the sorted set is not read again.
			c.ZAdd(ctx, prev, goredisZ(float64(now), strconv.FormatInt(now, 10)+"19"))
			if res := take(t, b, s.request(opPeek, 1, rules...)); res.Rules[0].Used != 4 {
				t.Errorf("Peek = %+v, want a at 4 (not read through again)", res)
			}
		})
	}
}
