package redis

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// withStrategy returns a copy of rep whose choice for a is st.
func withStrategy(rep capability.Report, a driver.Algorithm, st capability.Strategy) capability.Report {
	rep.Choices = append([]capability.Choice(nil), rep.Choices...)
	for i := range rep.Choices {
		if rep.Choices[i].Algorithm == a {
			rep.Choices[i].Strategy = st
		}
	}
	return rep
}

// received returns c's argument list as the server receives it: the keys,
// boxed as *string, read back as strings.
func received(c call) []any {
	out := make([]any, len(c.args))
	for i, a := range c.args {
		if p, ok := a.(*string); ok {
			a = *p
		}
		out[i] = a
	}
	return out
}

// TestSpecCacheNeverStale encodes a rule, then the same rule name with one
// field or the strategy changed, on one Backend (whose cache holds the
// first spec), and checks each call against a Backend with an empty cache.
func TestSpecCacheNeverStale(t *testing.T) {
	s := subject{base: "fct:{spec}:p:"}
	plain := capability.Choose([]capability.Node{{Addr: "plain", Scripting: true}}, capability.Config{})
	hfe := withStrategy(plain, driver.SlidingWindow, capability.HFELua)
	tair := withStrategy(plain, driver.SlidingWindow, capability.TairHashLua)
	cell := withStrategy(plain, driver.GCRA, capability.CellLua)
	fixed := s.fixed("r", 5, time.Minute)
	sliding := s.sliding("r", 5, time.Minute, 10)
	gcra := s.gcra("r", 10, time.Minute, 4)
	with := func(r driver.Rule, f func(*driver.Rule)) driver.Rule { f(&r); return r }
	tests := []struct {
		name        string
		first, then driver.Rule
		rep1, rep2  capability.Report
	}{
		{"limit", fixed, with(fixed, func(r *driver.Rule) { r.Limit = 6 }), plain, plain},
		{"window", fixed, with(fixed, func(r *driver.Rule) { r.Window = time.Hour }), plain, plain},
		{"algorithm", fixed, with(fixed, func(r *driver.Rule) { r.Algorithm = driver.SlidingLog }), plain, plain},
		{"cells", sliding, with(sliding, func(r *driver.Rule) { r.SubWindows = 20 }), plain, plain},
		{"burst", gcra, with(gcra, func(r *driver.Rule) { r.Burst = 9 }), plain, plain},
		{"sliding strategy hfe", sliding, sliding, plain, hfe},
		{"sliding strategy tairhash", sliding, sliding, hfe, tair},
		{"gcra strategy cell", gcra, gcra, plain, cell},
		{"gcra strategy back to lua", gcra, gcra, cell, plain},
		{"calendar", fixed, with(fixed, func(r *driver.Rule) { r.Calendar = driver.Day; r.Window = 24 * time.Hour }), plain, plain},
		{"zone", with(fixed, func(r *driver.Rule) { r.Calendar = driver.Day; r.Window = 24 * time.Hour }),
			with(fixed, func(r *driver.Rule) {
				r.Calendar, r.Window, r.Location = driver.Day, 24*time.Hour, time.FixedZone("x", 5*3600)
			}), plain, plain},
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(nil, nil)
			if _, err := b.encode(opTake, s.request(opTake, 1, tc.first).Request, now, &tc.rep1); err != nil {
				t.Fatal(err)
			}
			req := s.request(opTake, 1, tc.then).Request
			got, err := b.encode(opTake, req, now, &tc.rep2)
			if err != nil {
				t.Fatal(err)
			}
			want, err := New(nil, nil).encode(opTake, req, now, &tc.rep2)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(received(got), received(want)) || !reflect.DeepEqual(got.keys, want.keys) || !reflect.DeepEqual(got.attempts, want.attempts) {
				t.Errorf("encode() after a cached spec = %v %v, want %v %v", received(got), got.attempts, received(want), want.attempts)
			}
			// A fast script's attempt after the policy's specs were
			// memoized (specMemo: the same policy name) is built anew.
			fb := New(nil, nil)
			fb.fastAttempt(opTake, s.request(opTake, 1, tc.first).Request, &tc.rep1)
			fa, ok := fb.fastAttempt(opTake, req, &tc.rep2)
			wa, wok := New(nil, nil).fastAttempt(opTake, req, &tc.rep2)
			if ok != wok || (ok && (fa.s.src != wa.s.src || !reflect.DeepEqual(fa.keys, wa.keys) || fa.head != wa.head || !reflect.DeepEqual(fa.cals, wa.cals))) {
				t.Errorf("fastAttempt() after memoized specs = %v (ok %v), want %v (ok %v)", fa.keys, ok, wa.keys, wok)
			}
		})
	}
}

// TestSpecCacheBounded encodes more distinct rules than the cache holds:
// it stays within specCacheMax and every call still encodes its own rule.
func TestSpecCacheBounded(t *testing.T) {
	s := subject{base: "fct:{bound}:p:"}
	rep := capability.Choose([]capability.Node{{Addr: "plain", Scripting: true}}, capability.Config{})
	b := New(nil, nil)
	now := time.Now()
	for i := range 3 * specCacheMax {
		req := s.request(opTake, 1, s.fixed("r"+strconv.Itoa(i%7), int64(i+1), time.Minute)).Request
		c, err := b.encode(opTake, req, now, &rep)
		if err != nil {
			t.Fatal(err)
		}
		// ARGV: the attempt count, the header, then the rule's static
		// values (code, name, limit, window µs, 0, tag) and its key index.
		argv := received(c)[evalArgs+len(c.keys):]
		if fmt.Sprint(argv[0]) != "1" {
			t.Fatalf("encode() ARGV[1] = %v, want 1 attempt", argv[0])
		}
		r := s.fixed("r"+strconv.Itoa(i%7), int64(i+1), time.Minute)
		rule := argv[1+headerArgs:][:staticArgs+1]
		want := []any{"f", r.Name, r.Limit, time.Minute.Microseconds(), 0, ruleTag(&r), 1}
		if fmt.Sprint(rule) != fmt.Sprint(want) {
			t.Fatalf("encode() rule %d ARGV = %v, want %v", i, rule, want)
		}
		if n := b.specs.len(); n > specCacheMax {
			t.Fatalf("after %d rules the cache holds %d specs, want at most %d", i+1, n, specCacheMax)
		}
	}
}
