package redis

import (
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
)

// TestResultStrategy checks that every rule's result names the strategy
// take.lua ran for it: plain Lua on a server as detected by default, and
// on a redis-cell server configured for module strategies CL.THROTTLE
// only for the GCRA rule it can express exactly.
func TestResultStrategy(t *testing.T) {
	t.Run("server without modules", func(t *testing.T) {
		b, _ := standalone(t)
		sliding := capability.PlainLua.String() // by default, also where the server has hash-field expiry
		s := newSubject(t, "strategy")
		res := take(t, b, s.request(opTake, 1,
			s.fixed("f", 5, time.Minute), s.sliding("s", 5, time.Minute, 10), s.gcra("g", 10, time.Minute, 4)))
		want := []string{capability.PlainLua.String(), sliding, capability.PlainLua.String()}
		for i, r := range res.Rules {
			if r.Strategy != want[i] {
				t.Errorf("Take() rule %d strategy = %q, want %q", i, r.Strategy, want[i])
			}
		}
	})
	t.Run("redis-cell server", func(t *testing.T) {
		b, _ := moduleBackend(t, moduleAddr(t, "FREQCAP_TEST_CELL"), modStrategies)
		s := newSubject(t, "strategy")
		// 10 per minute: T = 6 s, which CL.THROTTLE expresses; 3 per second:
		// T = 333333333.3 ns, which it cannot, so that rule stays on Lua.
		res := take(t, b, s.request(opTake, 1,
			s.gcra("exact", 10, time.Minute, 4), s.gcra("inexact", 3, time.Second, 0)))
		want := []string{capability.CellLua.String(), capability.PlainLua.String()}
		for i, r := range res.Rules {
			if r.Strategy != want[i] {
				t.Errorf("Take() rule %d strategy = %q, want %q", i, r.Strategy, want[i])
			}
		}
	})
}
