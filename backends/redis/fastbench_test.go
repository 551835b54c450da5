package redis

import (
	"testing"

	"github.com/freqcap/freqcap/backends/redis/capability"
)

// BenchmarkFastAttempt is the client-side cost of building one seed
// request's fast attempt (cache hit): what a fast decision pays before
// its EVALSHA.
func BenchmarkFastAttempt(b *testing.B) {
	be := New(nil, nil)
	s := subject{base: "fcb:{u1}:push:"}
	req := s.request(opTake, 1, pushRules(s, "c1")...)
	rep := capability.Choose([]capability.Node{{Addr: "plain", Scripting: true}}, capability.Config{})
	if _, ok := be.fastAttempt(req.op, req.Request, &rep); !ok {
		b.Fatal("no fast attempt")
	}
	b.ReportAllocs()
	for b.Loop() {
		a, _ := be.fastAttempt(req.op, req.Request, &rep)
		_ = a.args()
	}
}
