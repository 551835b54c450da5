package redis

import (
	"context"
	_ "embed"
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
	}{
		{"redis-7.0", "", lua.WideModeSweep, []string{"mode s: a plain hash, one field per value, whose dead fields each write adding a field sweeps"}},
		{"hfe", "FREQCAP_TEST_HFE", lua.WideModeHFE, []string{"mode h: one field per value, each expiring by HPEXPIREAT"}},
		{"tairhash", "FREQCAP_TEST_TAIRHASH", lua.WideModeSweep, []string{"mode s: a plain hash", "TairHash's per-field expiry (EXHSET … PXAT) is not used"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b *Backend
			var c *goredis.Client
			if tc.env == "" {
				b, c = plainStandalone(t)
			} else if addr := os.Getenv(tc.env); addr != "" {
				b, c = moduleBackend(t, addr, capability.Config{})
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
			if got := wideMode(t, c, s.base+"="); got != tc.mode {
				t.Errorf("the root's wide mode after 80 contents = %q, want %q", got, tc.mode)
			}
		})
	}
}

// wideMode returns the mode of the wide root at key (its wide marker's
// first payload byte), "" when it is not wide.
func wideMode(t *testing.T, c *goredis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if len(v) == 0 || v[0] != lua.WideFormat {
		return ""
	}
	for p := 1; p+lua.PackedHeader <= len(v); {
		n := int(leUint(v[p+lua.PackedTag : p+lua.PackedTag+lua.PackedLen]))
		if v[p:p+lua.PackedTag] == lua.WideTag && n > 0 && p+lua.PackedHeader < len(v) {
			return string(v[p+lua.PackedHeader])
		}
		p += lua.PackedHeader + n
	}
	t.Fatalf("wide root %s without a wide marker", key)
	return ""
}
