package memory

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// The messaging caps of issue 37 at the driver: Rule.Keep, Rule.Exempt,
// Request.Quiet.

// msgAlgs are one rule per way the memory backend evaluates a rule (its
// strategies: a fixed counter, a sliding window's cells, a sliding window
// evaluated as a log, a sliding log, GCRA), named by strategy.
var msgAlgs = []struct {
	name string
	rule driver.Rule
}{
	{"counter", driver.Rule{Algorithm: driver.FixedWindow, Limit: 5, Window: time.Minute}},
	{"cells", driver.Rule{Algorithm: driver.SlidingWindow, Limit: 500, Window: time.Minute, SubWindows: 6}},
	{"log-runs from a sliding window", driver.Rule{Algorithm: driver.SlidingWindow, Limit: 5, Window: time.Minute}},
	{"log-runs", driver.Rule{Algorithm: driver.SlidingLog, Limit: 5, Window: time.Minute}},
	{"gcra-tat", driver.Rule{Algorithm: driver.GCRA, Limit: 2, Window: time.Minute, Burst: 1}},
}

// msgRule returns r named name with its key under subject's hash tag.
func msgRule(r driver.Rule, subject, name string) driver.Rule {
	r.Name = name
	r.Key = "{" + subject + "}:p:" + name
	return r
}

func newMsgBackend() (*Backend, *fakeclock.Clock) {
	clock := fakeclock.New(t0)
	return New(&Options{Clock: clock}), clock
}

// msgDo runs req through o on b, failing the test on an error.
func msgDo(t *testing.T, b *Backend, o op, req driver.Request) driver.Result {
	t.Helper()
	res, err := b.decide(context.Background(), o, req)
	if err != nil {
		t.Fatalf("%v(%+v) = %v", o, req, err)
	}
	return res
}

// trailOf returns the subject's trail (newest first), read by Inspect.
func trailOf(t *testing.T, b *Backend, trailKey string) []driver.Denial {
	t.Helper()
	return msgDo(t, b, opInspect, driver.Request{Policy: "p", TrailKey: trailKey}).Trail
}

func trailed(req driver.Request, subject string) driver.Request {
	req.Policy = "p"
	req.TrailKey = "{" + subject + "}:p:!d"
	req.TrailMax = 10
	req.TrailTTL = 24 * time.Hour
	return req
}

// TestKeep: a rule with Keep admits against limit-Keep for every
// counting algorithm, exactly as a rule of that limit would (same
// verdicts, retry-after and count), reports its own Limit and the room
// left for the attempt's priority, and leaves the kept units to attempts
// without Keep.
func TestKeep(t *testing.T) {
	for _, a := range msgAlgs {
		if a.rule.Algorithm == driver.GCRA {
			continue // Keep is never set on GCRA (TestMessagingValidate)
		}
		t.Run(a.name, func(t *testing.T) {
			b, clock := newMsgBackend()
			ref, _ := newMsgBackend()
			ref.clock = clock
			limit, keep := a.rule.Limit, a.rule.Limit*2/5 // 5 keeps 2, 500 keeps 200
			r := msgRule(a.rule, "k", "r")
			low := r
			low.Keep = keep
			// The reference: the same algorithm and layout (a limit on the
			// same side of driver.LogLine), limit-Keep.
			refRule := r
			refRule.Limit = limit - keep
			if refRule.ExactLog() != r.ExactLog() {
				t.Fatalf("reference rule changes evaluation")
			}
			first := limit - keep - 1
			steps := []struct {
				name string
				at   time.Duration
				cost int64
			}{
				{"below limit-Keep", 0, first},
				{"reaches limit-Keep", 10 * time.Second, 1},
				{"one over limit-Keep", 20 * time.Second, 1},
				{"cost above limit-Keep", 20 * time.Second, limit - keep + 1},
			}
			for _, s := range steps {
				clock.Set(at(s.at))
				got := msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{low}, Cost: s.cost})
				want := msgDo(t, ref, opTake, driver.Request{Rules: []driver.Rule{refRule}, Cost: s.cost})
				g, w := got.Rules[0], want.Rules[0]
				if got.Allowed != want.Allowed || g.Allowed != w.Allowed || g.Used != w.Used ||
					g.RetryAfter != w.RetryAfter || g.CostTooHigh != w.CostTooHigh || g.ResetAfter != w.ResetAfter {
					t.Errorf("%s: Take(keep %d of %d) = %+v, want as limit %d: %+v", s.name, keep, limit, g, limit-keep, w)
				}
				if g.Limit != limit || g.Remaining != max(0, limit-keep-g.Used) {
					t.Errorf("%s: Take(keep %d of %d) = limit %d, remaining %d, want %d, %d",
						s.name, keep, limit, g.Limit, g.Remaining, limit, max(0, limit-keep-g.Used))
				}
			}
			if res := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{low}, Cost: 1}); res.Allowed || res.Rules[0].Remaining != 0 {
				t.Errorf("Peek(keep %d) at limit-Keep = %+v, want denied, remaining 0", keep, res)
			}
			// The kept units are there for an attempt keeping none.
			if res := msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{r}, Cost: keep}); !res.Allowed ||
				res.Rules[0].Used != limit || res.Rules[0].Remaining != 0 {
				t.Errorf("Take(%d, no keep) after limit-Keep = %+v, want allowed, used %d", keep, res, limit)
			}
			if res := msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{r}, Cost: 1}); res.Allowed {
				t.Errorf("Take(1, no keep) at the limit = %+v, want denied", res)
			}
			// A rule with Keep stores the same state as one without: the
			// kept attempts' units count for every priority.
			if k := b.Len(); k != 1 {
				t.Errorf("Len = %d, want 1 (one state for the rule, whatever Keep)", k)
			}
		})
	}
}

// TestKeepAtOrAboveLimit: a limit at or below Keep admits nothing, as
// CostTooHigh, on every operation; a Limit override gives the limit Keep
// is taken from.
func TestKeepAtOrAboveLimit(t *testing.T) {
	ctx := context.Background()
	for _, a := range msgAlgs {
		if a.rule.Algorithm == driver.GCRA {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			b, _ := newMsgBackend()
			r := msgRule(a.rule, "k", "r")
			r.Keep = r.Limit
			for _, o := range []op{opTake, opPeek, opReserve, opInspect} {
				req := driver.Request{Rules: []driver.Rule{r}, Cost: 1}
				if o == opReserve {
					req.ReservationKey, req.ReservationID, req.ReservationTTL = "{k}:p:!r", "x", time.Minute
				}
				res := msgDo(t, b, o, req)
				rr := res.Rules[0]
				if res.Allowed || !rr.CostTooHigh || rr.RetryAfter != 0 || rr.Remaining != 0 || rr.Limit != a.rule.Limit || rr.Used != 0 {
					t.Errorf("%v(keep = limit %d) = %+v, %+v, want denied, CostTooHigh, limit %d, used 0", o, r.Limit, res, rr, a.rule.Limit)
				}
			}
			// A Limit override: limit-Keep is the override's limit less Keep.
			const ovKey = "{k}:p:!o"
			ovLimit := a.rule.Limit + 3
			if _, err := b.SetOverride(ctx, ovKey, driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": ovLimit}}); err != nil {
				t.Fatal(err)
			}
			req := driver.Request{Rules: []driver.Rule{r}, Cost: 3, OverrideKey: ovKey}
			res := msgDo(t, b, opTake, req)
			if rr := res.Rules[0]; !res.Allowed || rr.Used != 3 || rr.Limit != ovLimit || rr.Remaining != 0 || res.Override.ID == 0 {
				t.Errorf("Take(3, keep %d, limit overridden to %d) = %+v, want allowed, used 3, limit %d, remaining 0", r.Keep, ovLimit, res, ovLimit)
			}
			req.Cost = 1
			if res := msgDo(t, b, opTake, req); res.Allowed || res.Rules[0].CostTooHigh || res.Rules[0].RetryAfter <= 0 {
				t.Errorf("Take(1) past the override's limit-Keep = %+v, want denied, with a retry-after", res.Rules[0])
			}
			small := r
			small.Keep = ovLimit
			if res := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{small}, Cost: 1, OverrideKey: ovKey}); res.Allowed || !res.Rules[0].CostTooHigh {
				t.Errorf("Peek(keep = the override's limit) = %+v, want CostTooHigh", res.Rules[0])
			}
		})
	}
}

// TestExemptCounted: a counted exempt rule never denies, counts every
// consumed attempt past its limit (Used up to driver.MaxUsed; GCRA: its
// TAT ahead, Used at most Burst+1), reports what it would have decided,
// and writes a Denial.Exempt entry for each attempt it would have denied.
func TestExemptCounted(t *testing.T) {
	for _, a := range msgAlgs {
		t.Run(a.name, func(t *testing.T) {
			b, clock := newMsgBackend()
			plain := msgRule(a.rule, "e", "r")
			ex := plain
			ex.Exempt = driver.ExemptCounted
			limit := plain.ReportedLimit()
			if res := msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{plain}, Cost: limit}, "e")); !res.Allowed {
				t.Fatalf("Take(limit) = %+v, want allowed", res)
			}
			res := msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{ex}, Cost: 1}, "e"))
			rr := res.Rules[0]
			wantUsed := limit + 1
			if a.rule.Algorithm == driver.GCRA {
				wantUsed = limit
			}
			if !res.Allowed || rr.Allowed || rr.RetryAfter <= 0 || rr.Used != wantUsed || rr.Remaining != 0 {
				t.Fatalf("Take(exempt counted) past the limit = %+v, want allowed, the rule's denial reported, used %d", res, wantUsed)
			}
			trail := trailOf(t, b, "{e}:p:!d")
			if len(trail) != 1 || !trail[0].Exempt || trail[0].Shadow || trail[0].Quiet || trail[0].Rule != "r" ||
				trail[0].Used != wantUsed || trail[0].Limit != limit || trail[0].RetryAfter != rr.RetryAfter || !trail[0].At.Equal(t0) {
				t.Errorf("trail = %+v, want one Exempt entry for r, used %d, retry %v", trail, wantUsed, rr.RetryAfter)
			}
			// The counted unit delays the next attempt without exemption.
			ref, _ := newMsgBackend()
			ref.clock = clock
			msgDo(t, ref, opTake, driver.Request{Rules: []driver.Rule{plain}, Cost: limit})
			after, before := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{plain}, Cost: 1}), msgDo(t, ref, opPeek, driver.Request{Rules: []driver.Rule{plain}, Cost: 1})
			if after.Allowed || after.Rules[0].RetryAfter < before.Rules[0].RetryAfter {
				t.Errorf("Peek after the exempt = %+v, want denied no sooner than without it (%v)", after.Rules[0], before.Rules[0].RetryAfter)
			}
			if a.rule.Algorithm == driver.GCRA {
				tt, _, _ := plain.GCRAParams()
				if d := after.Rules[0].RetryAfter - before.Rules[0].RetryAfter; d != tt {
					t.Errorf("GCRA retry-after grew by %v, want one emission interval %v", d, tt)
				}
			}
			// A request that another rule denies consumes nothing from it.
			other := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour}, "e", "o")
			msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{other}, Cost: 1})
			before = msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{plain}, Cost: 1})
			if res := msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{ex, other}, Cost: 1}, "e")); res.Allowed || res.Rules[0].Used != before.Rules[0].Used {
				t.Errorf("Take(exempt, denied by another rule) = %+v, want denied, r's used %d unchanged", res, before.Rules[0].Used)
			}
			trail = trailOf(t, b, "{e}:p:!d")
			if len(trail) != 3 || trail[0].Rule != "o" || trail[0].Exempt || trail[1].Rule != "r" || !trail[1].Exempt {
				t.Errorf("trail after a denial = %+v, want o's plain entry, newest, after r's Exempt one", trail)
			}
			// Peek and Inspect report the exempt rule's verdict, consume
			// and write nothing.
			for _, o := range []op{opPeek, opInspect} {
				res := msgDo(t, b, o, trailed(driver.Request{Rules: []driver.Rule{ex}, Cost: 1}, "e"))
				if !res.Allowed || res.Rules[0].Allowed || res.Rules[0].Used != before.Rules[0].Used {
					t.Errorf("%v(exempt) = %+v, want allowed, the rule's denial, nothing consumed", o, res)
				}
			}
			if n := len(trailOf(t, b, "{e}:p:!d")); n != 3 {
				t.Errorf("trail after Peek and Inspect holds %d entries, want 3", n)
			}
		})
	}
}

// TestExemptCountedSaturates: a counted exempt rule counts up to
// driver.MaxUsed and no further.
func TestExemptCountedSaturates(t *testing.T) {
	for _, a := range msgAlgs {
		if a.rule.Algorithm == driver.GCRA {
			continue // its Used is at most Burst+1: TestExemptCounted
		}
		t.Run(a.name, func(t *testing.T) {
			b, _ := newMsgBackend()
			ex := msgRule(a.rule, "s", "r")
			ex.Exempt = driver.ExemptCounted
			for i, want := range []int64{driver.MaxUsed - 1, driver.MaxUsed, driver.MaxUsed} {
				res := msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{ex}, Cost: driver.MaxUsed - 1})
				if !res.Allowed || res.Rules[0].Used != want {
					t.Errorf("Take #%d(MaxUsed-1, exempt counted) = %+v, want allowed, used %d", i+1, res.Rules[0], want)
				}
			}
		})
	}
}

// TestExemptUncounted: an uncounted exempt rule never denies and never
// counts, whether it would admit or not; its would-be denials are in the
// trail.
func TestExemptUncounted(t *testing.T) {
	for _, a := range msgAlgs {
		t.Run(a.name, func(t *testing.T) {
			b, _ := newMsgBackend()
			plain := msgRule(a.rule, "u", "r")
			ex := plain
			ex.Exempt = driver.ExemptUncounted
			limit := plain.ReportedLimit()
			res := msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{ex}, Cost: 1}, "u"))
			if !res.Allowed || !res.Rules[0].Allowed || res.Rules[0].Used != 0 {
				t.Errorf("Take(exempt uncounted) on empty state = %+v, want allowed, used 0 (not counted)", res.Rules[0])
			}
			msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{plain}, Cost: limit})
			res = msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{ex}, Cost: 1}, "u"))
			if !res.Allowed || res.Rules[0].Allowed || res.Rules[0].Used != limit {
				t.Errorf("Take(exempt uncounted) at the limit = %+v, want allowed, the rule's denial, used %d", res, limit)
			}
			peek := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{plain}, Cost: 1})
			ref, _ := newMsgBackend()
			ref.clock = b.clock
			msgDo(t, ref, opTake, driver.Request{Rules: []driver.Rule{plain}, Cost: limit})
			if want := msgDo(t, ref, opPeek, driver.Request{Rules: []driver.Rule{plain}, Cost: 1}); peek.Rules[0] != want.Rules[0] {
				t.Errorf("Peek after uncounted exempts = %+v, want %+v (as if they never happened)", peek.Rules[0], want.Rules[0])
			}
			if trail := trailOf(t, b, "{u}:p:!d"); len(trail) != 1 || !trail[0].Exempt || trail[0].Rule != "r" {
				t.Errorf("trail = %+v, want one Exempt entry (the would-be denial only)", trail)
			}
		})
	}
}

// TestExemptOverrideAndRules: an Exempt override admits over the rules;
// a rule exempt uncounted is not counted under a counted override; a
// rule exempt counted is not counted under an uncounted one.
func TestExemptOverrideAndRules(t *testing.T) {
	ctx := context.Background()
	base := driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: time.Hour}
	tests := []struct {
		name    string
		counted bool
		exempt  driver.Exemption
		want    int64 // the rule's Used after two takes
	}{
		{"counted override, rule not exempt", true, driver.NotExempt, 2},
		{"counted override, rule uncounted", true, driver.ExemptUncounted, 0},
		{"counted override, rule counted", true, driver.ExemptCounted, 2},
		{"uncounted override, rule counted", false, driver.ExemptCounted, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newMsgBackend()
			const ovKey = "{x}:p:!o"
			ov, err := b.SetOverride(ctx, ovKey, driver.Override{Kind: driver.Exempt, Counted: tc.counted})
			if err != nil {
				t.Fatal(err)
			}
			r := msgRule(base, "x", "r")
			r.Exempt = tc.exempt
			var res driver.Result
			for range 2 {
				res = msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{r}, Cost: 1, OverrideKey: ovKey})
			}
			if !res.Allowed || res.Override.ID != ov.ID || res.Rules[0].Used != tc.want {
				t.Errorf("Take×2 = %+v, want allowed by #%d, used %d", res, ov.ID, tc.want)
			}
		})
	}
}

// TestExemptReserve: a Reserve counted past the limit by a counted
// exempt gives its units back when cancelled; an uncounted exempt rule
// has nothing to give back.
func TestExemptReserve(t *testing.T) {
	ctx := context.Background()
	b, _ := newMsgBackend()
	counted := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 2, Window: time.Hour, Exempt: driver.ExemptCounted}, "v", "c")
	uncounted := msgRule(driver.Rule{Algorithm: driver.SlidingLog, Limit: 2, Window: time.Hour, Exempt: driver.ExemptUncounted}, "v", "u")
	plainC, plainU := counted, uncounted
	plainC.Exempt, plainU.Exempt = driver.NotExempt, driver.NotExempt
	msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{plainC, plainU}, Cost: 2})
	req := trailed(driver.Request{Rules: []driver.Rule{counted, uncounted}, Cost: 3,
		ReservationKey: "{v}:p:!r", ReservationID: "a", ReservationTTL: time.Minute}, "v")
	res := msgDo(t, b, opReserve, req)
	if !res.Allowed || res.ReservationID != "a" || res.Rules[0].Used != 5 || res.Rules[1].Used != 2 {
		t.Fatalf("Reserve(3, exempt) = %+v, want allowed, used 5 (counted) and 2 (uncounted)", res)
	}
	if trail := trailOf(t, b, "{v}:p:!d"); len(trail) != 2 || !trail[0].Exempt || !trail[1].Exempt {
		t.Errorf("trail = %+v, want two Exempt entries", trail)
	}
	if err := b.Cancel(ctx, "{v}:p:!r", "a"); err != nil {
		t.Fatal(err)
	}
	peek := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{plainC, plainU}, Cost: 1})
	if peek.Rules[0].Used != 2 || peek.Rules[1].Used != 2 {
		t.Errorf("used after Cancel = %d, %d, want 2, 2", peek.Rules[0].Used, peek.Rules[1].Used)
	}
}

// TestQuiet: on the backend's clock in a quiet span [Start, End), every
// operation is denied with Result.Quiet the span's End, every rule still
// evaluated and reported, nothing consumed; a Take or Reserve writes one
// Denial.Quiet entry. At End, the request is decided as usual.
func TestQuiet(t *testing.T) {
	for _, a := range msgAlgs {
		t.Run(a.name, func(t *testing.T) {
			b, clock := newMsgBackend()
			r := msgRule(a.rule, "q", "r")
			// Day windows: t0 is noon, so the quiet spans below are in
			// the window of the takes that fill these.
			shadow := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: 24 * time.Hour, Shadow: true}, "q", "s")
			exempt := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 1, Window: 24 * time.Hour, Exempt: driver.ExemptCounted}, "q", "e")
			msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{shadow, exempt}, Cost: 1})
			quiet := []driver.Span{
				{Start: at(time.Hour), End: at(2 * time.Hour)},
				{Start: at(5 * time.Hour), End: at(6 * time.Hour)},
			}
			rules := []driver.Rule{r, shadow, exempt}
			req := func(o op) driver.Request {
				q := trailed(driver.Request{Rules: rules, Cost: 1, Quiet: quiet}, "q")
				if o == opReserve {
					q.ReservationKey, q.ReservationID, q.ReservationTTL = "{q}:p:!r", "x", time.Minute
				}
				return q
			}
			if res := msgDo(t, b, opPeek, req(opPeek)); !res.Allowed || !res.Quiet.IsZero() {
				t.Errorf("Peek before the quiet hours = %+v, want allowed, Quiet zero", res)
			}
			entries := 0
			for _, c := range []struct {
				at  time.Duration
				end time.Time
			}{
				{time.Hour, at(2 * time.Hour)},                     // at Start
				{2*time.Hour - time.Nanosecond, at(2 * time.Hour)}, // 1ns before End
				{5*time.Hour + 30*time.Minute, at(6 * time.Hour)},  // the second span
			} {
				clock.Set(at(c.at))
				for _, o := range []op{opTake, opPeek, opReserve, opInspect} {
					res := msgDo(t, b, o, req(o))
					if res.Allowed || !res.Quiet.Equal(c.end) || res.ReservationID != "" || len(res.Rules) != 3 {
						t.Fatalf("%v at +%v = %+v, want denied for quiet hours ending %v", o, c.at, res, c.end)
					}
					if rr := res.Rules[0]; !rr.Allowed || rr.Used != 0 || rr.Limit != r.ReportedLimit() {
						t.Errorf("%v at +%v: r = %+v, want evaluated (allowed), nothing consumed", o, c.at, rr)
					}
					if res.Rules[1].Allowed || res.Rules[2].Allowed || res.Rules[2].Used != 1 {
						t.Errorf("%v at +%v: shadow, exempt = %+v, %+v, want both reported denying, exempt's used 1", o, c.at, res.Rules[1], res.Rules[2])
					}
					if o.consumes() {
						entries++
					}
				}
				trail := trailOf(t, b, "{q}:p:!d")
				if len(trail) != entries {
					t.Fatalf("trail at +%v holds %d entries, want %d (one per Take or Reserve)", c.at, len(trail), entries)
				}
				d := trail[0]
				if !d.Quiet || d.Rule != "" || d.Shadow || d.Exempt || d.Override != 0 || d.Cost != 1 || d.Policy != "p" ||
					!d.At.Equal(at(c.at)) || d.RetryAfter != c.end.Sub(at(c.at)) {
					t.Errorf("trail[0] at +%v = %+v, want a Quiet entry, no rule, retry %v", c.at, d, c.end.Sub(at(c.at)))
				}
			}
			clock.Set(at(2 * time.Hour)) // End: not quiet
			if res := msgDo(t, b, opTake, req(opTake)); !res.Allowed || !res.Quiet.IsZero() || res.Rules[0].Used != 1 {
				t.Errorf("Take at the span's End = %+v, want allowed, used 1", res)
			}
		})
	}
}

// TestQuietPrecedence: a Block override denies before quiet hours (its
// own entry, Result.Quiet zero); quiet hours deny before an Exempt
// override (nothing counted, the exempt not reported as deciding); a
// Limit override is still applied and reported.
func TestQuietPrecedence(t *testing.T) {
	ctx := context.Background()
	quiet := []driver.Span{{Start: t0, End: at(time.Hour)}}
	r := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 5, Window: time.Hour}, "o", "r")
	tests := []struct {
		name      string
		ov        driver.Override
		quietWins bool
		limit     int64 // r's reported limit
	}{
		{"block", driver.Override{Kind: driver.Block, Until: at(30 * time.Minute)}, false, 5},
		{"endless block", driver.Override{Kind: driver.Block}, false, 5},
		{"counted exempt", driver.Override{Kind: driver.Exempt, Counted: true}, true, 5},
		{"uncounted exempt", driver.Override{Kind: driver.Exempt}, true, 5},
		{"limit", driver.Override{Kind: driver.Limit, Limits: map[string]int64{"r": 9}}, true, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newMsgBackend()
			const ovKey = "{o}:p:!o"
			ov, err := b.SetOverride(ctx, ovKey, tc.ov)
			if err != nil {
				t.Fatal(err)
			}
			res := msgDo(t, b, opTake, trailed(driver.Request{Rules: []driver.Rule{r}, Cost: 1, Quiet: quiet, OverrideKey: ovKey}, "o"))
			trail := trailOf(t, b, "{o}:p:!d")
			if res.Allowed || res.Rules[0].Used != 0 || res.Rules[0].Limit != tc.limit || len(trail) != 1 {
				t.Fatalf("Take = %+v, trail %+v, want denied, nothing consumed, limit %d, one entry", res, trail, tc.limit)
			}
			if tc.quietWins {
				wantOv := int64(0)
				if tc.ov.Kind == driver.Limit {
					wantOv = ov.ID // it changed a limit
				}
				if !res.Quiet.Equal(at(time.Hour)) || res.Override.ID != wantOv || !trail[0].Quiet || trail[0].Override != 0 {
					t.Errorf("Take under %s in quiet hours = %+v, trail %+v, want denied for quiet hours, override #%d", tc.name, res, trail, wantOv)
				}
				return
			}
			if !res.Quiet.IsZero() || res.Override.ID != ov.ID || trail[0].Quiet || trail[0].Override != ov.ID {
				t.Errorf("Take under %s in quiet hours = %+v, trail %+v, want denied by #%d, Quiet zero", tc.name, res, trail, ov.ID)
			}
		})
	}
}

// TestQuietReplay: an idempotent request denied for quiet hours replays
// its Result, Quiet included, after they end; one allowed replays as
// allowed inside them.
func TestQuietReplay(t *testing.T) {
	b, clock := newMsgBackend()
	r := msgRule(driver.Rule{Algorithm: driver.SlidingLog, Limit: 5, Window: 3 * time.Hour}, "i", "r")
	quiet := []driver.Span{{Start: at(time.Minute), End: at(time.Hour)}}
	req := func(key string) driver.Request {
		return trailed(driver.Request{Rules: []driver.Rule{r}, Cost: 1, Quiet: quiet,
			IdempotencyKey: "{i}:p:!i:" + key, IdempotencyTTL: 2 * time.Hour}, "i")
	}
	first := msgDo(t, b, opTake, req("before")) // allowed
	clock.Set(at(30 * time.Minute))
	denied := msgDo(t, b, opTake, req("during"))
	if denied.Allowed || !denied.Quiet.Equal(at(time.Hour)) {
		t.Fatalf("Take in quiet hours = %+v, want denied until +1h", denied)
	}
	if res := msgDo(t, b, opTake, req("before")); !res.Replayed || !res.Allowed || !res.Quiet.IsZero() || !res.Now.Equal(first.Now) {
		t.Errorf("replay in quiet hours of an allowed take = %+v, want replayed, allowed", res)
	}
	clock.Set(at(90 * time.Minute))
	res := msgDo(t, b, opTake, req("during"))
	if !res.Replayed || res.Allowed || !res.Quiet.Equal(at(time.Hour)) || !res.Now.Equal(at(30*time.Minute)) {
		t.Errorf("replay after quiet hours = %+v, want replayed, denied, Quiet +1h", res)
	}
	if trail := trailOf(t, b, "{i}:p:!d"); len(trail) != 1 {
		t.Errorf("trail = %+v, want the one Quiet entry (replays write none)", trail)
	}
	if peek := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{r}, Cost: 1}); peek.Rules[0].Used != 1 {
		t.Errorf("used = %d, want 1 (the first take only)", peek.Rules[0].Used)
	}
	// A replayed exempt: its Result, the rule's denial included.
	ex := msgRule(driver.Rule{Algorithm: driver.SlidingLog, Limit: 1, Window: 3 * time.Hour}, "i", "x")
	msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{ex}, Cost: 1})
	ex.Exempt = driver.ExemptCounted
	exReq := driver.Request{Rules: []driver.Rule{ex}, Cost: 1, IdempotencyKey: "{i}:p:!i:ex", IdempotencyTTL: time.Hour}
	orig := msgDo(t, b, opTake, exReq)
	again := msgDo(t, b, opTake, exReq)
	if !orig.Allowed || orig.Rules[0].Allowed || !again.Replayed || again.Rules[0] != orig.Rules[0] {
		t.Errorf("exempt take, replay = %+v, %+v, want allowed, the rule denying, replayed alike", orig, again)
	}
}

// TestMessagingBatch: TakeBatch and PeekBatch decide each request with
// its own Keep, Exempt and Quiet, in order.
func TestMessagingBatch(t *testing.T) {
	b, _ := newMsgBackend()
	ctx := context.Background()
	r := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 3, Window: time.Hour}, "b", "r")
	keep, ex := r, r
	keep.Keep = 1
	ex.Exempt = driver.ExemptCounted
	quiet := []driver.Span{{Start: t0, End: at(time.Minute)}}
	reqs := []driver.Request{
		{Rules: []driver.Rule{keep}, Cost: 2},             // allowed: 2 of 3-1
		{Rules: []driver.Rule{keep}, Cost: 1},             // denied by the headroom
		{Rules: []driver.Rule{r}, Cost: 1, Quiet: quiet},  // denied: quiet
		{Rules: []driver.Rule{r}, Cost: 1},                // allowed: 3
		{Rules: []driver.Rule{ex}, Cost: 2},               // allowed, counted: 5
		{Rules: []driver.Rule{ex}, Cost: 1, Quiet: quiet}, // denied: quiet
	}
	want := []struct {
		allowed bool
		used    int64
		quiet   bool
	}{{true, 2, false}, {false, 2, false}, {false, 2, true}, {true, 3, false}, {true, 5, false}, {false, 5, true}}
	for i, br := range b.TakeBatch(ctx, reqs) {
		w := want[i]
		if br.Err != nil || br.Result.Allowed != w.allowed || br.Result.Rules[0].Used != w.used || br.Result.Quiet.IsZero() == w.quiet {
			t.Errorf("TakeBatch[%d] = %+v, %v, want allowed %v, used %d, quiet %v", i, br.Result, br.Err, w.allowed, w.used, w.quiet)
		}
	}
	peeks := b.PeekBatch(ctx, []driver.Request{{Rules: []driver.Rule{r}, Cost: 1, Quiet: quiet}, {Rules: []driver.Rule{ex}, Cost: 1}})
	if p := peeks[0]; p.Err != nil || p.Result.Allowed || !p.Result.Quiet.Equal(at(time.Minute)) {
		t.Errorf("PeekBatch[0] = %+v, %v, want denied for quiet hours", p.Result, p.Err)
	}
	if p := peeks[1]; p.Err != nil || !p.Result.Allowed || p.Result.Rules[0].Used != 5 {
		t.Errorf("PeekBatch[1] = %+v, %v, want allowed (exempt), used 5", p.Result, p.Err)
	}
	if bad := b.TakeBatch(ctx, []driver.Request{{Rules: []driver.Rule{r}, Cost: 1, Quiet: []driver.Span{{Start: t0, End: t0}}}}); bad[0].Err == nil {
		t.Errorf("TakeBatch(empty quiet span) = nil error, want one")
	}
}

// TestMessagingValidate: misuses of Keep, Exempt and Quiet are errors.
func TestMessagingValidate(t *testing.T) {
	fixed := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 3, Window: time.Hour}, "z", "r")
	span := func(from, to time.Duration) driver.Span { return driver.Span{Start: at(from), End: at(to)} }
	many := make([]driver.Span, driver.MaxQuietSpans+1)
	for i := range many {
		many[i] = span(time.Duration(2*i)*time.Hour, time.Duration(2*i+1)*time.Hour)
	}
	tests := []struct {
		name string
		rule func(*driver.Rule)
		q    []driver.Span
	}{
		{"keep on gcra", func(r *driver.Rule) { r.Algorithm, r.Keep = driver.GCRA, 1 }, nil},
		{"negative keep", func(r *driver.Rule) { r.Keep = -1 }, nil},
		{"exempt shadow", func(r *driver.Rule) { r.Exempt, r.Shadow = driver.ExemptCounted, true }, nil},
		{"unknown exemption", func(r *driver.Rule) { r.Exempt = 3 }, nil},
		{"too many spans", nil, many},
		{"empty span", nil, []driver.Span{span(time.Hour, time.Hour)}},
		{"reversed span", nil, []driver.Span{span(time.Hour, 0)}},
		{"unsorted", nil, []driver.Span{span(3*time.Hour, 4*time.Hour), span(time.Hour, 2*time.Hour)}},
		{"overlapping", nil, []driver.Span{span(time.Hour, 3*time.Hour), span(2*time.Hour, 4*time.Hour)}},
	}
	b, _ := newMsgBackend()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := fixed
			if tc.rule != nil {
				tc.rule(&r)
			}
			if _, err := b.Take(context.Background(), driver.Request{Rules: []driver.Rule{r}, Cost: 1, Quiet: tc.q}); err == nil {
				t.Errorf("Take(%s) = nil error, want one", tc.name)
			}
		})
	}
	ok := []driver.Span{span(0, time.Hour), span(time.Hour, 2*time.Hour)} // adjacent spans
	if _, err := b.Take(context.Background(), driver.Request{Rules: []driver.Rule{fixed}, Cost: 1, Quiet: ok}); err != nil {
		t.Errorf("Take(adjacent spans) = %v, want no error", err)
	}
}

// TestQuietKeepsSeed: a Take denied for quiet hours stores a seeded
// rule's carried units, as any denied Take does (driver.Rule.Seed), and
// never its cost.
func TestQuietKeepsSeed(t *testing.T) {
	b, _ := newMsgBackend()
	old := msgRule(driver.Rule{Algorithm: driver.FixedWindow, Limit: 5, Window: time.Hour}, "sd", "old")
	msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{old}, Cost: 2})
	next := msgRule(driver.Rule{Algorithm: driver.SlidingLog, Limit: 4, Window: time.Hour, Seed: 1}, "sd", "new")
	quiet := []driver.Span{{Start: t0, End: at(time.Minute)}}
	res := msgDo(t, b, opTake, driver.Request{Rules: []driver.Rule{old, next}, Cost: 1, Quiet: quiet})
	if res.Allowed || res.Rules[0].Used != 2 || res.Rules[1].Used != 2 {
		t.Fatalf("Take in quiet hours = %+v, want denied, both rules at the 2 carried units", res)
	}
	alone := next
	alone.Seed = 0
	if peek := msgDo(t, b, opPeek, driver.Request{Rules: []driver.Rule{alone}, Cost: 1}); peek.Rules[0].Used != 2 {
		t.Errorf("the new rule alone = %+v, want its stored seed, used 2", peek.Rules[0])
	}
}
