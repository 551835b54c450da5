package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/driver/stats"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// recPolicy is the recorder tests' policy: 3 per minute per user, 10 per
// hour per user and content, with a hot-deny cache (whose answers count).
func recPolicy(t *testing.T, window time.Duration) *sdk.Policy {
	t.Helper()
	p, err := sdk.NewPolicy("msg", []sdk.Rule{
		sdk.FixedWindow("per-min", 3, window).By("user"),
		sdk.FixedWindow("per-content", 10, time.Hour).By("user", "content"),
	}, sdk.WithHotDenyCache(100))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// process is one service: a Limiter with its own Recorder, flushed by
// hand.
func process(t *testing.T, b *memory.Backend, c *fakeclock.Clock) (*sdk.Limiter, *fleet.Recorder) {
	t.Helper()
	rec, err := fleet.NewRecorder(b, &fleet.Options{Now: c.Now, FlushEvery: -1})
	if err != nil {
		t.Fatalf("NewRecorder = %v", err)
	}
	return sdk.New(b, sdk.WithClock(c), sdk.WithObserver(rec.Observe)), rec
}

func allowN(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, n int) {
	t.Helper()
	for range n {
		if _, err := lim.Allow(context.Background(), p, s); err != nil {
			t.Fatalf("Allow = %v", err)
		}
	}
}

func flush(t *testing.T, recs ...*fleet.Recorder) {
	t.Helper()
	for _, r := range recs {
		if err := r.Flush(context.Background()); err != nil {
			t.Fatalf("Flush = %v", err)
		}
	}
}

// TestRecorder: two processes record into one backend; Stats sums them,
// per rule and per bucket, with the top denied subjects; peeks are not
// counted; fine buckets expire after an hour, coarse ones are read over
// 24 h.
func TestRecorder(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := memory.New(&memory.Options{Clock: c})
	p := recPolicy(t, time.Minute)
	limA, recA := process(t, b, c)
	limB, recB := process(t, b, c)
	odd := "a:b{c}%"                                                 // escaped in keys, unescaped in TopDenied
	allowN(t, limA, p, sdk.Subject{"user": "u1", "content": "x"}, 4) // 3 allowed, 1 denied
	allowN(t, limB, p, sdk.Subject{"user": "u2", "content": "x"}, 5) // 3 allowed, 2 denied (1 cached)
	allowN(t, limB, p, sdk.Subject{"user": odd, "content": "x"}, 4)  // 3 allowed, 1 denied
	if _, err := limB.Peek(ctx, p, sdk.Attempt{Subject: sdk.Subject{"user": "u9", "content": "x"}}); err != nil {
		t.Fatal(err)
	}
	flush(t, recA, recB)

	reader := newReader(t, b, c) // a third process: the console
	st, err := reader.Stats(ctx, p, time.Hour)
	if err != nil {
		t.Fatalf("Stats = %v", err)
	}
	if st.Allowed != 9 || st.Denied != 4 {
		t.Errorf("Stats allowed, denied = %d, %d, want 9, 4", st.Allowed, st.Denied)
	}
	if st.Step != fleet.StatsStep || len(st.Series) != 360 {
		t.Errorf("Stats step, points = %v, %d, want %v, 360", st.Step, len(st.Series), fleet.StatsStep)
	}
	if last := st.Series[len(st.Series)-1]; !last.At.Equal(t0) || last.Allowed != 9 || last.Denied != 4 || last.NearLimit != 3 {
		t.Errorf("last point = %+v, want at %v: 9 allowed, 4 denied, 3 near", last, t0)
	}
	want := []fleet.RuleStats{
		{Rule: "per-min", Allowed: 9, Denied: 4, NearLimit: 3},
		{Rule: "per-content", Allowed: 13},
	}
	if len(st.Rules) != len(want) {
		t.Fatalf("Stats rules = %+v, want %d", st.Rules, len(want))
	}
	for i, w := range want {
		g := st.Rules[i]
		if g.Rule != w.Rule || g.Allowed != w.Allowed || g.Denied != w.Denied || g.NearLimit != w.NearLimit {
			t.Errorf("rule %d = %s %d/%d/%d, want %s %d/%d/%d", i, g.Rule, g.Allowed, g.Denied, g.NearLimit, w.Rule, w.Allowed, w.Denied, w.NearLimit)
		}
	}
	top := st.TopDenied
	if len(top) != 3 || top[0].Count != 2 || !slices.Equal(top[0].Shard, []string{"u2"}) {
		t.Fatalf("TopDenied = %+v, want u2 (2) first of 3", top)
	}
	var found bool
	for _, d := range top {
		if d.Count == 1 && d.Subject(p)["user"] == odd {
			found = true
		}
	}
	if !found {
		t.Errorf("TopDenied = %+v, want %q once", top, odd)
	}

	// 30 s later: a second bucket.
	c.Advance(30 * time.Second)
	allowN(t, limA, p, sdk.Subject{"user": "u3", "content": "x"}, 1)
	flush(t, recA, recB)
	st, err = reader.Stats(ctx, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if last := st.Series[len(st.Series)-1]; !last.At.Equal(t0.Add(30*time.Second)) || last.Allowed != 1 {
		t.Errorf("last point = %+v, want 1 allowed at +30s", last)
	}
	if st.Allowed != 10 {
		t.Errorf("Stats allowed = %d, want 10", st.Allowed)
	}

	// Two hours later: the last hour is empty, the last 24 h are not.
	c.Advance(2 * time.Hour)
	if st, err = reader.Stats(ctx, p, time.Hour); err != nil || st.Allowed != 0 || len(st.TopDenied) != 0 {
		t.Errorf("Stats(1h) 2h later = %d allowed, %d top, %v; want 0, 0", st.Allowed, len(st.TopDenied), err)
	}
	st, err = reader.Stats(ctx, p, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != fleet.StatsCoarseStep || st.Allowed != 10 || st.Denied != 4 || len(st.TopDenied) != 3 {
		t.Errorf("Stats(24h) = step %v, %d allowed, %d denied, %d top; want 1m, 10, 4, 3", st.Step, st.Allowed, st.Denied, len(st.TopDenied))
	}
	if i := slices.IndexFunc(st.Series, func(pt fleet.StatsPoint) bool { return pt.At.Equal(t0) }); i < 0 || st.Series[i].Allowed != 10 {
		t.Errorf("Stats(24h) has no 10-allowed point at %v", t0)
	}
}

// TestRecorderAnnounce: policies are announced by their first flush, and
// a reader sees how its own version differs.
func TestRecorderAnnounce(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := memory.New(&memory.Options{Clock: c})
	p := recPolicy(t, time.Minute)
	lim, rec := process(t, b, c)
	allowN(t, lim, p, sdk.Subject{"user": "u1", "content": "x"}, 1)
	idle, err := sdk.NewPolicy("idle", []sdk.Rule{sdk.GCRA("rate", 30, time.Minute, 5).By("ip")})
	if err != nil {
		t.Fatal(err)
	}
	rec.Announce(idle)
	flush(t, rec)

	reader := newReader(t, b, c)
	as, err := reader.Announced(ctx, 10*time.Minute)
	if err != nil {
		t.Fatalf("Announced = %v", err)
	}
	var names []string
	for _, a := range as {
		names = append(names, a.Policy)
		if !a.LastSeen.Equal(t0) {
			t.Errorf("%s last seen %v, want %v", a.Policy, a.LastSeen, t0)
		}
	}
	if !slices.Equal(names, []string{"idle", "msg"}) {
		t.Fatalf("Announced = %q, want idle, msg", names)
	}
	if d := as[1].Diff(fleet.AnnouncementOf(p)); d != nil {
		t.Errorf("Diff(same policy) = %q, want none", d)
	}
	console := recPolicy(t, 2*time.Minute) // another window: other keys
	d := fleet.AnnouncementOf(console).Diff(as[1])
	if len(d) != 1 || !strings.Contains(d[0], "per-min has other keys") {
		t.Errorf("Diff(other window) = %q, want per-min's other keys", d)
	}
	// Not announced again within the minute; gone for readers asking
	// about the last minute after 2.
	c.Advance(2 * time.Minute)
	if as, err := reader.Announced(ctx, time.Minute); err != nil || len(as) != 0 {
		t.Errorf("Announced(1m) 2m later = %d, %v; want none", len(as), err)
	}
	flush(t, rec)
	if as, err := reader.Announced(ctx, time.Minute); err != nil || len(as) != 2 {
		t.Errorf("Announced(1m) after a flush = %d, %v; want 2", len(as), err)
	}
	// The next UTC day, yesterday's announcements are still read.
	c.Advance(20 * time.Hour)
	if as, err := reader.Announced(ctx, 24*time.Hour); err != nil || len(as) != 2 {
		t.Errorf("Announced(24h) the next day = %d, %v; want 2", len(as), err)
	}
	if _, err := reader.Announced(ctx, 25*time.Hour); err == nil {
		t.Error("Announced(25h) = nil error, want one (at most 24 h)")
	}
}

// TestRecorderClose: the recorder's own goroutine runs, and Close flushes
// what is left.
func TestRecorderClose(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	rec, err := fleet.NewRecorder(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := recPolicy(t, time.Minute)
	lim := sdk.New(b, sdk.WithObserver(rec.Observe))
	allowN(t, lim, p, sdk.Subject{"user": "u1", "content": "x"}, 5)
	if err := rec.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	st, err := newReader(t, b, nil).Stats(ctx, p, time.Hour)
	if err != nil || st.Allowed != 3 || st.Denied != 2 {
		t.Errorf("Stats after Close = %d allowed, %d denied, %v; want 3, 2", st.Allowed, st.Denied, err)
	}
}

type bareBackend struct{ driver.Backend }

func TestRecorderUnsupported(t *testing.T) {
	bare := bareBackend{memory.New(nil)}
	if _, err := fleet.NewRecorder(bare, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewRecorder(no stats.Counters) = %v, want ErrUnsupported", err)
	}
	if _, err := fleet.NewReader(bare, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewReader(no stats.Counters) = %v, want ErrUnsupported", err)
	}
	if _, err := fleet.NewRecorder(memory.New(nil), &fleet.Options{NearLimit: 2}); err == nil {
		t.Error("NewRecorder(NearLimit 2) = nil error")
	}
}

// TestRecorderAllocs: recording adds no allocation to a decision, allowed
// or denied (from the backend or the hot-deny cache), of a subject
// outside the traffic sample (the default one).
func TestRecorderAllocs(t *testing.T) {
	ctx := context.Background()
	p := recPolicy(t, time.Minute)
	for _, tc := range []struct {
		name string
		n    int // Allow calls before measuring: 0 allowed, 3 denied
	}{{"allowed", 0}, {"denied", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			measure := func(rec bool) float64 {
				c := newClock(t0)
				b := memory.New(&memory.Options{Clock: c})
				opts := []sdk.Option{sdk.WithClock(c)}
				if rec {
					r, err := fleet.NewRecorder(b, &fleet.Options{FlushEvery: -1})
					if err != nil {
						t.Fatal(err)
					}
					opts = append(opts, sdk.WithObserver(r.Observe))
				}
				lim := sdk.New(b, opts...)
				user := "u"
				for i := 0; fleet.InSample(user, fleet.DefaultSample); i++ {
					user = "u" + strconv.Itoa(i)
				}
				s := sdk.Subject{"user": user, "content": "x"}
				allowN(t, lim, p, s, tc.n+1)
				return testing.AllocsPerRun(200, func() {
					if tc.n == 0 {
						c.Advance(time.Hour) // fresh windows: allowed
					}
					_, _ = lim.Allow(ctx, p, s)
				})
			}
			off, on := measure(false), measure(true)
			if on > off {
				t.Errorf("allocations per Allow = %v with the recorder, %v without; want no more", on, off)
			}
		})
	}
}

// BenchmarkAllowRecorder is BenchmarkAllowSeed with a recorder.
func BenchmarkAllowRecorder(b *testing.B) {
	push := loadPolicies(b)["push"]
	mb := memory.New(nil)
	rec, err := fleet.NewRecorder(mb, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	lim := sdk.New(mb, sdk.WithObserver(rec.Observe))
	subjects := make([]sdk.Subject, 1000)
	for i := range subjects {
		subjects[i] = sdk.Subject{"user": "1882934" + strconv.Itoa(i), "content": sdk.Fingerprint(strconv.Itoa(i % 4))}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Allow(ctx, push, subjects[i%len(subjects)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecorderCachedDenials is the recorder's worst case, without
// I/O: every decision a denial answered by the hot-deny cache (about
// 1 µs), by all CPUs at once on 10 subjects, each denial counted in the
// policy's top denied subjects under its lock. Compare off and on.
func BenchmarkRecorderCachedDenials(b *testing.B) {
	p, err := sdk.NewPolicy("hot", []sdk.Rule{sdk.FixedWindow("daily", 1, 24*time.Hour).By("user")}, sdk.WithHotDenyCache(100))
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			mb := memory.New(nil)
			opts := []sdk.Option{}
			if on {
				rec, err := fleet.NewRecorder(mb, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer rec.Close()
				opts = append(opts, sdk.WithObserver(rec.Observe))
			}
			lim := sdk.New(mb, opts...)
			ctx := context.Background()
			subjects := make([]sdk.Subject, 10)
			for i := range subjects {
				subjects[i] = sdk.Subject{"user": "u" + strconv.Itoa(i)}
				_, _ = lim.Allow(ctx, p, subjects[i])
				_, _ = lim.Allow(ctx, p, subjects[i]) // denied: cached from now on
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if d, err := lim.Allow(ctx, p, subjects[i%len(subjects)]); err != nil || d.Allowed || !d.Cached {
						b.Fatalf("Allow = %+v, %v; want a cached denial", d, err)
					}
				}
			})
		})
	}
}

// TestRecorderReload: a policy built again with the same rules (a reload)
// adds to the same counts; with other rules, it is another policy.
func TestRecorderReload(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := memory.New(&memory.Options{Clock: c})
	lim, rec := process(t, b, c)
	first, again := recPolicy(t, time.Minute), recPolicy(t, time.Minute)
	allowN(t, lim, first, sdk.Subject{"user": "a", "content": "x"}, 1)
	allowN(t, lim, again, sdk.Subject{"user": "b", "content": "x"}, 1)
	flush(t, rec)
	if st, err := newReader(t, b, c).Stats(ctx, first, time.Hour); err != nil || st.Allowed != 2 {
		t.Errorf("Stats after a reload = %d allowed, %v; want 2", st.Allowed, err)
	}
}

// TestAnnouncedSkipsMalformed: fields of the announcements hash that no
// Recorder wrote (not JSON, a policy or rule name NewPolicy refuses, an
// empty policy) are skipped and counted in a *MalformedError, wrapping
// ErrMalformedStats, that comes with every other announcement; a backend
// reporting a field whose value is not a number (stats.Data's
// Malformed) counts too. Stats, on the other hand, fails on a malformed
// field.
func TestAnnouncedSkipsMalformed(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	b := memory.New(&memory.Options{Clock: c})
	_, rec := process(t, b, c)
	p := recPolicy(t, time.Minute)
	rec.Announce(p)
	flush(t, rec)
	key := "fc:stats:{policies}:" + strconv.FormatInt(t0.UTC().Truncate(24*time.Hour).Unix(), 10)
	var set []stats.Field
	for _, f := range []string{
		`garbage`,
		`{"policy":"sms\u202Etxt","shard_by":["phone"],"rules":[]}`,
		`{"policy":"","rules":[]}`,
		`{"policy":"sms","shard_by":["phone"],"rules":[{"name":"a b","id":"x","algorithm":"gcra","limit":1,"window":"1s"}]}`,
		`{"policy":"sms","shard_by":["phone"],"rules":[],"quiet_hours":"{zone: UTC\u0000}"}`,
		`{"policy":"sms","shard_by":["phone"],"rules":[],"classes":[""]}`,
		`{"policy":"sms","shard_by":["phone"],"rules":[],"person":"a b"}`,
		`{"policy":"sms","shard_by":["phone"],"rules":[{"name":"a","id":"x","algorithm":"gcra","limit":1,"window":"1s","headroom":"\u202E"}]}`,
	} {
		set = append(set, stats.Field{Name: f, Value: t0.UnixMilli()})
	}
	if err := b.FlushStats(ctx, stats.Batch{Hashes: []stats.Hash{{Key: key, Set: set, ExpireAt: t0.Add(48 * time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		b      driver.Backend
		fields int
	}{
		{"bad names", b, 8},
		{"and a value not a number", malformedValue{b, key}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, err := newReader(t, tc.b, c).Announced(ctx, 10*time.Minute)
			var me *fleet.MalformedError
			if !errors.As(err, &me) || !errors.Is(err, fleet.ErrMalformedStats) || me.Fields != tc.fields || !slices.Equal(me.Keys, []string{key}) {
				t.Errorf("Announced error = %v, want a *MalformedError of %d fields in %s", err, tc.fields, key)
			}
			if len(as) != 1 || as[0].Policy != "msg" {
				t.Errorf("Announced = %+v, want msg's announcement", as)
			}
			if strings.Contains(err.Error(), "sms") || strings.Contains(err.Error(), "garbage") {
				t.Errorf("Announced error = %q, shows a field's contents", err)
			}
		})
	}
	if _, err := newReader(t, malformedValue{b, "fc:stats:{msg:10s:"}, c).Stats(ctx, p, time.Hour); !errors.Is(err, fleet.ErrMalformedStats) {
		t.Errorf("Stats with a malformed field = %v, want ErrMalformedStats", err)
	}
}

// malformedValue is a backend whose ReadStats also reports a malformed
// field in the first hash asked whose key starts with key.
type malformedValue struct {
	*memory.Backend
	key string
}

func (m malformedValue) ReadStats(ctx context.Context, q stats.Query) (stats.Data, error) {
	d, err := m.Backend.ReadStats(ctx, q)
	for _, k := range q.Hashes {
		if strings.HasPrefix(k, m.key) {
			d.Malformed = append(d.Malformed, stats.Malformed{Key: k, Field: "f"})
			break
		}
	}
	return d, err
}

// newReader is a Reader of b on clock c (nil: b's own).
func newReader(t testing.TB, b driver.Backend, c *fakeclock.Clock) *fleet.Reader {
	t.Helper()
	var o fleet.Options
	if c != nil {
		o.Now = c.Now
	}
	r, err := fleet.NewReader(b, &o)
	if err != nil {
		t.Fatalf("NewReader = %v", err)
	}
	return r
}

func newClock(t time.Time) *fakeclock.Clock { return fakeclock.New(t) }

var t0 = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)

func loadPolicies(t testing.TB) map[string]*sdk.Policy {
	t.Helper()
	ps, err := seed.Policies()
	if err != nil {
		t.Fatalf("seed.Policies() = %v", err)
	}
	m := map[string]*sdk.Policy{}
	for _, p := range ps {
		m[p.Name()] = p
	}
	return m
}
