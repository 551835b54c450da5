package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q) = %v", name, err)
	}
	return loc
}

func TestFixedStep(t *testing.T) {
	r := driver.Rule{Name: "f", Algorithm: driver.FixedWindow, Limit: 3, Window: time.Minute}
	end := at(time.Minute)
	tests := []struct {
		name    string
		st      fixedState
		cost    int64
		now     time.Time
		next    fixedState
		verdict verdict
	}{
		{"empty admits", fixedState{}, 1, at(30 * time.Second), fixedState{end, 1}, verdict{Allowed: true}},
		{"fills to the limit", fixedState{end, 2}, 1, at(30 * time.Second), fixedState{end, 3}, verdict{Allowed: true}},
		{"denies over the limit", fixedState{end, 3}, 1, at(30 * time.Second), fixedState{end, 3}, verdict{RetryAfter: 30 * time.Second}},
		{"cost n over", fixedState{end, 1}, 3, at(59 * time.Second), fixedState{end, 1}, verdict{RetryAfter: time.Second}},
		{"old window counts nothing", fixedState{t0, 3}, 3, at(0), fixedState{end, 3}, verdict{Allowed: true}},
		{"next window at its start", fixedState{end, 3}, 1, end, fixedState{end.Add(time.Minute), 1}, verdict{Allowed: true}},
		{"cost too high", fixedState{}, 4, at(0), fixedState{}, verdict{CostTooHigh: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, v := fixedStep(tc.st, r, tc.cost, tc.now)
			if !next.end.Equal(tc.next.end) || next.count != tc.next.count || v != tc.verdict {
				t.Errorf("fixedStep(%+v, %d, %v) = %+v, %+v, want %+v, %+v", tc.st, tc.cost, tc.now, next, v, tc.next, tc.verdict)
			}
		})
	}
}

func TestSlidingStep(t *testing.T) {
	r := driver.Rule{Algorithm: driver.SlidingWindow, Limit: 10, Window: 10 * time.Second, SubWindows: 10}
	i0 := t0.Unix() // cell index of t0 (1s cells)
	tests := []struct {
		name    string
		cells   []cell
		cost    int64
		now     time.Time
		verdict verdict
		used    int64 // after the step when allowed
		reset   time.Duration
	}{
		// Cells count until (j+N+1)s: the oldest, partly expired one too.
		{"empty", nil, 1, at(500 * time.Millisecond), verdict{Allowed: true}, 1, 10500 * time.Millisecond},
		{"need 1 frees with the oldest cell", []cell{{Idx: i0, N: 4}, {Idx: i0 + 5, N: 6}}, 1, at(5500 * time.Millisecond),
			verdict{RetryAfter: 5500 * time.Millisecond}, 10, 10500 * time.Millisecond},
		{"need 5 frees with cell 5", []cell{{Idx: i0, N: 4}, {Idx: i0 + 5, N: 6}}, 5, at(5500 * time.Millisecond),
			verdict{RetryAfter: 10500 * time.Millisecond}, 10, 10500 * time.Millisecond},
		{"the oldest cell still counts a window after it began", []cell{{Idx: i0, N: 4}, {Idx: i0 + 5, N: 6}}, 1, at(10 * time.Second),
			verdict{RetryAfter: time.Second}, 10, 6 * time.Second},
		{"1ns before it leaves", []cell{{Idx: i0, N: 4}, {Idx: i0 + 5, N: 6}}, 1, at(11*time.Second - 1),
			verdict{RetryAfter: 1}, 10, 5*time.Second + 1},
		{"the oldest cell left at (j+N+1)s", []cell{{Idx: i0, N: 4}, {Idx: i0 + 5, N: 6}}, 4, at(11 * time.Second),
			verdict{Allowed: true}, 10, 11 * time.Second},
		{"cost too high", nil, 11, t0, verdict{CostTooHigh: true}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := slidingState{cells: tc.cells}
			next, v := slidingStep(st, r, tc.cost, tc.now)
			if v != tc.verdict {
				t.Errorf("slidingStep(%v, %d, %v) = %+v, want %+v", tc.cells, tc.cost, tc.now, v, tc.verdict)
			}
			used, reset := slidingReport(next, r, tc.now)
			if used != tc.used || reset != tc.reset {
				t.Errorf("slidingReport after the step = %d, %v, want %d, %v", used, reset, tc.used, tc.reset)
			}
		})
	}
	// The step never changes its input.
	st := slidingState{cells: []cell{{Idx: i0, N: 1}}}
	slidingStep(st, r, 1, t0)
	if st.cells[0].N != 1 {
		t.Errorf("slidingStep mutated its input: %v", st.cells)
	}
}

func TestLogStep(t *testing.T) {
	r := driver.Rule{Algorithm: driver.SlidingLog, Limit: 5, Window: 10 * time.Second}
	runs := []run{{T: at(0), N: 2, Seq: 1}, {T: at(5 * time.Second), N: 3, Seq: 2}}
	tests := []struct {
		name    string
		cost    int64
		now     time.Time
		verdict verdict
		used    int64
	}{
		{"need 1: the oldest entry", 1, at(5 * time.Second), verdict{RetryAfter: 5 * time.Second}, 5},
		{"need 3: the third oldest", 3, at(5 * time.Second), verdict{RetryAfter: 10 * time.Second}, 5},
		{"1ms before the oldest leaves", 1, at(10*time.Second - time.Millisecond), verdict{RetryAfter: time.Millisecond}, 5},
		{"at now-W the entry is gone", 2, at(10 * time.Second), verdict{Allowed: true}, 5},
		{"cost too high", 6, at(30 * time.Second), verdict{CostTooHigh: true}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, v := logStep(logState{runs: runs, seq: 2}, r, tc.cost, tc.now)
			if v != tc.verdict {
				t.Errorf("logStep(%d, %v) = %+v, want %+v", tc.cost, tc.now, v, tc.verdict)
			}
			if used, _ := logReport(next, r, tc.now); used != tc.used {
				t.Errorf("logReport after the step = %d, want %d", used, tc.used)
			}
		})
	}
	// 100 units at one instant count as 100.
	st, v := logStep(logState{}, driver.Rule{Limit: 100, Window: time.Minute}, 100, t0)
	if used, reset := logReport(st, driver.Rule{Limit: 100, Window: time.Minute}, t0); !v.Allowed || used != 100 || reset != time.Minute {
		t.Errorf("logStep(cost 100) = %+v, used %d, reset %v, want allowed, 100, 1m", v, used, reset)
	}
}

func TestGCRAStep(t *testing.T) {
	// redis-cell: CL.THROTTLE key 4 10 60 → [limited, limit, remaining, retry, reset].
	r := driver.Rule{Algorithm: driver.GCRA, Limit: 10, Window: time.Minute, Burst: 4}
	tests := []struct {
		now       time.Time
		allowed   bool
		remaining int64
		retry     time.Duration
		reset     time.Duration
	}{
		{t0, true, 4, 0, 6 * time.Second},
		{t0, true, 3, 0, 12 * time.Second},
		{t0, true, 2, 0, 18 * time.Second},
		{t0, true, 1, 0, 24 * time.Second},
		{t0, true, 0, 0, 30 * time.Second},
		{t0, false, 0, 6 * time.Second, 30 * time.Second},
		{at(3 * time.Second), false, 0, 3 * time.Second, 27 * time.Second},
		{at(6 * time.Second), true, 0, 0, 30 * time.Second},
		{at(36 * time.Second), true, 4, 0, 6 * time.Second},
	}
	var tat time.Time
	for i, tc := range tests {
		next, v := gcraStep(tat, r, 1, tc.now)
		if v.Allowed {
			tat = next
		}
		used, reset := gcraReport(tat, r, tc.now)
		if v.Allowed != tc.allowed || 5-used != tc.remaining || v.RetryAfter != tc.retry || reset != tc.reset {
			t.Errorf("#%d gcraStep at +%v = allowed %t remaining %d retry %v reset %v, want %t %d %v %v", i+1,
				tc.now.Sub(t0), v.Allowed, 5-used, v.RetryAfter, reset, tc.allowed, tc.remaining, tc.retry, tc.reset)
		}
	}
	if _, v := gcraStep(time.Time{}, r, 6, t0); !v.CostTooHigh {
		t.Errorf("gcraStep(cost 6, burst 4) = %+v, want CostTooHigh", v)
	}
	if _, v := gcraStep(time.Time{}, r, 5, t0); !v.Allowed {
		t.Errorf("gcraStep(cost 5, burst 4) = %+v, want allowed (c*T == tol)", v)
	}
}

// policy returns a request of every algorithm plus a trail and reservations for
// the subject with hash tag tag.
func policy(tag string) driver.Request {
	k := func(s string) string { return "fc:{" + tag + "}:p:" + s }
	return driver.Request{
		Policy: "p", Cost: 1,
		Rules: []driver.Rule{
			{Name: "f", Key: k("f"), Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour},
			{Name: "s", Key: k("s"), Algorithm: driver.SlidingWindow, Limit: 2, Window: 24 * time.Hour, SubWindows: 10},
			{Name: "l", Key: k("l"), Algorithm: driver.SlidingLog, Limit: 2, Window: time.Minute},
			{Name: "g", Key: k("g"), Algorithm: driver.GCRA, Limit: 2, Window: time.Minute, Burst: 1},
		},
		TrailKey: k("!t"), TrailMax: 5, TrailTTL: 24 * time.Hour,
		ReservationKey: k("!h"), ReservationID: "h", ReservationTTL: time.Hour,
	}
}

func fill(t *testing.T, b *Backend, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		tag := fmt.Sprint("u", i)
		for _, o := range []op{opReserve, opTake} { // the take is denied: a trail
			if _, err := b.decide(ctx, o, policy(tag)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBoundedSweep(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	fill(t, b, 10000)
	if got := b.Len(); got != 10000*6 {
		t.Fatalf("Len() after 10k subjects = %d, want %d (4 rules, trail, reservations)", got, 10000*6)
	}
	clock.Advance(27 * time.Hour) // past every window (24h + a 2.4h cell), the trail TTL and the reservations
	b.Sweep()
	if got := b.Len(); got != 0 {
		t.Errorf("Len() after Sweep = %d, want 0", got)
	}
}

func TestBoundedIncremental(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	fill(t, b, 10000)
	before := b.Len()
	clock.Advance(27 * time.Hour) // past every window (24h + a 2.4h cell)
	ctx := context.Background()
	// Other subjects, one per shard, so that calls reach every shard.
	var others []string
	covered := map[int]bool{}
	for i := 0; len(covered) < len(b.shards); i++ {
		tag := fmt.Sprint("other", i)
		if i := b.shardIndex("{" + tag + "}"); !covered[i] {
			covered[i] = true
			others = append(others, tag)
		}
	}
	live := len(others) * 6
	for round := 0; round < 200 && b.Len() > live; round++ {
		for _, tag := range others {
			if _, err := b.Take(ctx, policy(tag)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What remains is the others' own live state: every expired entry went.
	if got := b.Len(); got > live {
		t.Errorf("Len() after calls on other subjects = %d (was %d), want at most %d", got, before, live)
	}
	clock.Advance(27 * time.Hour)
	b.Sweep()
	if got := b.Len(); got != 0 {
		t.Errorf("Len() after Sweep = %d, want 0", got)
	}
}

// TestReservationOutlivesTTLUntilRefundWorthless: a lapsed reservation stays until it is
// refunded or its refund is worthless, so memory stays bounded and a lapse
// is never lost to a sweep.
func TestReservationOutlivesTTLUntilRefundWorthless(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock, Shards: 1})
	req := policy("u")
	req.Rules = req.Rules[:1] // fixed, 1 per hour
	req.ReservationTTL = time.Minute
	ctx := context.Background()
	if res, err := b.Reserve(ctx, req); err != nil || !res.Allowed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	clock.Advance(2 * time.Minute)
	b.Sweep()
	if res, _ := b.Take(ctx, req); !res.Allowed {
		t.Errorf("Take after the reservation lapsed and a Sweep = denied, want the lapse refunded")
	}
}

func TestCrossShardRequest(t *testing.T) {
	b := New(nil)
	ctx := context.Background()
	// Keys without a common tag span shards: still all-or-nothing, no deadlock.
	req := driver.Request{Cost: 1, ReservationKey: "reservations", ReservationID: "x", ReservationTTL: time.Hour,
		Rules: []driver.Rule{
			{Name: "a", Key: "a", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour},
			{Name: "b", Key: "b", Algorithm: driver.SlidingLog, Limit: 2, Window: time.Hour},
		}}
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			r := req
			r.Rules = []driver.Rule{req.Rules[1], req.Rules[0]} // other order
			for range 200 {
				if _, err := b.Peek(ctx, r); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	if res, err := b.Reserve(ctx, req); err != nil || !res.Allowed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	if err := b.Cancel(ctx, "reservations", "x"); err != nil {
		t.Fatalf("Cancel = %v", err)
	}
	for range 8 {
		<-done
	}
	res, _ := b.Peek(ctx, req)
	if res.Rules[0].Used != 0 || res.Rules[1].Used != 0 {
		t.Errorf("Peek after cancel = %+v, want nothing used (refunds across shards)", res.Rules)
	}
}

func TestValidate(t *testing.T) {
	ok := driver.Rule{Name: "r", Key: "k", Algorithm: driver.FixedWindow, Limit: 1, Window: time.Second}
	bad := func(f func(*driver.Request)) driver.Request {
		req := driver.Request{Cost: 1, Rules: []driver.Rule{ok}}
		f(&req)
		return req
	}
	tests := []struct {
		name string
		op   op
		req  driver.Request
	}{
		{"cost 0", opTake, bad(func(r *driver.Request) { r.Cost = 0 })},
		{"limit 0", opTake, bad(func(r *driver.Request) { r.Rules[0].Limit = 0 })},
		{"window 0", opTake, bad(func(r *driver.Request) { r.Rules[0].Window = 0 })},
		{"no key", opTake, bad(func(r *driver.Request) { r.Rules[0].Key = "" })},
		{"no algorithm", opTake, bad(func(r *driver.Request) { r.Rules[0].Algorithm = 0 })},
		{"reserve without id", opReserve, bad(func(r *driver.Request) {
			r.ReservationKey = "h"
			r.ReservationTTL = time.Second
		})},
		{"reserve without ttl", opReserve, bad(func(r *driver.Request) { r.ReservationKey = "h"; r.ReservationID = "x" })},
	}
	b := New(nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Rules = append([]driver.Rule(nil), tc.req.Rules...)
			if _, err := b.decide(context.Background(), tc.op, tc.req); err == nil {
				t.Errorf("%v(%s) = nil error, want an error", tc.op, tc.name)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Take(ctx, bad(func(*driver.Request) {})); !errors.Is(err, context.Canceled) {
		t.Errorf("Take(cancelled ctx) = %v, want context.Canceled", err)
	}
}

func TestDescribe(t *testing.T) {
	d, err := New(nil).Describe(context.Background())
	if err != nil || d.Name != "memory" || len(d.Strategies) != 4 {
		t.Errorf("Describe() = %+v, %v, want name memory and 4 strategies", d, err)
	}
}

// BenchmarkTake runs the push seed policy (four sliding windows) over many
// recipients in parallel.
func BenchmarkTake(b *testing.B) {
	be := New(nil)
	rule := func(tag, name string, limit int64, w time.Duration) driver.Rule {
		return driver.Rule{Name: name, Key: "fc:{" + tag + "}:push:" + name + ".abcdef",
			Algorithm: driver.SlidingWindow, Limit: limit, Window: w, SubWindows: 10}
	}
	const subjects = 100000
	reqs := make([]driver.Request, subjects)
	for i := range reqs {
		tag := fmt.Sprint("u", i)
		reqs[i] = driver.Request{Policy: "push", Cost: 1,
			Rules: []driver.Rule{
				rule(tag, "recv-1m", 15, time.Minute),
				rule(tag, "recv-24h", 50, 24*time.Hour),
				rule(tag, "content-59s", 2, 59*time.Second),
				rule(tag, "content-59m", 5, 59*time.Minute),
			},
			TrailKey: "fc:{" + tag + "}:push:!t", TrailMax: 20, TrailTTL: 24 * time.Hour,
			ReservationKey: "fc:{" + tag + "}:push:!h"}
	}
	var seed atomic.Uint64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 1))
		for pb.Next() {
			if _, err := be.Take(ctx, reqs[rng.IntN(subjects)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestIdemRecordBounded: an idempotency record is one entry per key, kept
// for IdempotencyTTL, then swept like any other state.
func TestIdemRecordBounded(t *testing.T) {
	clock := fakeclock.New(t0)
	b := New(&Options{Clock: clock})
	ctx := context.Background()
	r := driver.Rule{Name: "f", Key: "fc:{u}:p:f", Algorithm: driver.FixedWindow, Limit: 100, Window: time.Minute}
	for i := range 10 {
		req := driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: 1,
			IdempotencyKey: fmt.Sprint("fc:{u}:p:!i:", i), IdempotencyTTL: time.Hour}
		if _, err := b.Take(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Len(); got != 11 {
		t.Errorf("Len() after 10 keyed takes = %d, want 11 (1 rule, 10 records)", got)
	}
	clock.Advance(time.Hour)
	b.Sweep()
	if got := b.Len(); got != 0 {
		t.Errorf("Len() after IdempotencyTTL = %d, want 0", got)
	}
	bad := driver.Request{Rules: []driver.Rule{r}, Cost: 1, IdempotencyKey: "fc:{u}:p:!i:x"}
	if _, err := b.Take(ctx, bad); err == nil {
		t.Error("Take(IdempotencyKey without IdempotencyTTL) = nil error, want one")
	}
}

// TestResultStrategy checks that each rule's result names the strategy
// Describe reports for its algorithm.
func TestResultStrategy(t *testing.T) {
	b := New(nil)
	rules := []driver.Rule{
		{Name: "f", Key: "st:{u}:f", Algorithm: driver.FixedWindow, Limit: 5, Window: time.Minute},
		{Name: "s", Key: "st:{u}:s", Algorithm: driver.SlidingWindow, Limit: 5, Window: time.Minute, SubWindows: 10},
		{Name: "l", Key: "st:{u}:l", Algorithm: driver.SlidingLog, Limit: 5, Window: time.Minute},
		{Name: "g", Key: "st:{u}:g", Algorithm: driver.GCRA, Limit: 5, Window: time.Minute, Burst: 1},
	}
	res, err := b.Take(context.Background(), driver.Request{Rules: rules, Cost: 1})
	if err != nil || len(res.Rules) != len(rules) {
		t.Fatalf("Take() = %d rule results, %v; want %d", len(res.Rules), err, len(rules))
	}
	desc, err := b.Describe(context.Background())
	if err != nil {
		t.Fatalf("Describe() error: %v", err)
	}
	for i, r := range res.Rules {
		a := rules[i].Algorithm
		if rules[i].ExactLog() {
			a = driver.SlidingLog // a sliding window this small is an exact log
		}
		if want := desc.Strategies[a].Name; r.Strategy != want || want == "" {
			t.Errorf("Take() rule %q strategy = %q, want %q", rules[i].Name, r.Strategy, want)
		}
	}
}

// TestOverrideKeepsAlgorithm: a limit override changes a sliding window's
// limit, not what it runs on (runs: its own limit against driver.LogLine),
// and a reservation on it is given back to that state.
func TestOverrideKeepsAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		name              string
		limit, overridden int64
		strategy          string
	}{
		{"log overridden above the line", driver.LogLine / 2, 5 * driver.LogLine, "log-runs"},
		{"cells overridden below the line", 5 * driver.LogLine, driver.LogLine / 2, "cells"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := New(&Options{Clock: fakeclock.New(t0)})
			r := driver.Rule{Name: "s", Key: "{u}:p:s", Algorithm: driver.SlidingWindow, Limit: tc.limit, Window: time.Minute, SubWindows: 10}
			req := driver.Request{Policy: "p", Rules: []driver.Rule{r}, Cost: 1, OverrideKey: "{u}:p:!o",
				ReservationKey: "{u}:p:!r", ReservationID: "a", ReservationTTL: time.Minute}
			if _, err := b.SetOverride(ctx, req.OverrideKey, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"s": tc.overridden}}); err != nil {
				t.Fatalf("SetOverride = %v", err)
			}
			res, err := b.Reserve(ctx, req)
			if err != nil || !res.Allowed || res.Rules[0].Limit != tc.overridden || res.Rules[0].Strategy != tc.strategy {
				t.Fatalf("Reserve(limit %d overridden to %d) = %+v, %v, want allowed, limit %d, strategy %q",
					tc.limit, tc.overridden, res, err, tc.overridden, tc.strategy)
			}
			if err := b.Cancel(ctx, req.ReservationKey, req.ReservationID); err != nil {
				t.Fatalf("Cancel = %v", err)
			}
			if res, err := b.Peek(ctx, req); err != nil || res.Rules[0].Used != 0 || res.Rules[0].Strategy != tc.strategy {
				t.Errorf("Peek after Cancel = %+v, %v, want used 0 (given back), strategy %q", res, err, tc.strategy)
			}
		})
	}
}

// TestKeysNotRetained: the sdk cuts a request's keys out of one string
// (driver.Rule.Group's doc), so an entry must keep a copy of its key, not
// the caller's string.
func TestKeysNotRetained(t *testing.T) {
	b := New(nil)
	req := policy("u1")
	given := map[*byte]string{}
	for _, r := range req.Rules {
		given[unsafe.StringData(r.Key)] = r.Key
	}
	given[unsafe.StringData(req.TrailKey)] = req.TrailKey
	given[unsafe.StringData(req.ReservationKey)] = req.ReservationKey
	for _, o := range []op{opReserve, opTake} { // the take is denied: a trail
		if _, err := b.decide(context.Background(), o, req); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, s := range b.shards {
		for k, e := range s.entries {
			n++
			for _, p := range []*byte{unsafe.StringData(k), unsafe.StringData(e.key)} {
				if key, ok := given[p]; ok {
					t.Errorf("entry %q keeps the request's string %q", e.key, key)
				}
			}
		}
	}
	if n != 6 {
		t.Errorf("%d entries, want 6 (4 rules, trail, reservations)", n)
	}
}
