package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

func (s subject) overrides() string { return s.base + "!o" }

// withOverrides returns req reading the subject's overrides.
func (s subject) withOverrides(req request) request {
	req.OverrideKey = s.overrides()
	return req
}

// setOverride stores o under the subject's overrides.
func setOverride(t *testing.T, b *Backend, s subject, o driver.Override) driver.Override {
	t.Helper()
	got, err := b.SetOverride(context.Background(), s.overrides(), o)
	if err != nil {
		t.Fatalf("SetOverride(…) = %v", err)
	}
	return got
}

// TestOverrideStore: set, list and delete round-trip every field through
// the real script, IDs grow, ended and deleted overrides are gone, an
// override already ended is refused.
func TestOverrideStore(t *testing.T) {
	sb, c := standalone(t)
	cb, cc := cluster(t)
	for name, b := range map[string]*Backend{"standalone": sb, "cluster": cb} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := newSubject(t, "ov-store-"+name)
			now := serverNow(t, c)
			if name == "cluster" {
				now = serverNow(t, cc)
			}
			a := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r.1": 40, "x-y": 1 << 50},
				Until: now.Add(time.Hour).Truncate(time.Microsecond), Reason: "partner | quota = 40, ü", By: "ann|ops"})
			e := setOverride(t, b, s, driver.Override{Kind: driver.Exempt, Counted: true, Reason: "", By: ""})
			if a.ID <= 0 || e.ID <= a.ID {
				t.Errorf("IDs = %d, %d, want > 0 and growing", a.ID, e.ID)
			}
			if d := a.Created.Sub(now); d < 0 || d > time.Minute {
				t.Errorf("Created = %v, want the server's clock (about %v)", a.Created, now)
			}
			got, err := b.Overrides(ctx, s.overrides())
			if err != nil {
				t.Fatal(err)
			}
			if want := []driver.Override{a, e}; !reflect.DeepEqual(got, want) {
				t.Fatalf("Overrides(…) = %+v, want %+v", got, want)
			}
			if _, err := b.SetOverride(ctx, s.overrides(), driver.Override{Kind: driver.Block, Until: now.Add(-time.Second)}); err == nil {
				t.Errorf("SetOverride(ended) = nil error, want refused")
			}
			if err := b.DeleteOverride(ctx, s.overrides(), a.ID); err != nil {
				t.Errorf("DeleteOverride(%d) = %v", a.ID, err)
			}
			if err := b.DeleteOverride(ctx, s.overrides(), a.ID); !errors.Is(err, driver.ErrOverrideNotFound) {
				t.Errorf("DeleteOverride(%d) again = %v, want ErrOverrideNotFound", a.ID, err)
			}
			// One that ends soon: gone from the list, not deletable.
			soon := setOverride(t, b, s, driver.Override{Kind: driver.Block, Until: serverNow(t, c).Add(300 * time.Millisecond)})
			eventually(t, 10*time.Second, "the override's end", func() bool {
				l, err := b.Overrides(ctx, s.overrides())
				return err == nil && len(l) == 1 && l[0].ID == e.ID
			})
			if err := b.DeleteOverride(ctx, s.overrides(), soon.ID); !errors.Is(err, driver.ErrOverrideNotFound) {
				t.Errorf("DeleteOverride(ended) = %v, want ErrOverrideNotFound", err)
			}
		})
	}
}

// TestOverrideInvalid: what SetOverride refuses before any write.
func TestOverrideInvalid(t *testing.T) {
	b, _ := standalone(t)
	s := newSubject(t, "ov-invalid")
	for _, tc := range []struct {
		name string
		key  string
		o    driver.Override
	}{
		{"no key", "", driver.Override{Kind: driver.Block}},
		{"no kind", s.overrides(), driver.Override{}},
		{"limit without limits", s.overrides(), driver.Override{Kind: driver.Limit}},
		{"limit of 0", s.overrides(), driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": 0}}},
		{"limit beyond MaxLimit", s.overrides(), driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": driver.MaxLimit + 1}}},
		{"bad rule name", s.overrides(), driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a,b": 1}}},
		{"block with limits", s.overrides(), driver.Override{Kind: driver.Block, Limits: map[string]int64{"a": 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.SetOverride(context.Background(), tc.key, tc.o); err == nil {
				t.Errorf("SetOverride(%+v) = nil error, want refused", tc.o)
			}
		})
	}
}

// TestOverrideDecisions: block over exempt over limits, applied in the
// decision's script (a fast script that reads overrides, and take.lua);
// Result.Override names the one that applied.
func TestOverrideDecisions(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "take.lua"}[noFast], func(t *testing.T) {
			b, c := standalone(t)
			b.noFast = noFast
			overrideDecisions(t, b, c)
		})
	}
}

func overrideDecisions(t *testing.T, b *Backend, c *goredisClient) {
	t.Run("none set", func(t *testing.T) {
		s := newSubject(t, "ov-none")
		res := take(t, b, s.withOverrides(s.request(opTake, 1, s.fixed("a", 1, time.Hour))))
		if !res.Allowed || !reflect.DeepEqual(res.Override, driver.Override{}) {
			t.Errorf("Take = %+v, want allowed without override", res)
		}
	})
	t.Run("block", func(t *testing.T) {
		s := newSubject(t, "ov-block")
		rules := []driver.Rule{s.fixed("a", 5, time.Hour), shadowOf(s.fixed("trial", 1, time.Hour))}
		take(t, b, s.request(opTake, 1, rules...))
		until := serverNow(t, c).Add(time.Hour)
		setOverride(t, b, s, driver.Override{Kind: driver.Exempt})
		blk := setOverride(t, b, s, driver.Override{Kind: driver.Block, Until: until, Reason: "abuse"})
		res := take(t, b, s.withOverrides(s.request(opTake, 1, rules...)))
		if res.Allowed || res.Override.ID != blk.ID || res.Override.Kind != driver.Block || res.Override.Reason != "abuse" {
			t.Fatalf("Take = %+v, want denied by block %d", res, blk.ID)
		}
		checkRule(t, "a (evaluated, not consumed)", res.Rules[0], true, 1, 5)
		ins := take(t, b, s.withOverrides(s.request(opInspect, 0, rules...)))
		if ins.Override.ID != blk.ID {
			t.Errorf("Inspect(…).Override = %+v, want the block", ins.Override)
		}
		if len(ins.Trail) != 2 {
			t.Fatalf("Inspect(…).Trail = %+v, want the block's entry and trial's shadow one", ins.Trail)
		}
		d := ins.Trail[0]
		if d.Override != blk.ID || d.Rule != "" || d.Shadow || d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
			t.Errorf("trail[0] = %+v, want block %d's entry, retry until its end", d, blk.ID)
		}
		if d := ins.Trail[1]; !d.Shadow || d.Rule != "trial" {
			t.Errorf("trail[1] = %+v, want trial's shadow entry", d)
		}
		// Deleted: decisions are the rules' again (the exempt then).
		if err := b.DeleteOverride(context.Background(), s.overrides(), blk.ID); err != nil {
			t.Fatal(err)
		}
		res = take(t, b, s.withOverrides(s.request(opTake, 1, rules...)))
		if !res.Allowed || res.Override.Kind != driver.Exempt {
			t.Errorf("Take after delete = %+v, want allowed by the exempt", res)
		}
	})
	t.Run("block without end", func(t *testing.T) {
		s := newSubject(t, "ov-block-forever")
		blk := setOverride(t, b, s, driver.Override{Kind: driver.Block})
		take(t, b, s.withOverrides(s.request(opTake, 1, s.fixed("a", 5, time.Hour))))
		ins := take(t, b, s.withOverrides(s.request(opInspect, 0, s.fixed("a", 5, time.Hour))))
		if len(ins.Trail) != 1 || ins.Trail[0].Override != blk.ID || ins.Trail[0].RetryAfter != 0 {
			t.Errorf("Inspect(…).Trail = %+v, want one block entry without retry", ins.Trail)
		}
	})
	for _, counted := range []bool{true, false} {
		name := map[bool]string{true: "exempt counted", false: "exempt uncounted"}[counted]
		t.Run(name, func(t *testing.T) {
			s := newSubject(t, "ov-exempt")
			rules := []driver.Rule{s.fixed("f", 1, time.Hour), s.sliding("s", 1, time.Hour, 4), s.log("l", 1, time.Hour), s.gcra("g", 1, time.Hour, 0)}
			ex := setOverride(t, b, s, driver.Override{Kind: driver.Exempt, Counted: counted})
			for i := range 3 {
				res := take(t, b, s.withOverrides(s.request(opTake, 1, rules...)))
				if !res.Allowed || res.Override.ID != ex.ID {
					t.Fatalf("take %d = %+v, want allowed by exempt %d", i+1, res, ex.ID)
				}
			}
			res := take(t, b, s.request(opPeek, 1, rules...))
			for i, r := range res.Rules {
				want := int64(0)
				if counted {
					want = []int64{3, 3, 3, 1}[i] // GCRA reports at most its limit
				}
				if r.Used != want {
					t.Errorf("rule %s used = %d, want %d", rules[i].Name, r.Used, want)
				}
			}
		})
	}
	t.Run("limit", func(t *testing.T) {
		s := newSubject(t, "ov-limit")
		rules := []driver.Rule{s.fixed("a", 1, time.Hour), s.fixed("b", 9, time.Hour)}
		old := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": 2}})
		vip := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": 3, "nope": 7}})
		for i := range 4 {
			res := take(t, b, s.withOverrides(s.request(opTake, 1, rules...)))
			if res.Allowed != (i < 3) || res.Override.ID != vip.ID {
				t.Fatalf("take %d = %+v, want allowed %v, override %d (the latest; not %d)", i+1, res, i < 3, vip.ID, old.ID)
			}
			checkRule(t, "a under the override", res.Rules[0], i < 3, min(int64(i+1), 3), 3)
			checkRule(t, "b", res.Rules[1], true, min(int64(i+1), 3), 9)
		}
		ins := take(t, b, s.withOverrides(s.request(opInspect, 0, rules...)))
		if len(ins.Trail) != 1 || ins.Trail[0].Limit != 3 || ins.Trail[0].Rule != "a" {
			t.Errorf("Inspect(…).Trail = %+v, want a's denial at limit 3", ins.Trail)
		}
	})
	t.Run("limit gcra", func(t *testing.T) {
		// 1 per hour, burst 2 (limit 3); the override's rate, 3600 per
		// hour, gives a retry of about 1 s instead of 1 h.
		s := newSubject(t, "ov-gcra")
		r := s.gcra("g", 1, time.Hour, 2)
		setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"g": 3600}})
		var res driver.Result
		for range 4 {
			res = take(t, b, s.withOverrides(s.request(opTake, 1, r)))
		}
		if res.Allowed || res.Rules[0].Limit != 3 || res.Rules[0].RetryAfter <= 0 || res.Rules[0].RetryAfter > time.Second {
			t.Errorf("4th take = %+v, want denied, limit 3, retry within 1s", res)
		}
	})
	t.Run("replay", func(t *testing.T) {
		s := newSubject(t, "ov-replay")
		ex := setOverride(t, b, s, driver.Override{Kind: driver.Exempt, Reason: "vip"})
		req := s.withOverrides(s.request(opTake, 1, s.fixed("a", 1, time.Hour)))
		req.IdempotencyKey, req.IdempotencyTTL = s.base+"!i:1", time.Minute
		first := take(t, b, req)
		again := take(t, b, req)
		if !again.Replayed || !reflect.DeepEqual(again.Override, first.Override) || again.Override.ID != ex.ID {
			t.Errorf("replay = %+v, want the first decision's override %+v", again, first.Override)
		}
	})
	t.Run("batch", func(t *testing.T) {
		s := newSubject(t, "ov-batch")
		blk := setOverride(t, b, s, driver.Override{Kind: driver.Block})
		other := newSubject(t, "ov-batch-other")
		reqs := []driver.Request{
			s.withOverrides(s.request(opTake, 1, s.fixed("a", 5, time.Hour))).Request,
			other.withOverrides(other.request(opTake, 1, other.fixed("a", 5, time.Hour))).Request,
			other.request(opTake, 1, other.fixed("a", 5, time.Hour)).Request,
		}
		out := b.TakeBatch(context.Background(), reqs)
		if out[0].Err != nil || out[0].Result.Allowed || out[0].Result.Override.ID != blk.ID {
			t.Errorf("blocked attempt = %+v, %v", out[0].Result, out[0].Err)
		}
		for i := 1; i < 3; i++ {
			if out[i].Err != nil || !out[i].Result.Allowed || out[i].Result.Override.ID != 0 || out[i].Result.Rules[0].Used != int64(i) {
				t.Errorf("attempt %d = %+v, %v, want allowed without override", i, out[i].Result, out[i].Err)
			}
		}
	})
}

// TestOverrideCluster: overrides decide on a cluster too (the counter in
// another slot than the subject's).
func TestOverrideCluster(t *testing.T) {
	b, _ := cluster(t)
	s := newSubject(t, "ov-cluster")
	lim := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"a": 2}})
	for i := range 3 {
		res := take(t, b, s.withOverrides(s.request(opTake, 1, s.sliding("a", 1, time.Hour, 4))))
		if res.Allowed != (i < 2) || res.Override.ID != lim.ID || res.Rules[0].Limit != 2 {
			t.Fatalf("take %d = %+v, want allowed %v under override %d", i+1, res, i < 2, lim.ID)
		}
	}
}

// TestFastOverridesMatchTake runs the same random takes and peeks under
// the same overrides through the fast scripts that read overrides
// (subject A) and through take.lua (B), for each fast policy shape, and
// wants the same decisions, counts, overrides and denial trails.
func TestFastOverridesMatchTake(t *testing.T) {
	fast, _ := plainStandalone(t)
	slow, _ := plainStandalone(t)
	slow.noFast = true
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(3, 4))
	scenarios := map[string]func(rules []driver.Rule) []driver.Override{
		"none": func([]driver.Rule) []driver.Override { return nil },
		"limits": func(rules []driver.Rule) []driver.Override {
			last := rules[len(rules)-1]
			return []driver.Override{
				{Kind: driver.Limit, Limits: map[string]int64{rules[0].Name: rules[0].Limit + 2}},
				{Kind: driver.Limit, Limits: map[string]int64{last.Name: max(1, last.Limit/2), "absent": 3}},
			}
		},
		"exempt counted":   func([]driver.Rule) []driver.Override { return []driver.Override{{Kind: driver.Exempt, Counted: true}} },
		"exempt uncounted": func([]driver.Rule) []driver.Override { return []driver.Override{{Kind: driver.Exempt}} },
		"block": func(rules []driver.Rule) []driver.Override {
			return []driver.Override{{Kind: driver.Exempt}, {Kind: driver.Block, Until: time.Now().Add(time.Hour)}}
		},
	}
	for name := range fastPolicies(newSubject(t, "x")) {
		for sc, ovs := range scenarios {
			t.Run(name+"/"+sc, func(t *testing.T) {
				subs := []subject{newSubject(t, "a"), newSubject(t, "b")}
				rules := [][]driver.Rule{fastPolicies(subs[0])[name], fastPolicies(subs[1])[name]}
				for i, s := range subs {
					for _, o := range ovs(rules[i]) {
						setOverride(t, fast, s, o)
					}
				}
				req := subs[0].withOverrides(subs[0].request(opTake, 1, rules[0]...))
				if decidingScript(t, fast, req) == takeScript.Hash() {
					t.Fatalf("policy %s: no fast script", name)
				}
				var most time.Duration
				for step := range 15 {
					o, cost := opTake, int64(1+rnd.IntN(3))
					if rnd.IntN(5) == 0 {
						o = opPeek
					}
					var got [2]driver.Result
					var began, ended [2]time.Time
					for i, s := range subs {
						b := []*Backend{fast, slow}[i]
						r := s.withOverrides(s.request(o, cost, rules[i]...))
						began[i] = time.Now()
						res, err := b.do(ctx, r)
						ended[i] = time.Now()
						if err != nil {
							t.Fatalf("step %d: %v subject %d: %v", step, o, i, err)
						}
						got[i] = res
					}
					most = max(most, apart(began[:], ended[:], 0, 1))
					what := fmt.Sprintf("step %d (%v, cost %d)", step, o, cost)
					sameResult(t, what, got[0], got[1], most)
					a, b := got[0].Override, got[1].Override
					if a.Kind != b.Kind || !reflect.DeepEqual(a.Limits, b.Limits) || (a.ID == 0) != (b.ID == 0) {
						t.Fatalf("%s: override %+v, want %+v", what, a, b)
					}
				}
				trails := make([][]string, 2)
				for i, s := range subs {
					tr, err := fast.c.LRange(ctx, s.trail(), 0, -1).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range tr {
						f := strings.Split(e, "|")
						f[0], f[6] = "", "" // the time, retry-after
						if f[7] == "4" {
							f[2] = "" // the block's ID
						}
						trails[i] = append(trails[i], strings.Join(f, "|"))
					}
				}
				if !slices.Equal(trails[0], trails[1]) {
					t.Errorf("trails differ:\nfast     %q\ntake.lua %q", trails[0], trails[1])
				}
			})
		}
	}
}
