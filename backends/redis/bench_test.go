package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/internal/bench/scripts"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

// BenchmarkTakeSeed decides the seed policy (4 sliding-window rules) for
// random subjects, at the driver level (no sdk).
func BenchmarkTakeSeed(b *testing.B) { benchTake(b, seedRequests("fcb"), nil) }

// benchTake decides reqs in turn, one per iteration, on a standalone
// server through one client, with opts (nil: the defaults).
func benchTake(b *testing.B, reqs []request, opts *Options) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	be := New(c, opts)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := be.do(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeFixed1 decides one fixed-window rule without a trail (the
// common API limit; the bench's fixed-1) for random subjects, at the
// driver level: a fast script's short form without trail settings.
func BenchmarkTakeFixed1(b *testing.B) {
	reqs := make([]request, 1000)
	for i := range reqs {
		s := subject{base: "fcb:{f" + strconv.Itoa(i) + "}:api:"}
		r := s.fixed("per-min", 1<<40, time.Minute)
		r.Group = s.base + "="
		reqs[i] = s.request(opTake, 1, r)
		reqs[i].TrailKey, reqs[i].TrailMax = "", 0
	}
	// One caller at a time: coalescing (on by default) must add nothing
	// to a lone caller's latency against coalescing off.
	b.Run("default", func(b *testing.B) { benchTake(b, reqs, nil) })
	b.Run("uncoalesced", func(b *testing.B) { benchTake(b, reqs, &Options{Coalesce: -1}) })
}

// BenchmarkBaseline is one INCRBY+PEXPIRE EVALSHA per iteration.
func BenchmarkBaseline(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	s := goredis.NewScript(scripts.Baseline)
	keys := make([][]string, 1000)
	for i := range keys {
		keys[i] = []string{"fcb:{u" + strconv.Itoa(i) + "}:base"}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Run(ctx, c, keys[i%len(keys)], 60000).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is the client-side cost of building one seed request.
func BenchmarkEncode(b *testing.B) {
	be := New(nil, nil)
	s := subject{base: "fcb:{u1}:push:"}
	req := s.request(opTake, 1, pushRules(s, "c1")...)
	now := time.Now()
	rep := capability.Choose([]capability.Node{{Addr: "plain", Scripting: true}}, capability.Config{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := be.encode(req.op, req.Request, now, &rep); err != nil {
			b.Fatal(err)
		}
	}
}

// seedRequests returns 1000 seed-policy take requests on distinct users
// under prefix, with four contents between them.
func seedRequests(prefix string) []request {
	reqs := make([]request, 1000)
	for i := range reqs {
		s := subject{base: prefix + ":{u" + strconv.Itoa(i) + "}:push:"}
		reqs[i] = s.request(opTake, 1, pushRules(s, "c"+strconv.Itoa(i%4))...)
		reqs[i].TrailMax, reqs[i].TrailTTL = 20, 24*time.Hour
	}
	return reqs
}

// BenchmarkTrail is a denied take that writes one trail entry (with a
// content value) to a full trail of max entries, then an inspection that
// reads it back: the cost of a longer trail. It reports the trail key's
// MEMORY USAGE. go test -run '^$' -bench Trail ./backends/redis/
func BenchmarkTrail(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	be := New(c, nil)
	ctx := context.Background()
	for _, max := range []int{20, 50, 100, 200} {
		s := subject{base: "fcb:{trail" + strconv.Itoa(max) + "}:push:"}
		deny := s.request(opTake, 1, s.fixed("one", 1, time.Hour))
		deny.TrailMax, deny.TrailTTL = max, time.Hour
		deny.TrailValues = "content=abcdefghijklmnop"
		ins := deny
		ins.op = opInspect
		for range max + 1 { // the first is allowed, then max denials fill the trail
			if _, err := be.Take(ctx, deny.Request); err != nil {
				b.Fatal(err)
			}
		}
		for _, op := range []struct {
			name string
			req  request
		}{{"deny", deny}, {"inspect", ins}} {
			b.Run(op.name+"/max="+strconv.Itoa(max), func(b *testing.B) {
				b.ReportAllocs()
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i++ {
					if _, err := be.decide(ctx, op.req.op, op.req.Request); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(scriptMicros(b, c), "server-µs/op")
				mem, err := c.MemoryUsage(ctx, s.trail()).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(mem), "trail-bytes")
			})
		}
	}
}

// scriptMicros reads the server's mean time per EVALSHA since the last
// CONFIG RESETSTAT (INFO commandstats), in µs.
func scriptMicros(b *testing.B, c *goredis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line), ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return x
			}
		}
	}
	b.Fatal("INFO commandstats: no evalsha")
	return 0
}

// fixed4Requests returns takes of the bench's fixed-4 shape (5/s, 15/min,
// 30/h, 50/24h on one dimension set; limits raised so that nothing
// denies) for n subjects, reading the subjects' overrides when ov.
func fixed4Requests(n int, ov bool) []request {
	reqs := make([]request, n)
	for i := range reqs {
		s := subject{base: "fcb:{o" + strconv.Itoa(i) + "}:fixed4:"}
		var rules []driver.Rule
		for _, w := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
			r := s.fixed("w"+w.String(), 1<<40, w)
			r.Group = s.base + "="
			rules = append(rules, r)
		}
		reqs[i] = s.request(opTake, 1, rules...)
		reqs[i].TrailKey, reqs[i].TrailMax = "", 0
		if ov {
			reqs[i].OverrideKey = s.overrides()
		}
	}
	return reqs
}

// BenchmarkTakeOverrides: the fixed-4 shape without overrides, reading
// overrides with none set, and with one limit override per subject (the
// rule's own limit), each as a fast script and through take.lua; the
// server's µs per script beside the time per decision.
func BenchmarkTakeOverrides(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	ctx := context.Background()
	plain, none, set := fixed4Requests(1000, false), fixed4Requests(1000, true), fixed4Requests(1000, true)
	be := New(c, nil)
	for i := range set {
		s := subject{base: "fcb:{s" + strconv.Itoa(i) + "}:fixed4:"}
		for k := range set[i].Rules {
			set[i].Rules[k].Key = s.key(set[i].Rules[k].Name)
			set[i].Rules[k].Group = s.base + "="
		}
		set[i].OverrideKey = s.overrides()
		if _, err := be.SetOverride(ctx, s.overrides(), driver.Override{Kind: driver.Limit, Limits: map[string]int64{set[i].Rules[0].Name: 1 << 40}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name   string
		noFast bool
		reqs   []request
	}{
		{"fast script", false, plain},
		{"take.lua", true, plain},
		{"fast script, overrides read, none set", false, none},
		{"take.lua, overrides read, none set", true, none},
		{"fast script, one limit override", false, set},
		{"take.lua, one limit override", true, set},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be := New(c, nil)
			be.noFast = bc.noFast
			if _, err := be.do(ctx, bc.reqs[0]); err != nil { // detection, script load
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := be.do(ctx, bc.reqs[i%len(bc.reqs)])
				if err != nil || !res.Allowed {
					b.Fatal(res, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(serverMicros(b, c, "evalsha"), "server-µs/op")
		})
	}
}

// serverMicros returns the server's mean µs per call of cmd since the
// last CONFIG RESETSTAT (INFO commandstats).
func serverMicros(b *testing.B, c *goredis.Client, cmd string) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+cmd+":"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return x
				}
			}
		}
	}
	b.Fatalf("INFO commandstats: no %s", cmd)
	return 0
}

// BenchmarkLogLine measures driver.LogLine's trade: one rule of 24h at
// the line, a packed log of limit 100 (up to 100 records, 1.4 KB),
// against the sorted-set log and the cells of limit 101, taken in turn
// on 200 subjects (with -benchtime=20000x every subject fills its 100
// records, the last takes on full logs); the server's µs per script.
//
//	go test -run '^$' -bench BenchmarkLogLine -benchtime=20000x ./backends/redis/
func BenchmarkLogLine(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		rule func(s subject) driver.Rule
	}{
		{"packed log, limit 100", func(s subject) driver.Rule { return s.log("l", driver.LogLine, 24*time.Hour) }},
		{"sorted-set log, limit 101", func(s subject) driver.Rule { return s.log("l", driver.LogLine+1, 24*time.Hour) }},
		{"cells, limit 101", func(s subject) driver.Rule { return s.sliding("s", driver.LogLine+1, 24*time.Hour, 10) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			reqs := make([]request, 200)
			for i := range reqs {
				s := newSubject(b, "logline")
				r := bc.rule(s)
				r.Group = s.base + "="
				reqs[i] = s.request(opTake, 1, r)
				reqs[i].TrailKey, reqs[i].TrailMax = "", 0
			}
			be := New(c, nil)
			if _, err := be.do(ctx, reqs[0]); err != nil { // detection, script load
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := be.do(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(serverMicros(b, c, "evalsha"), "server-µs/op")
		})
	}
}
