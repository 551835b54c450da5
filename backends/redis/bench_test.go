package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/capability"
	"github.com/freqcap/freqcap/internal/bench/scripts"
	"github.com/freqcap/freqcap/internal/redistest"
)

// BenchmarkTakeSeed decides the seed policy (4 sliding-window rules) for
// random subjects, at the driver level (no sdk).
func BenchmarkTakeSeed(b *testing.B) {
	c := goredis.NewClient(NewClientOptions(redistest.Standalone(b)).Simple())
	defer c.Close()
	be := New(c, nil)
	reqs := seedRequests("fcb")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := be.do(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
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
