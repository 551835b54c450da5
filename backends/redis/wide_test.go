package redis

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestWideSprays: batches of takes over 40 to 90 contents of one person
// (a root with many sections: wide, lua.WideAt), each counted as a fixed
// window of 100 ms counts them, on fast scripts and on take.lua. A
// batch is one script of up to batchAttempts attempts at one TIME,
// during which the server's clock goes on: the wide hash and root outlive
// their contents by lua.ExpirySlackMs (without it, a run of this test's
// first version found 596 of about 9 700 takes' counts gone: a window had
// ended, by the server's clock, during their script).
func TestWideSprays(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run("noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
			b, _ := plainStandalone(t)
			b.noFast = noFast
			s := newSubject(t, "sprays")
			ctx := context.Background()
			const W = 100 * time.Millisecond
			rules := func(cn string) []driver.Rule {
				return []driver.Rule{
					{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.SlidingWindow, Limit: 1_000_000, Window: time.Second, SubWindows: 10},
					{Name: "b", Key: s.key("b", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 13, Window: W},
				}
			}
			type count struct{ win, n int64 }
			want := map[string]count{}
			rng := rand.New(rand.NewPCG(1, 2))
			bad := 0
			for k := range 150 {
				n := 40 + rng.IntN(51)
				perm := rng.Perm(150)[:n]
				reqs := make([]request, n)
				for i, c := range perm {
					reqs[i] = request{op: opTake, Request: driver.Request{Policy: "p", Rules: rules("v" + strconv.Itoa(c)), Cost: 1}}
				}
				for i, o := range b.batch(ctx, reqs) {
					cn := "v" + strconv.Itoa(perm[i])
					if o.Err != nil {
						t.Fatalf("batch %d, take %d: %v", k, i, o.Err)
					}
					win := o.Result.Now.UnixMicro() / W.Microseconds()
					w := want[cn]
					if w.win != win {
						w = count{win, 0}
					}
					if w.n < 13 { // else denied: nothing counted
						w.n++
					}
					if got := o.Result.Rules[1].Used; got != w.n {
						if bad++; bad <= 5 {
							t.Errorf("batch %d, take %d (%s): used %d, want %d", k, i, cn, got, w.n)
						}
						w.n = got
					}
					want[cn] = w
				}
			}
			if bad > 0 {
				t.Errorf("%d takes counted wrong", bad)
			}
		})
	}
}

//go:embed testdata/take-887acc9.lua
var take887acc9 string

// TestWideRootRefusedByOlderVersion: during a rolling deploy, a freqcap
// that knows nothing of wide roots (take.lua as built at 887acc9, frozen in
// testdata) meets a root this one made wide. It must refuse it (an
// error: the limiter's failure policy decides, fail-closed by default),
// never read it as a root without sections, which would start every
// nested set's count afresh: a wide root starts with lua.WideFormat, not
// the packed format byte that version's unpackv (and its fast scripts)
// accept.
func TestWideRootRefusedByOlderVersion(t *testing.T) {
	b, c := plainStandalone(t)
	ctx := context.Background()
	rep, err := b.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newSubject(t, "olderversion")
	root := driver.Rule{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: time.Hour}
	rules := func(cn string) []driver.Rule {
		return []driver.Rule{root, {Name: "b", Key: s.key("b", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 3, Window: time.Hour}}
	}
	older := func(t *testing.T, rules []driver.Rule) error {
		t.Helper()
		cl, err := b.encode(opTake, driver.Request{Policy: "p", Rules: rules, Cost: 1}, time.Now(), rep)
		if err != nil {
			t.Fatal(err)
		}
		argv := cl.args[evalArgs+len(cl.keys):]
		// That version's NESTREC: key index, root's index, Options.Upgrade, id
		// (no wide hash index; flags were 0 or 1).
		if nest := argv[lua.ArgNest].(string); nest != "" {
			var old []byte
			for p := 0; p < len(nest); p += lua.NestRec {
				r := nest[p : p+lua.NestRec]
				old = append(append(append(old, r[:4]...), r[6]&lua.NestUpgrade), r[7:]...)
			}
			argv[lua.ArgNest] = string(old)
		}
		return c.Eval(ctx, take887acc9, cl.keys, argv...).Err()
	}
	for i := range 80 {
		take(t, b, request{op: opTake, Request: driver.Request{Policy: "p", Rules: rules("v" + strconv.Itoa(i)), Cost: 1}})
		if i == 3 { // narrow: the older version decides on it
			if err := older(t, rules("v1")); err != nil {
				t.Fatalf("the older take.lua on a narrow root: %v", err)
			}
		}
	}
	if v := c.Get(ctx, s.base+"=").Val(); len(v) == 0 || v[0] != lua.WideFormat {
		t.Fatalf("the root is not wide after 80 contents (%d bytes)", len(v))
	}
	for _, tc := range []struct {
		name  string
		rules []driver.Rule
	}{
		{"the root's rule", []driver.Rule{root}},
		{"a content's rules", rules("v1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := older(t, tc.rules)
			if err == nil || !strings.Contains(err.Error(), "its state key holds a value freqcap did not write") {
				t.Fatalf("the older take.lua on a wide root: error %v, want its refusal of a value it did not write", err)
			}
		})
	}
}

// TestWideDescribe: Describe says where a wide root's nested sets live
// and how their fields expire: swept on Redis 7.0, HPEXPIREAT on a server
// with native hash-field expiry (FREQCAP_TEST_HFE).
func TestWideDescribe(t *testing.T) {
	cases := []struct {
		name, env, want string
	}{
		{"redis-7.0", "", "a plain hash whose dead fields each write adding a field sweeps"},
		{"hfe", "FREQCAP_TEST_HFE", "expiring by HPEXPIREAT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b *Backend
			if tc.env == "" {
				b, _ = plainStandalone(t)
			} else if addr := os.Getenv(tc.env); addr != "" {
				b, _ = moduleBackend(t, addr, capability.Config{})
			} else {
				t.Skipf("SKIPPED: %s is not set", tc.env)
			}
			d, err := b.Describe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(d.Notes, func(n string) bool {
				return strings.HasPrefix(n, "wide subjects: ") && strings.Contains(n, tc.want)
			}) {
				t.Errorf("Describe().Notes = %q, want a wide subjects note saying %q", d.Notes, tc.want)
			}
		})
	}
}

// TestWideSeed: a live change of a campaign rule (a new epoch seeded from
// the old rule, docs/DESIGN.md "Live policy changes") on a wide person:
// the new rule's entry starts from the old one's count in the campaign's
// field of the wide hash, for every algorithm, on fast scripts and
// take.lua; other campaigns are seeded on their own first decision.
func TestWideSeed(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			nw   func(s subject, cn string) driver.Rule
		}{
			{"fixed", func(s subject, cn string) driver.Rule { return s.fixed("c", 2, 2*time.Hour) }},
			{"sliding", func(s subject, cn string) driver.Rule { return s.sliding("c", 2, 2*time.Hour, 6) }},
			{"log", func(s subject, cn string) driver.Rule { return s.log("c", 2, 2*time.Hour) }},
			{"gcra", func(s subject, cn string) driver.Rule { return s.gcra("c", 2, 2*time.Hour, 1) }},
		} {
			t.Run(tc.name+"/noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
				b, c := plainStandalone(t)
				b.noFast = noFast
				ctx := context.Background()
				s := newSubject(t, "wide-seed")
				user := driver.Rule{Name: "user", Key: s.key("user"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
				old := func(cn string) driver.Rule {
					return driver.Rule{Name: "c", Key: s.key("c", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 3, Window: time.Hour}
				}
				for i := range 80 {
					if res := take(t, b, s.request(opTake, 1, user, old(fmt.Sprintf("k%d", i)))); !res.Allowed {
						t.Fatalf("take of campaign %d denied", i)
					}
				}
				if v := c.Get(ctx, s.base+"=").Val(); len(v) == 0 || v[0] != lua.WideFormat {
					t.Fatalf("root not wide after 80 campaigns (%d bytes)", len(v))
				}
				// k1 once more under the old rule: 2 of its 3.
				take(t, b, s.request(opTake, 1, user, old("k1")))
				rules := func(cn string) []driver.Rule {
					nw := tc.nw(s, cn)
					nw.Name, nw.Epoch, nw.Seed = "c2", 2, 2 // seeded from rules[1], the old rule
					nw.Key, nw.Group = s.key("c", cn)+"~2", s.base+"=c:"+cn
					return []driver.Rule{user, old(cn), nw}
				}
				res := take(t, b, s.request(opPeek, 1, rules("k1")...))
				checkRule(t, "peek of k1: new rule seeded", res.Rules[2], false, 2, 2)
				res = take(t, b, s.request(opTake, 1, rules("k1")...))
				if res.Allowed {
					t.Fatalf("take of k1 = allowed, want denied by the new rule seeded with the old one's 2: %s", resLine(res))
				}
				res = take(t, b, s.request(opTake, 1, rules("k2")...))
				checkRule(t, "k2: new rule seeded with 1, then taken", res.Rules[2], true, 2, 2)
				res = take(t, b, s.request(opTake, 1, rules("k2")...))
				if res.Allowed {
					t.Fatalf("second take of k2 = allowed past the new rule's limit: %s", resLine(res))
				}
			})
		}
	}
}

// TestWideOverrides: a person's overrides decide on a wide root as on a
// narrow one: a limit override raises a campaign rule's cap (its count in
// the campaign's field), a counted exempt admits past it and counts, on
// fast scripts and take.lua.
func TestWideOverrides(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run("noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
			b, c := plainStandalone(t)
			b.noFast = noFast
			ctx := context.Background()
			s := newSubject(t, "wide-ov")
			user := driver.Rule{Name: "user", Key: s.key("user"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: 24 * time.Hour}
			rules := func(cn string) []driver.Rule {
				return []driver.Rule{user, {Name: "campaign", Key: s.key("campaign", cn), Group: s.base + "=c:" + cn,
					Algorithm: driver.SlidingWindow, Limit: 3, Window: 24 * time.Hour}}
			}
			for i := range 80 {
				if res := take(t, b, s.withOverrides(s.request(opTake, 1, rules(fmt.Sprintf("k%d", i))...))); !res.Allowed {
					t.Fatalf("take of campaign %d denied", i)
				}
			}
			if v := c.Get(ctx, s.base+"=").Val(); len(v) == 0 || v[0] != lua.WideFormat {
				t.Fatalf("root not wide after 80 campaigns (%d bytes)", len(v))
			}
			lim := setOverride(t, b, s, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"campaign": 5}})
			for i := int64(2); i <= 5; i++ {
				res := take(t, b, s.withOverrides(s.request(opTake, 1, rules("k1")...)))
				checkRule(t, fmt.Sprintf("k1 take %d under the limit override", i), res.Rules[1], true, i, 5)
				if res.Override.ID != lim.ID {
					t.Errorf("take %d: Override = %+v, want the limit override %d", i, res.Override, lim.ID)
				}
			}
			res := take(t, b, s.withOverrides(s.request(opTake, 1, rules("k1")...)))
			checkRule(t, "k1 past the override's limit", res.Rules[1], false, 5, 5)
			if err := b.DeleteOverride(ctx, s.overrides(), lim.ID); err != nil {
				t.Fatal(err)
			}
			setOverride(t, b, s, driver.Override{Kind: driver.Exempt, Counted: true})
			res = take(t, b, s.withOverrides(s.request(opTake, 1, rules("k1")...)))
			if !res.Allowed || res.Override.Kind != driver.Exempt || res.Rules[1].Used != 6 || res.Rules[0].Used != 85 {
				t.Errorf("k1 under a counted exempt: %s, override %+v; want allowed, campaign used 6, user 85", resLine(res), res.Override)
			}
			res = take(t, b, s.request(opPeek, 1, rules("k2")...))
			checkRule(t, "k2 untouched", res.Rules[1], true, 1, 3)
		})
	}
}
