package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// valuesEnv is one person of the ad shape on a server: a rule per user,
// two per user and campaign.
type valuesEnv struct {
	t      testing.TB
	b      *Backend
	c      goredis.UniversalClient
	lim    *sdk.Limiter
	p      *sdk.Policy
	person sdk.Subject
	// last is when each campaign was last taken (the decision's At), seq
	// in what order.
	last map[string]time.Time
	seq  map[string]int
}

func newValuesEnv(t testing.TB, b *Backend, c goredis.UniversalClient, rules ...sdk.Rule) *valuesEnv {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	if rules == nil {
		rules = []sdk.Rule{
			sdk.FixedWindow("camp-day", 3, 24*time.Hour).By("user", "campaign"),
			sdk.SlidingLog("camp-hour", 2, time.Hour).By("user", "campaign"),
		}
	}
	p, err := sdk.NewPolicy("ad", append([]sdk.Rule{sdk.FixedWindow("user-day", 100000, 24*time.Hour).By("user")}, rules...))
	if err != nil {
		t.Fatal(err)
	}
	return &valuesEnv{
		t: t, b: b, c: c, p: p,
		lim:    sdk.New(b, sdk.WithPrefix("vl-"+hex.EncodeToString(r[:]))),
		person: sdk.Subject{"user": "u:" + hex.EncodeToString(r[:]) + " ü"},
		last:   map[string]time.Time{}, seq: map[string]int{},
	}
}

// camp returns campaign i's value: escaped in keys.
func camp(i int) string { return fmt.Sprintf("c%03d:%%{}", i) }

func (e *valuesEnv) subject(c string) sdk.Subject {
	return sdk.Subject{"user": e.person["user"], "campaign": c}
}

// take takes campaign c once, admitted.
func (e *valuesEnv) take(c string) {
	e.t.Helper()
	d, err := e.lim.Take(context.Background(), e.p, sdk.Attempt{Subject: e.subject(c)})
	if err != nil || !d.Allowed {
		e.t.Fatalf("Take(%s) = %v, %v; want allowed", c, d.Denied, err)
	}
	e.last[c] = d.At
	e.seq[c] = len(e.seq) + 1
}

// root returns the person's root key, its wide hash's and the set key of
// campaign c.
func (e *valuesEnv) keys(c string) (root, set string) {
	l := e.lim.Admin().KeyLayout(e.p, e.subject(c))
	for _, s := range l.Sets {
		if slices.Contains(s.Dimensions, "campaign") {
			set = s.Key
		} else {
			root = s.Key
		}
	}
	return root, set
}

// id returns the hex id of campaign c's section.
func (e *valuesEnv) id(c string) string {
	_, set := e.keys(c)
	return hex.EncodeToString([]byte(sectionID(set)))
}

// rootFormat returns the first byte of the person's root value.
func (e *valuesEnv) rootFormat() byte {
	e.t.Helper()
	root, _ := e.keys("x")
	v, err := e.c.Get(context.Background(), root).Result()
	if err != nil || v == "" {
		e.t.Fatalf("GET root = %q, %v", v, err)
	}
	return v[0]
}

// all lists every page of the person's campaigns at limit.
func (e *valuesEnv) all(limit int) ([]sdk.Value, []sdk.ValuesPage) {
	e.t.Helper()
	var vals []sdk.Value
	var pages []sdk.ValuesPage
	cur := ""
	for {
		pg, err := e.lim.Admin().Values(context.Background(), e.p, e.person, "campaign", sdk.ValuesOptions{Limit: limit, Cursor: cur})
		if err != nil {
			e.t.Fatalf("Values(page %d) error: %v", len(pages), err)
		}
		if len(pages) == 0 && pg.Prev != "" || len(pages) > 0 && pg.Prev == "" {
			e.t.Errorf("page %d: prev %q", len(pages), pg.Prev)
		}
		pages = append(pages, pg)
		vals = append(vals, pg.Values...)
		if pg.Next == "" {
			return vals, pages
		}
		if len(pg.Values) != limit {
			e.t.Errorf("page %d holds %d values, want %d", len(pages)-1, len(pg.Values), limit)
		}
		cur = pg.Next
	}
}

// checkOnce checks that vals name each campaign of want once (by subject,
// or by id when unnamed), and returns how many are named.
func (e *valuesEnv) checkOnce(vals []sdk.Value, want []string) (named int) {
	e.t.Helper()
	byID := map[string]string{}
	for _, c := range want {
		byID[e.id(c)] = c
	}
	seen := map[string]int{}
	for _, v := range vals {
		c := byID[v.ID]
		if c == "" {
			e.t.Errorf("value of id %s: no campaign of this person", v.ID)
			continue
		}
		seen[c]++
		if v.Subject != nil {
			named++
			if !maps2Equal(v.Subject, e.subject(c)) {
				e.t.Errorf("value %s: subject %q, want %q", v.ID, v.Subject, e.subject(c))
			}
			if v.Written.UnixMilli() != e.last[c].UnixMilli() {
				e.t.Errorf("%s: written %v, want its last take's ms (%v)", c, v.Written, e.last[c])
			}
		} else if v.Rules != nil {
			e.t.Errorf("%s: unnamed, with rules %+v", c, v.Rules)
		}
	}
	for _, c := range want {
		if seen[c] != 1 {
			e.t.Errorf("%s listed %d times, want once", c, seen[c])
		}
	}
	return named
}

func maps2Equal(a, b sdk.Subject) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkOrder checks SortValues's order: named values newest first (by
// their takes' order where their ms differ), then unnamed, latest expiry
// first.
func (e *valuesEnv) checkOrder(vals []sdk.Value) {
	e.t.Helper()
	for i := 1; i < len(vals); i++ {
		a, b := vals[i-1], vals[i]
		switch {
		case a.Written.IsZero() && !b.Written.IsZero():
			e.t.Errorf("value %d (unnamed) before value %d (written %v)", i-1, i, b.Written)
		case !b.Written.IsZero() && a.Written.Before(b.Written):
			e.t.Errorf("value %d written %v before value %d written %v", i-1, a.Written, i, b.Written)
		case !b.Written.IsZero() && a.Written.After(b.Written) && e.seq[a.Subject["campaign"]] < e.seq[b.Subject["campaign"]]:
			e.t.Errorf("%s (take %d) listed before %s (take %d)", a.Subject["campaign"], e.seq[a.Subject["campaign"]], b.Subject["campaign"], e.seq[b.Subject["campaign"]])
		case a.Written.IsZero() && b.Written.IsZero() && a.Expires.Before(b.Expires):
			e.t.Errorf("unnamed value %d expires %v before value %d, %v", i-1, a.Expires, i, b.Expires)
		}
	}
}

// checkCounters checks each named value's rules against Inspect's for
// its subject: the same rules, counts and verdicts (reset times within
// the time between the two reads).
func (e *valuesEnv) checkCounters(vals []sdk.Value) {
	e.t.Helper()
	for _, v := range vals {
		if v.Subject == nil {
			continue
		}
		ins, err := e.lim.Admin().Inspect(context.Background(), e.p, v.Subject)
		if err != nil {
			e.t.Fatal(err)
		}
		want := slices.DeleteFunc(ins.Rules, func(rd sdk.RuleDecision) bool { return rd.Rule == "user-day" })
		if len(v.Rules) != len(want) {
			e.t.Fatalf("%s: rules %+v, want Inspect's %+v", v.Subject["campaign"], v.Rules, want)
		}
		for i, rd := range v.Rules {
			w := want[i]
			d, r := rd.ResetAfter-w.ResetAfter, rd.RetryAfter-w.RetryAfter
			rd.ResetAfter, w.ResetAfter, rd.RetryAfter, w.RetryAfter = 0, 0, 0, 0
			if rd != w || d < 0 || d > 5*time.Second || r < 0 || r > 5*time.Second {
				e.t.Errorf("%s: rule %+v (reset %v, retry %v earlier), want Inspect's %+v", v.Subject["campaign"], rd, d, r, w)
			}
		}
		if v.Rules[0].Used < 1 {
			e.t.Errorf("%s: used %d, want its takes", v.Subject["campaign"], v.Rules[0].Used)
		}
	}
}

// valuesServers runs f on a standalone server, on the cluster, and on a
// server with native hash-field expiry when FREQCAP_TEST_HFE names one
// (a wide root's fields then expire by HPEXPIREAT: capability.Config.WideFieldExpiry).
func valuesServers(t *testing.T, f func(t *testing.T, b *Backend, c goredis.UniversalClient)) {
	t.Run("hfe", func(t *testing.T) {
		addr := os.Getenv("FREQCAP_TEST_HFE")
		if addr == "" {
			t.Skip("SKIPPED: FREQCAP_TEST_HFE is not set")
		}
		t.Parallel()
		b, c := moduleBackend(t, addr, capability.Config{WideFieldExpiry: true})
		f(t, b, c)
	})
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		b, c := standalone(t)
		f(t, b, c)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		b, c := cluster(t)
		f(t, b, c)
	})
}

// TestValuesWide: a person met 300 campaigns, so their root went wide.
// The campaigns written after it did are listed by name, newest first;
// those it moved into its hash, by id after them, until written again.
// Once all are written again, all 300 are listed by name, newest first,
// once each over the pages (forward and back), with Inspect's counters.
func TestValuesWide(t *testing.T) {
	valuesServers(t, func(t *testing.T, b *Backend, c goredis.UniversalClient) {
		e := newValuesEnv(t, b, c)
		var camps []string
		for i := range 300 {
			camps = append(camps, camp(i))
			e.take(camp(i))
		}
		if f := e.rootFormat(); f != lua.WideFormat {
			t.Fatalf("root format %d, want wide (%d)", f, lua.WideFormat)
		}
		vals, _ := e.all(100)
		named := e.checkOnce(vals, camps)
		if named == 0 || named == 300 {
			t.Fatalf("%d of 300 named, want those written after the root went wide only", named)
		}
		t.Logf("before writing them again: %d named, %d listed by id (moved into the hash when the root went wide)", named, 300-named)
		e.checkOrder(vals)
		for _, v := range vals {
			if v.Subject == nil {
				e.take(camps[slices.IndexFunc(camps, func(c string) bool { return e.id(c) == v.ID })])
			}
		}
		for _, limit := range []int{100, 20, 7} {
			vals, pages := e.all(limit)
			if n := e.checkOnce(vals, camps); n != 300 {
				t.Errorf("limit %d: %d named, want 300", limit, n)
			}
			e.checkOrder(vals)
			for k := len(pages) - 1; k > 0; k-- {
				pg, err := e.lim.Admin().Values(context.Background(), e.p, e.person, "campaign", sdk.ValuesOptions{Limit: limit, Cursor: pages[k].Prev})
				if err != nil || len(pg.Values) != len(pages[k-1].Values) || pg.Values[0].ID != pages[k-1].Values[0].ID {
					t.Fatalf("limit %d: prev of page %d = %d values, %v; want page %d", limit, k, len(pg.Values), err, k-1)
				}
			}
			if pages[0].Total != 300 || pages[0].Partial {
				t.Errorf("limit %d: total %d, partial %v", limit, pages[0].Total, pages[0].Partial)
			}
			if limit == 100 {
				e.checkCounters(vals)
			}
		}
	})
}

// TestValuesNarrow: five campaigns stay in the person's narrow root,
// which stores no names: listed by id, latest expiry first, without
// subject or counters.
func TestValuesNarrow(t *testing.T) {
	valuesServers(t, func(t *testing.T, b *Backend, c goredis.UniversalClient) {
		e := newValuesEnv(t, b, c)
		var camps []string
		for i := range 5 {
			camps = append(camps, camp(i))
			e.take(camp(i))
		}
		if f := e.rootFormat(); f != packedFormat {
			t.Fatalf("root format %d, want narrow (%d)", f, packedFormat)
		}
		vals, pages := e.all(2)
		if n := e.checkOnce(vals, camps); n != 0 || pages[0].Total != 5 || len(pages) != 3 {
			t.Errorf("%d named, total %d over %d pages; want 5 by id over 3 pages", n, pages[0].Total, len(pages))
		}
		e.checkOrder(vals)
		for _, v := range vals {
			if !v.Written.IsZero() || v.Rules != nil || v.Expires.Before(pages[0].At) {
				t.Errorf("value %s: written %v, rules %v, expires %v: want unknown, none, live", v.ID, v.Written, v.Rules, v.Expires)
			}
		}
	})
}

// TestValuesExpire: values whose state ended are not listed, though a
// wide root's hash keeps their fields until a sweep or its own expiry; a
// person whose every value ended has none.
func TestValuesExpire(t *testing.T) {
	const window = 3 * time.Second
	valuesServers(t, func(t *testing.T, b *Backend, c goredis.UniversalClient) {
		e := newValuesEnv(t, b, c, sdk.SlidingLog("camp-3s", 2, window).By("user", "campaign"))
		ctx := context.Background()
		list := func() sdk.ValuesPage {
			t.Helper()
			pg, err := e.lim.Admin().Values(ctx, e.p, e.person, "campaign", sdk.ValuesOptions{Limit: sdk.MaxValuesLimit})
			if err != nil {
				t.Fatal(err)
			}
			return pg
		}
		// wait polls the listing until the server's clock passes at.
		wait := func(at time.Time) sdk.ValuesPage {
			t.Helper()
			for deadline := time.Now().Add(4 * window); ; {
				if pg := list(); pg.At.After(at) {
					return pg
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server's clock did not pass %v", at)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		for i := range 60 {
			e.take("old" + camp(i))
		}
		oldLast := e.last["old"+camp(59)]
		wait(oldLast.Add(window / 2))
		var fresh []string
		for i := range 60 {
			fresh = append(fresh, "new"+camp(i))
			e.take("new" + camp(i))
		}
		newFirst := e.last["new"+camp(0)]
		pg := wait(oldLast.Add(window + 10*time.Millisecond))
		if pg.At.After(newFirst.Add(window)) {
			t.Skipf("too slow: listed at %v, after the new campaigns' state ended (%v)", pg.At, newFirst.Add(window))
		}
		if n := e.checkOnce(pg.Values, fresh); n != 60 || pg.Total != 60 {
			t.Errorf("%d named of %d listed, want the 60 new campaigns", n, pg.Total)
		}
		root, _ := e.keys("x")
		if n, err := c.HLen(ctx, wideKey(root)).Result(); err != nil || n <= 60 {
			t.Errorf("HLEN of the wide hash = %d, %v; want the dead fields still there (else this test checks nothing)", n, err)
		}
		pg = wait(e.last["new"+camp(59)].Add(window + 10*time.Millisecond))
		if pg.Total != 0 || len(pg.Values) != 0 {
			t.Errorf("after every state ended: %d values, want none", pg.Total)
		}
	})
}

// TestValuesPartial: past valuesScanMax fields a listing stops and says
// so; what it saw is listed once.
func TestValuesPartial(t *testing.T) {
	b, c := standalone(t)
	e := newValuesEnv(t, b, c)
	for i := range 150 {
		e.take(camp(i))
		e.take(camp(i)) // named
	}
	defer func(n int64, m int) { valuesScanCount, valuesScanMax = n, m }(valuesScanCount, valuesScanMax)
	valuesScanCount, valuesScanMax = 20, 50
	pg, err := e.lim.Admin().Values(context.Background(), e.p, e.person, "campaign", sdk.ValuesOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !pg.Partial || pg.Total < 50 || pg.Total >= 150 || len(pg.Values) != pg.Total {
		t.Errorf("Values past the bound = total %d, %d values, partial %v; want about 50, partial", pg.Total, len(pg.Values), pg.Partial)
	}
}

// TestValuesRefused: what the Redis backend cannot list.
func TestValuesRefused(t *testing.T) {
	b, c := standalone(t)
	e := newValuesEnv(t, b, c, sdk.SlidingLog("camp-big", 1000, time.Hour).By("user", "campaign"))
	_, err := e.lim.Admin().Values(context.Background(), e.p, e.person, "campaign", sdk.ValuesOptions{})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Values of a set of large sliding logs = %v, want errors.ErrUnsupported", err)
	}
	for _, req := range []driver.ValuesRequest{
		{Root: "", Set: "x", Limit: 1},
		{Root: "fc:{u}:p:=", Set: "fc:{u}:p:=", Limit: 1},
		{Root: "fc:{u}:p:=", Set: "fc:{v}:p:=c", Limit: 1},
		{Root: "fc:{u}:p:=", Set: "fc:{u}:p:=c:v", Limit: 1},
		{Root: "fc:{u}:p:", Set: "fc:{u}:p:c", Limit: 1},
	} {
		if _, err := b.ListValues(context.Background(), req); err == nil {
			t.Errorf("ListValues(%+v) succeeded, want an error", req)
		}
	}
}

// TestWideField: a wide root's field parses with and without its
// trailer, and a field of another shape does not.
func TestWideField(t *testing.T) {
	inner := encodePacked([]packedEntry{{Tag: "tagg", Expiry: 99, Ints: []int64{1}}})[1:]
	hdr := appendLE(appendLE([]byte("\x80abc"), int64(len(inner)+4), lua.PackedLen), 99, lua.PackedExpiry)
	sect := string(hdr) + "defg" + inner
	trail := string(appendLE(nil, 1234567, lua.WideTrailStamp))
	for _, tc := range []struct {
		name, f   string
		ok        bool
		stamp     int64
		fieldName string
	}{
		{"moved", sect, true, 0, ""},
		{"named", sect + trail + "campaign:c1", true, 1234567, "campaign:c1"},
		{"stamp only", sect + trail, true, 1234567, ""},
		{"short trailer", sect + trail[:3], false, 0, ""},
		{"truncated", sect[:len(sect)-1], false, 0, ""},
		{"tiny", "abc", false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, stamp, name, ok := wideField(tc.f)
			if ok != tc.ok || ok && (s != sect || stamp != tc.stamp || name != tc.fieldName) {
				t.Errorf("wideField(…) = %q, %d, %q, %v; want %d, %q, %v", s, stamp, name, ok, tc.stamp, tc.fieldName, tc.ok)
			}
		})
	}
}

// BenchmarkValues: one page (20 values) of a person of 300 campaigns,
// all named, on a standalone server: the listing's round trips (GET and
// TIME, HSCAN) and the page's 20 inspections.
//
//	go test -run '^$' -bench BenchmarkValues ./backends/redis/
func BenchmarkValues(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	b.Cleanup(func() { c.Close() })
	e := newValuesEnv(b, New(c, nil), c)
	for range 2 {
		for i := range 300 {
			e.take(camp(i))
		}
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		pg, err := e.lim.Admin().Values(ctx, e.p, e.person, "campaign", sdk.ValuesOptions{})
		if err != nil || len(pg.Values) != sdk.DefaultValuesLimit || pg.Values[0].Subject == nil {
			b.Fatalf("Values = %d values, %v", len(pg.Values), err)
		}
	}
}
