package memory

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestSeed holds Rule.Seed to its contract: a rule without live state
// starts from its seed rule's Used, placed at the decision's time, and
// the seeded state is stored by any take, allowed or denied (a peek
// stores nothing).
func TestSeed(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	ctx := context.Background()
	old := driver.Rule{Name: "r", Key: "{u}:r.old", Group: "{u}:=", Algorithm: driver.FixedWindow, Limit: 5, Window: time.Hour}
	nw := driver.Rule{Name: "r", Key: "{u}:r.new", Group: "{u}:=", Algorithm: driver.SlidingLog, Limit: 4, Window: 2 * time.Hour, Seed: 1}
	alone := nw
	alone.Seed = 0
	type call struct {
		name  string
		op    func(context.Context, driver.Request) (driver.Result, error)
		rules []driver.Rule
		ok    bool
		used  []int64
	}
	steps := []call{
		{"take 3 on the old rule", b.Take, []driver.Rule{old}, true, []int64{3}},
		{"peek old+new: new seeded with 3", b.Peek, []driver.Rule{old, nw}, true, []int64{3, 3}},
		{"peek new alone: the peek stored nothing", b.Peek, []driver.Rule{alone}, true, []int64{0}},
		{"take old+new: seeded 3 + 1", b.Take, []driver.Rule{old, nw}, true, []int64{4, 4}},
		{"take old+new: new at its limit denies", b.Take, []driver.Rule{old, nw}, false, []int64{4, 4}},
		{"peek new alone: stored, not reseeded", b.Peek, []driver.Rule{alone}, false, []int64{4}},
	}
	for _, s := range steps {
		cost := int64(1)
		if s.name == "take 3 on the old rule" {
			cost = 3
		}
		res, err := s.op(ctx, driver.Request{Policy: "p", Rules: s.rules, Cost: cost})
		if err != nil {
			t.Fatalf("%s = %v", s.name, err)
		}
		if res.Allowed != s.ok {
			t.Errorf("%s: Allowed = %t, want %t", s.name, res.Allowed, s.ok)
		}
		for i, u := range s.used {
			if res.Rules[i].Used != u {
				t.Errorf("%s: rule %d Used = %d, want %d", s.name, i, res.Rules[i].Used, u)
			}
		}
	}
	// The carried units sit at the seeding take's instant: they count for
	// the new rule's whole window from there.
	clock.Advance(2*time.Hour - time.Millisecond)
	if res, _ := b.Peek(ctx, driver.Request{Policy: "p", Rules: []driver.Rule{alone}, Cost: 1}); res.Rules[0].Used != 4 {
		t.Errorf("peek new alone 2h-1ms later: Used = %d, want 4", res.Rules[0].Used)
	}

	// A denied take stores the seed (the carried units, not its cost).
	other := func(k string) driver.Rule { r := old; r.Key = "{v}:" + k; return r }
	o, n := other("r.old"), nw
	n.Key = "{v}:r.new"
	if _, err := b.Take(ctx, driver.Request{Rules: []driver.Rule{o}, Cost: 5}); err != nil {
		t.Fatal(err)
	}
	if res, _ := b.Take(ctx, driver.Request{Rules: []driver.Rule{o, n}, Cost: 1}); res.Allowed || res.Rules[1].Used != 5 {
		t.Errorf("take capped old+new = allowed %t, new Used %d, want denied with new seeded to 5", res.Allowed, res.Rules[1].Used)
	}
	n.Seed = 0
	if res, _ := b.Peek(ctx, driver.Request{Rules: []driver.Rule{n}, Cost: 1}); res.Rules[0].Used != 5 {
		t.Errorf("peek new alone after a denied take: Used = %d, want 5 (the seed stored, not the cost)", res.Rules[0].Used)
	}

	// A seed must name an earlier rule.
	bad := nw
	bad.Seed = 2
	if _, err := b.Take(ctx, driver.Request{Rules: []driver.Rule{old, bad}, Cost: 1}); err == nil {
		t.Errorf("Take with Seed naming the rule itself = nil error, want one")
	}
}
