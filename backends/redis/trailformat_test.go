package redis

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

// TestTrailEntryOneFormat: the trail entries the scripts write, a fast
// script's and take.lua's (a plain denial, a cost too high, a shadow
// rule's; with and without values), are byte for byte what formatDenial,
// bare mode's writer, writes for the denials they parse to, and carry the
// flags they should: the entry's format and its flags are declared once
// (internal/lua/tokens.go), and the Lua and the Go sides agree on them.
func TestTrailEntryOneFormat(t *testing.T) {
	b, c := standalone(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		shadow, fast bool
		values       string
	}{
		{"fast", false, true, ""},
		{"fast values", false, true, "content=a"},
		{"take.lua", true, false, ""},
		{"take.lua values", true, false, "content=c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubject(t, "trailfmt")
			rules := []driver.Rule{s.fixed("f", 1, time.Hour)}
			if tc.shadow {
				rules = append(rules, shadowOf(s.fixed("sh", 1, time.Hour)))
			}
			req := s.request(opTake, 1, rules...)
			req.TrailValues = tc.values
			if fast := decidingSource(t, b, req) != lua.Take; fast != tc.fast {
				t.Fatalf("decided by a fast script: %v, want %v", fast, tc.fast)
			}
			take(t, b, req) // allowed
			take(t, b, req) // denied
			req.Cost = 5
			take(t, b, req) // the cost could never fit
			raw, err := c.LRange(ctx, s.trail(), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			trail := take(t, b, s.request(opInspect, 0, rules...)).Trail
			if len(raw) != len(trail) || len(raw) < 2 {
				t.Fatalf("trail = %q, parsed %+v, want the same entries, at least 2", raw, trail)
			}
			var tooHigh, shadow int
			for i, d := range trail {
				want := formatDenial(d.At.UnixMicro(), d.Policy, d.Rule, d.Used, d.Limit, d.Cost,
					d.RetryAfter.Microseconds(), d.CostTooHigh, d.Shadow, d.Values)
				if raw[i] != want {
					t.Errorf("entry %d = %q, want %q (formatDenial of what it parses to)", i, raw[i], want)
				}
				if d.Values != tc.values {
					t.Errorf("entry %d: values %q, want %q", i, d.Values, tc.values)
				}
				if d.CostTooHigh {
					tooHigh++
				}
				if d.Shadow {
					shadow++
				}
			}
			if tooHigh == 0 || (shadow > 0) != tc.shadow {
				t.Errorf("trail %+v: %d entries too high, %d shadow; want some too high, shadow ones: %v", trail, tooHigh, shadow, tc.shadow)
			}
		})
	}
}
