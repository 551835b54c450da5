package redis

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// TestEpochTag: a rule's packed tag (and its log key) includes its epoch
// when > 0, and is unchanged for epoch 0, so existing state stays valid
// and a new epoch starts afresh.
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
			if res := take(t, b, s.request(opPeek, 1, nw)); !res.Allowed || res.Rules[0].Used != 0 {
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
// only with an allowed take; once it has state of its own, the seed is
// not applied again.
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

			// A peek and a denied take store nothing.
			res := take(t, b, s.request(opPeek, 1, rules...))
			checkRule(t, "peek: new rule seeded", res.Rules[1], true, 3, 5)
			res = take(t, b, s.request(opTake, 3, rules...))
			if res.Allowed {
				t.Fatalf("Take(cost 3) = allowed, want denied by the seeded rule (3+3 > 5)")
			}
			checkRule(t, "denied: new rule seeded", res.Rules[1], false, 3, 5)
			if _, ok := entryOf(t, c, nw); ok && nw.Algorithm != driver.SlidingLog {
				t.Fatalf("a denied take stored the seeded entry")
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
