package redis

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/redistest"
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
// and how their fields expire (capability.Wide's sentence): swept on Redis
// 7.0, HPEXPIREAT on a server with native hash-field expiry
// (FREQCAP_TEST_HFE), swept on a TairHash server (FREQCAP_TEST_TAIRHASH),
// saying why the module's own field expiry is not used; and a root that
// goes wide there takes that mode (the mode byte of its wide marker).
func TestWideDescribe(t *testing.T) {
	cases := []struct {
		name, env, mode string
		want            []string
		cfg             capability.Config
	}{
		{"redis-7.0", "", lua.WideModeSweep, []string{"mode s: a plain hash, one field per value, whose dead fields each write adding a field sweeps"}, capability.Config{}},
		{"hfe", "FREQCAP_TEST_HFE", lua.WideModeSweep, []string{"mode s: a plain hash", "native hash-field expiry (HPEXPIRE on every master) is not used for them by default"}, capability.Config{}},
		{"hfe/field-expiry", "FREQCAP_TEST_HFE", lua.WideModeHFE, []string{"mode h: one field per value, each expiring by HPEXPIREAT"}, capability.Config{WideFieldExpiry: true}},
		{"tairhash", "FREQCAP_TEST_TAIRHASH", lua.WideModeSweep, []string{"mode s: a plain hash", "TairHash's per-field expiry (EXHSET … PXAT) is not used"}, capability.Config{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b *Backend
			var c *goredis.Client
			if tc.env == "" {
				b, c = plainStandalone(t)
			} else if addr := os.Getenv(tc.env); addr != "" {
				b, c = moduleBackend(t, addr, tc.cfg)
			} else {
				t.Skipf("SKIPPED: %s is not set", tc.env)
			}
			ctx := context.Background()
			d, err := b.Describe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !slices.ContainsFunc(d.Notes, func(n string) bool {
					return strings.HasPrefix(n, "wide subjects: ") && strings.Contains(n, want)
				}) {
					t.Errorf("Describe().Notes = %q, want a wide subjects note saying %q", d.Notes, want)
				}
			}
			s := newSubject(t, "widedescribe")
			for i := range 80 {
				take(t, b, request{op: opTake, Request: driver.Request{Policy: "p", Cost: 1, Rules: []driver.Rule{
					{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: time.Hour},
					{Name: "b", Key: s.key("b", strconv.Itoa(i)), Group: s.base + "=c:" + strconv.Itoa(i), Algorithm: driver.FixedWindow, Limit: 3, Window: time.Hour},
				}}})
			}
			if got := wideModeAt(t, c, s.base+"="); got != tc.mode {
				t.Errorf("the root's wide mode after 80 contents = %q, want %q", got, tc.mode)
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

// TestWideFastOneRoundTrip: a wide root's decisions are its fast
// script's, one EVALSHA each and none of take.lua (nothing handed back):
// takes of a content it holds and of new ones, peeks, denials, and a
// batch, whose attempts share one EVALSHA (coalesced: one script of many
// attempts). Their sections are the wide hash's fields.
func TestWideFastOneRoundTrip(t *testing.T) {
	b, c := plainStandalone(t)
	var log scriptLog
	c.AddHook(&log)
	ctx := context.Background()
	s := newSubject(t, "oneround")
	req := func(o op, cn string) request {
		return request{op: o, Request: driver.Request{Policy: "p", Cost: 1, Rules: []driver.Rule{
			{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 1000, Window: 24 * time.Hour},
			{Name: "b", Key: s.key("b", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 3, Window: 24 * time.Hour},
		}}}
	}
	fast := decidingScript(t, b, req(opTake, "v0"))
	if fast == takeScript.Hash() {
		t.Fatal("the policy has no fast script")
	}
	for i := range 80 {
		take(t, b, req(opTake, "v"+strconv.Itoa(i)))
	}
	if v := c.Get(ctx, s.base+"=").Val(); len(v) == 0 || v[0] != lua.WideFormat {
		t.Fatalf("the root is not wide after 80 contents (%d bytes)", len(v))
	}
	hkey := wideKey(s.base + "=")
	if n := c.HLen(ctx, hkey).Val(); n != 80 {
		t.Fatalf("HLEN %s = %d, want 80 (a field per content)", hkey, n)
	}
	log.take()
	for _, st := range []struct {
		name    string
		o       op
		content string
		allowed bool
		used    int64 // the content's rule's
	}{
		{"take of a content the hash holds", opTake, "v1", true, 2},
		{"take of a new content", opTake, "v500", true, 1},
		{"peek", opPeek, "v1", true, 2},
		{"take", opTake, "v1", true, 3},
		{"denial", opTake, "v1", false, 3},
		{"peek of a content never taken", opPeek, "v501", true, 0},
	} {
		res := take(t, b, req(st.o, st.content))
		if res.Allowed != st.allowed || res.Rules[1].Used != st.used {
			t.Errorf("%s: %v(%s) = allowed %v, used %d; want %v, %d", st.name, st.o, st.content, res.Allowed, res.Rules[1].Used, st.allowed, st.used)
		}
		if got := log.take(); len(got) != 1 || got[0].sha != fast {
			t.Errorf("%s: scripts sent %v, want one EVALSHA of the fast script %s (take.lua is %s)", st.name, got, fast, takeScript.Hash())
		}
	}
	if n := c.HLen(ctx, hkey).Val(); n != 81 {
		t.Errorf("HLEN %s = %d after a new content's take, want 81", hkey, n)
	}
	reqs := make([]request, 30)
	for i := range reqs {
		reqs[i] = req(opTake, "w"+strconv.Itoa(i))
	}
	for i, o := range b.batch(ctx, reqs) {
		if o.Err != nil || !o.Result.Allowed || o.Result.Rules[1].Used != 1 {
			t.Fatalf("batch[%d] = %+v, %v; want allowed, used 1", i, o.Result, o.Err)
		}
	}
	if got := log.take(); len(got) != 1 || got[0].sha != fast || got[0].short {
		t.Errorf("a batch of 30: scripts sent %v, want one EVALSHA of the fast script (the full form: 30 attempts)", got)
	}
	if n := c.HLen(ctx, hkey).Val(); n != 111 {
		t.Errorf("HLEN %s = %d after a batch of 30 new contents, want 111", hkey, n)
	}
}

// TestWideFastWritesAsTake: on a wide root, a fast script writes what
// take.lua writes, byte for byte: the same takes, peeks, denials and
// batches on two subjects, one decided by fast scripts, the other by
// take.lua alone, leave the same root values (the root's own entries,
// the wide marker's mode and expiry; not its sweep's cursor, which
// follows the hash's layout), the same expiries of the root and the
// hash, and the same fields (per content: the section's length, expiry
// and entries, the trailer's name, or no trailer for a section the move
// brought; the ids differ with the subject, the trailer's stamp with the
// instant), and with hash-field expiry the same fields' HPEXPIRETIME.
// The rules are fixed windows and sliding-window cells of hours, whose
// bytes do not depend on the instant within a cell; the roots go wide on
// the way (the move: each version's own). On Redis 7.0 (sweep), and with FREQCAP_TEST_HFE (a
// Redis >= 7.4, mode HPEXPIREAT: capability.Config.WideFieldExpiry) and FREQCAP_TEST_TAIRHASH (sweep).
func TestWideFastWritesAsTake(t *testing.T) {
	for _, tc := range []struct{ name, env, mode string }{
		{"redis-7.0", "", lua.WideModeSweep},
		{"hfe", "FREQCAP_TEST_HFE", lua.WideModeHFE},
		{"tairhash", "FREQCAP_TEST_TAIRHASH", lua.WideModeSweep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := ""
			if tc.env == "" {
				addr = redistest.Standalone(t)
			} else if addr = os.Getenv(tc.env); addr == "" {
				t.Skipf("SKIPPED: %s is not set", tc.env)
			}
			cfg := capability.Config{ForcePlainLua: true, WideFieldExpiry: tc.mode == lua.WideModeHFE}
			fast, c := moduleBackend(t, addr, cfg)
			slow, _ := moduleBackend(t, addr, cfg)
			slow.noFast = true
			ctx := context.Background()
			subs := []subject{newSubject(t, "wfast"), newSubject(t, "wtake")}
			bs := []*Backend{fast, slow}
			req := func(i int, o op, cn string) request {
				s := subs[i]
				return request{op: o, Request: driver.Request{Policy: "p", Cost: 1, Rules: []driver.Rule{
					{Name: "a", Key: s.key("a"), Group: s.base + "=", Algorithm: driver.FixedWindow, Limit: 10_000, Window: 24 * time.Hour},
					{Name: "b", Key: s.key("b"), Group: s.base + "=", Algorithm: driver.SlidingWindow, Limit: 5_000, Window: 24 * time.Hour, SubWindows: 24},
					{Name: "c", Key: s.key("c", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 3, Window: 24 * time.Hour},
					{Name: "d", Key: s.key("d", cn), Group: s.base + "=c:" + cn, Algorithm: driver.SlidingWindow, Limit: 500, Window: 48 * time.Hour, SubWindows: 48},
				}}}
			}
			if decidingScript(t, fast, req(0, opTake, "v0")) == takeScript.Hash() {
				t.Fatal("the policy has no fast script")
			}
			hour := func() int64 { return serverNow(t, c).UnixMilli() / time.Hour.Milliseconds() }
			began := hour()
			used := map[string]bool{} // the contents taken
			both := func(o op, cn string) {
				t.Helper()
				if o == opTake {
					used[cn] = true
				}
				var res [2]driver.Result
				for i, b := range bs {
					res[i] = take(t, b, req(i, o, cn))
				}
				if res[0].Allowed != res[1].Allowed || res[0].Rules[2].Used != res[1].Rules[2].Used {
					t.Fatalf("%v(%s): fast allowed %v used %d, take.lua %v %d", o, cn, res[0].Allowed, res[0].Rules[2].Used, res[1].Allowed, res[1].Rules[2].Used)
				}
			}
			batch := func(cns ...string) {
				t.Helper()
				for i, b := range bs {
					reqs := make([]request, len(cns))
					for k, cn := range cns {
						reqs[k], used[cn] = req(i, opTake, cn), true
					}
					for k, o := range b.batch(ctx, reqs) {
						if o.Err != nil {
							t.Fatalf("batch[%d] (%s): %v", k, cns[k], o.Err)
						}
					}
				}
			}
			compare := func(when string) {
				t.Helper()
				if hour() != began {
					t.Skip("SKIPPED: the server's clock crossed an hour, a cell's boundary, during the test")
				}
				roots := [2]string{subs[0].base + "=", subs[1].base + "="}
				var vals [2]string
				for i, r := range roots {
					vals[i] = c.Get(ctx, r).Val()
				}
				if len(vals[0]) == 0 || vals[0][0] != lua.WideFormat {
					t.Fatalf("%s: the root is not wide (%d bytes)", when, len(vals[0]))
				}
				if a, b := noCursor(vals[0]), noCursor(vals[1]); a != b {
					t.Errorf("%s: root values differ (but for the sweep's cursor):\nfast     %x\ntake.lua %x", when, a, b)
				}
				if m := wideMode(vals[0]); m != tc.mode {
					t.Errorf("%s: wide mode %q, want %q", when, m, tc.mode)
				}
				for _, k := range []func(string) string{func(r string) string { return r }, wideKey} {
					a, b := c.PExpireTime(ctx, k(roots[0])).Val(), c.PExpireTime(ctx, k(roots[1])).Val()
					if a != b || a <= 0 {
						t.Errorf("%s: PEXPIRETIME %s = %v, take.lua's %v", when, k("root"), a, b)
					}
				}
				for i, r := range roots {
					if n, want := c.HLen(ctx, wideKey(r)).Val(), int64(len(used)); n != want {
						t.Errorf("%s: subject %d: HLEN = %d, want %d (a field per content)", when, i, n, want)
					}
				}
				trailers := 0
				for _, cn := range slices.Sorted(maps.Keys(used)) {
					var fields [2]string
					for i, r := range roots {
						id := sectionID(r + "c:" + cn)
						f, err := c.HGet(ctx, wideKey(r), id).Result()
						if err != nil {
							t.Fatalf("%s: HGET of %s's field: %v", when, cn, err)
						}
						end := lua.PackedHeader + int(leUint(f[lua.PackedTag:lua.PackedTag+lua.PackedLen]))
						// The section without its id (its tag and the 4 bytes after
						// its header), and the trailer without its stamp.
						fields[i] = f[lua.PackedTag:lua.PackedHeader] + f[lua.PackedHeader+4:end] + "|"
						if len(f) > end {
							if i == 0 {
								trailers++
							}
							if name := f[end+lua.WideTrailStamp:]; name != "c:"+cn {
								t.Errorf("%s: %s's field is named %q", when, cn, name)
							}
							fields[i] += f[end+lua.WideTrailStamp:]
						}
						if tc.mode == lua.WideModeHFE {
							fields[i] += fmt.Sprint("|expires ", c.HPExpireTime(ctx, wideKey(r), id).Val())
						}
					}
					if fields[0] != fields[1] {
						t.Errorf("%s: %s's field = %x, take.lua's %x", when, cn, fields[0], fields[1])
					}
				}
				if trailers == 0 {
					t.Errorf("%s: no field has a trailer", when)
				}
			}
			for i := range 90 { // narrow, near WideAt, the move, wide
				both(opTake, "v"+strconv.Itoa(i))
			}
			compare("after 90 contents")
			for i := range 10 {
				both(opTake, "v"+strconv.Itoa(i)) // fields rewritten
			}
			for range 3 {
				both(opTake, "v0") // denied at the third
			}
			both(opPeek, "v1")
			both(opPeek, "v900")
			batch("v2", "v95", "v96", "v2", "v3", "v97", "v2")
			compare("after rewrites, new fields, denials, peeks and a batch")
		})
	}
}

// wideMode returns the mode of the wide marker in root value v ("" for
// none).
func wideMode(v string) string {
	for p := 1; p+lua.PackedHeader <= len(v); {
		n := int(leUint(v[p+lua.PackedTag : p+lua.PackedTag+lua.PackedLen]))
		if v[p:p+lua.PackedTag] == lua.WideTag && n > 0 && p+lua.PackedHeader < len(v) {
			return string(v[p+lua.PackedHeader])
		}
		p += lua.PackedHeader + n
	}
	return ""
}

// wideModeAt returns the mode of the wide root at key (its wide marker's
// first payload byte), "" when it is not wide.
func wideModeAt(t *testing.T, c *goredis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if len(v) == 0 || v[0] != lua.WideFormat {
		return ""
	}
	m := wideMode(v)
	if m == "" {
		t.Fatalf("wide root %s without a wide marker", key)
	}
	return m
}

// noCursor returns root value v with its wide marker's sweep cursor
// left out (its length too): the cursor follows the hash's layout, which
// differs with its fields' ids.
func noCursor(v string) string {
	for p := 1; p+lua.PackedHeader <= len(v); {
		n := int(leUint(v[p+lua.PackedTag : p+lua.PackedTag+lua.PackedLen]))
		if v[p:p+lua.PackedTag] == lua.WideTag && n > 0 {
			return v[:p+lua.PackedTag] + v[p+lua.PackedTag+lua.PackedLen:p+lua.PackedHeader+1] + v[p+lua.PackedHeader+n:]
		}
		p += lua.PackedHeader + n
	}
	return v
}

// TestWideDeclared: a set the policy declares wide (driver.Rule.Wide,
// sdk.WithWide) makes its person's root wide with the first value, on fast
// scripts, take.lua and in batches, and decides exactly as the same
// rules undeclared (whose root goes wide only past lua.WideAt).
func TestWideDeclared(t *testing.T) {
	for _, noFast := range []bool{false, true} {
		t.Run("noFast="+strconv.FormatBool(noFast), func(t *testing.T) {
			b, c := plainStandalone(t)
			b.noFast = noFast
			ctx := context.Background()
			subs := [2]subject{newSubject(t, "declared"), newSubject(t, "undeclared")}
			rules := func(i int, cn string) []driver.Rule {
				s := subs[i]
				return []driver.Rule{
					{Name: "user", Key: s.key("user"), Group: s.base + "=", Algorithm: driver.SlidingWindow, Limit: 1000, Window: 24 * time.Hour},
					{Name: "campaign", Key: s.key("campaign", cn), Group: s.base + "=c:" + cn, Algorithm: driver.FixedWindow, Limit: 3, Window: 24 * time.Hour, Wide: i == 0},
				}
			}
			rootOf := func(i int) string { return c.Get(ctx, subs[i].base+"=").Val() }
			same := func(what string, a, b driver.Result) {
				t.Helper()
				if a.Allowed != b.Allowed || a.Rules[0].Used != b.Rules[0].Used || a.Rules[1].Used != b.Rules[1].Used {
					t.Fatalf("%s: declared %s, undeclared %s", what, resLine(a), resLine(b))
				}
			}
			var res [2]driver.Result
			for i := range 2 {
				res[i] = take(t, b, subs[i].request(opTake, 1, rules(i, "k0")...))
			}
			same("first take", res[0], res[1])
			if v := rootOf(0); len(v) == 0 || v[0] != lua.WideFormat {
				t.Fatalf("declared: the root is not wide after its first value (%d bytes)", len(v))
			}
			if n := c.HLen(ctx, wideKey(subs[0].base+"=")).Val(); n != 1 {
				t.Errorf("declared: the wide hash holds %d fields after the first value, want 1", n)
			}
			if v := rootOf(1); len(v) == 0 || v[0] == lua.WideFormat {
				t.Fatalf("undeclared: the root is wide after one value")
			}
			rng := rand.New(rand.NewPCG(5, 6))
			for k := range 120 {
				cn := "k" + strconv.Itoa(rng.IntN(50))
				for i := range 2 {
					res[i] = take(t, b, subs[i].request(opTake, 1, rules(i, cn)...))
				}
				same(fmt.Sprintf("take %d (%s)", k, cn), res[0], res[1])
			}
			cns := []string{"k1", "k60", "k1", "k61", "k2", "k1"}
			var outs [2][]driver.BatchResult
			for i := range 2 {
				reqs := make([]request, len(cns))
				for k, cn := range cns {
					reqs[k] = subs[i].request(opTake, 1, rules(i, cn)...)
				}
				outs[i] = b.batch(ctx, reqs)
			}
			for k := range cns {
				if outs[0][k].Err != nil || outs[1][k].Err != nil {
					t.Fatalf("batch[%d]: %v, %v", k, outs[0][k].Err, outs[1][k].Err)
				}
				same(fmt.Sprintf("batch[%d] (%s)", k, cns[k]), outs[0][k].Result, outs[1][k].Result)
			}
			if v := rootOf(0); len(v) == 0 || v[0] != lua.WideFormat {
				t.Errorf("declared: the root is not wide at the end")
			}
		})
	}
}
