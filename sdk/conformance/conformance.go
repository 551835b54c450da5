// Package conformance is the behaviour suite every freqcap backend passes.
//
// A backend's test runs it in a few lines:
//
//	func TestConformance(t *testing.T) {
//		clock := conformance.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
//		conformance.Run(t, conformance.Harness{
//			NewBackend: func(t *testing.T) driver.Backend {
//				return memory.New(&memory.Options{Clock: clock})
//			},
//			Clock:    clock,
//			Features: conformance.AllFeatures,
//		})
//	}
//
// The suite holds a backend to the contract of package driver (the
// algorithms' arithmetic, the denial trail, reservations). Every expectation is
// computed from the backend's own clock (Result.Now), so the same cases
// run against a fake clock (exact, instant, sequential) and against a
// server whose clock is its own (Harness.Clock nil: short real windows,
// time advanced by polling the backend's clock, subtests in parallel).
//
// Each subtest builds its own keys in the shape of the sdk's key scheme,
// "ct:{<random>}:p:<rule>", with a fresh random hash tag, so parallel
// tests and shared servers never collide.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "time/tzdata" // the calendar cases need zones on any machine

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// Features are the optional parts of the contract a backend implements.
// A case needing a feature the harness does not list is skipped, with a
// message naming the feature.
type Features uint32

const (
	// Reservations: OpReserve and driver.Settler.
	Reservations Features = 1 << iota
	// Reset: driver.Resetter.
	Reset
	// Inspect: OpInspect and the denial trail.
	Inspect
	// Calendar: FixedWindow rules with a CalendarUnit and Location.
	Calendar
	// Idempotency: Request.IdemKey, Result.Replayed and Result.HoldID
	// (driver.Idempotent reporting true).
	Idempotency
	// Batch: driver.Batcher.
	Batch
	// Describe: driver.Describer.
	Describe

	// AllFeatures is every feature.
	AllFeatures = Reservations | Reset | Inspect | Calendar | Idempotency | Batch | Describe
)

// String lists the features by name, e.g. "Reservations|Inspect".
func (f Features) String() string {
	var names []string
	for _, n := range []struct {
		f    Features
		name string
	}{{Reservations, "Reservations"}, {Reset, "Reset"}, {Inspect, "Inspect"}, {Calendar, "Calendar"},
		{Idempotency, "Idempotency"}, {Batch, "Batch"}, {Describe, "Describe"}} {
		if f&n.f != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Harness tells Run how to test one backend.
type Harness struct {
	// NewBackend returns the backend under test. It is called once per
	// subtest; returning one shared backend is fine (keys never collide).
	NewBackend func(t *testing.T) driver.Backend
	// Clock is the fake clock the backend reads (its Now), advanced by the
	// suite. Nil means the backend has its own clock (a Redis server's
	// TIME): the suite then uses short real windows, waits by polling the
	// backend's clock and runs the subtests in parallel. The clock is read
	// by peeking a scratch key with the test's own hash tag, so on a
	// Redis Cluster it is the clock of the node holding the test's keys.
	Clock *FakeClock
	// Features lists the optional features the backend implements.
	Features Features
	// Tolerance is the slack allowed in durations and instants the
	// backend reports (e.g. for a backend storing microseconds). Default:
	// 0 with a fake clock, 2ms with a real one. Counts are always exact.
	Tolerance time.Duration
}

// FakeClock is the suite's fake clock: a fakeclock.Clock.
type FakeClock = fakeclock.Clock

// NewFakeClock returns a fake clock reading t (fakeclock.New).
func NewFakeClock(t time.Time) *FakeClock { return fakeclock.New(t) }

// Run runs the suite against the backend h describes, one subtest per
// behaviour (see the package documentation).
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewBackend == nil {
		t.Fatal("conformance: Harness.NewBackend is nil")
	}
	if h.Tolerance == 0 && h.Clock == nil {
		h.Tolerance = 2 * time.Millisecond
	}
	realClock := h.Clock == nil
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			if realClock && !g.serial {
				t.Parallel()
			}
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if miss := c.needs &^ h.Features; miss != 0 {
						t.Skipf("backend lacks %v (Harness.Features)", miss)
					}
					if c.fakeOnly && realClock {
						t.Skip("needs a fake clock (Harness.Clock): the instants it tests cannot be waited for")
					}
					if realClock && !g.serial {
						t.Parallel()
					}
					for attempt := 1; ; attempt++ {
						slow := runCase(t, &h, c)
						if slow == "" {
							return
						}
						if attempt == 3 {
							t.Fatalf("timing: %s (3 attempts): the backend is too slow for this case's real-clock windows", slow)
						}
						t.Logf("timing: %s; retrying with fresh keys", slow)
					}
				})
			}
		})
	}
}

// tooSlow is panicked by env.before with a real clock when the calls of
// a case did not fit the instants it needs; runCase recovers it.
type tooSlow struct{ msg string }

// runCase runs c once on a fresh env. It returns why, if the attempt was
// abandoned because the machine was too slow for real-clock windows.
func runCase(t *testing.T, h *Harness, c testCase) (slow string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			ts, ok := r.(tooSlow)
			if !ok {
				panic(r)
			}
			slow = ts.msg
		}
	}()
	c.run(newEnv(t, h))
	return ""
}

type group struct {
	name   string
	serial bool // never parallel (the concurrency cases load the machine)
	cases  []testCase
}

type testCase struct {
	name     string
	needs    Features
	fakeOnly bool
	run      func(e *env)
}

// NewTag returns a random hash tag for a test's keys.
func NewTag() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// env is one subtest's backend, keys and clock.
type env struct {
	t        *testing.T
	h        *Harness
	b        driver.Backend
	fake     *FakeClock
	tol      time.Duration
	tag      string
	trailMax int
	trailTTL time.Duration
}

func newEnv(t *testing.T, h *Harness) *env {
	t.Helper()
	e := &env{
		t: t, h: h, b: h.NewBackend(t), fake: h.Clock, tol: h.Tolerance,
		tag: NewTag(), trailMax: 20, trailTTL: time.Hour,
	}
	if e.fake != nil {
		res := e.do(e.clockRequest())
		if want := e.fake.Now(); !near(res.Now, want, e.tol) {
			t.Fatalf("Harness.Clock: the backend's Result.Now = %v, want the clock's %v (does NewBackend read Clock.Now?)", res.Now, want)
		}
	}
	return e
}

// key returns this test's key for name.
func (e *env) key(name string) string { return "ct:{" + e.tag + "}:p:" + name }

// pick returns fake with a fake clock, real with a real one.
func (e *env) pick(fake, real time.Duration) time.Duration {
	if e.fake != nil {
		return fake
	}
	return real
}

func (e *env) fixed(name string, limit int64, w time.Duration) driver.Rule {
	return driver.Rule{Name: name, Key: e.key(name), Algorithm: driver.FixedWindow, Limit: limit, Window: w}
}

func (e *env) sliding(name string, limit int64, w time.Duration, cells int) driver.Rule {
	return driver.Rule{Name: name, Key: e.key(name), Algorithm: driver.SlidingWindow, Limit: limit, Window: w, SubWindows: cells}
}

func (e *env) log(name string, limit int64, w time.Duration) driver.Rule {
	return driver.Rule{Name: name, Key: e.key(name), Algorithm: driver.SlidingLog, Limit: limit, Window: w}
}

func (e *env) gcra(name string, limit int64, per time.Duration, burst int64) driver.Rule {
	return driver.Rule{Name: name, Key: e.key(name), Algorithm: driver.GCRA, Limit: limit, Window: per, Burst: burst}
}

func (e *env) calendar(name string, limit int64, unit driver.CalendarUnit, loc *time.Location) driver.Rule {
	w := 24 * time.Hour
	if unit == driver.Hour {
		w = time.Hour
	}
	return driver.Rule{Name: name, Key: e.key(name), Algorithm: driver.FixedWindow, Limit: limit, Window: w,
		Calendar: unit, Location: loc}
}

// clockRule is the scratch rule peeked to read the backend's clock.
func (e *env) clockRule() driver.Rule { return e.fixed("clock", 1, time.Second) }

func (e *env) request(op driver.Op, cost int64, rules ...driver.Rule) driver.Request {
	return driver.Request{
		Op: op, Policy: "p", Rules: rules, Cost: cost,
		TrailKey: e.key("!t"), TrailMax: e.trailMax, TrailTTL: e.trailTTL,
		HoldKey: e.key("!h"),
	}
}

// do sends req and checks the shape of the result.
func (e *env) do(req driver.Request) driver.Result {
	e.t.Helper()
	res, err := e.b.Take(context.Background(), req)
	return e.shaped(opName(req), req, res, err)
}

// shaped fails the test unless res (with err) is a result for req: no
// error, one rule result per rule, the backend's clock.
func (e *env) shaped(label string, req driver.Request, res driver.Result, err error) driver.Result {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s = error %v, want a result", label, err)
	}
	if len(res.Rules) != len(req.Rules) {
		e.t.Fatalf("%s = %d rule results, want %d", label, len(res.Rules), len(req.Rules))
	}
	if res.Now.IsZero() {
		e.t.Fatalf("%s: Result.Now is zero, want the backend's clock", label)
	}
	return res
}

func (e *env) take(cost int64, rules ...driver.Rule) driver.Result {
	e.t.Helper()
	return e.do(e.request(driver.OpTake, cost, rules...))
}

func (e *env) peek(cost int64, rules ...driver.Rule) driver.Result {
	e.t.Helper()
	return e.do(e.request(driver.OpPeek, cost, rules...))
}

func (e *env) inspect(rules ...driver.Rule) driver.Result {
	e.t.Helper()
	return e.do(e.request(driver.OpInspect, 0, rules...))
}

func (e *env) reserve(id string, ttl time.Duration, cost int64, rules ...driver.Rule) driver.Result {
	e.t.Helper()
	req := e.request(driver.OpReserve, cost, rules...)
	req.HoldID, req.HoldTTL = id, ttl
	return e.do(req)
}

func (e *env) settle(id string, commit bool) error {
	e.t.Helper()
	s, ok := e.b.(driver.Settler)
	if !ok {
		e.t.Fatalf("Harness.Features has Reservations but %T is not a driver.Settler", e.b)
	}
	return s.Settle(context.Background(), e.key("!h"), id, commit)
}

func opName(req driver.Request) string {
	names := make([]string, len(req.Rules))
	for i, r := range req.Rules {
		names[i] = r.Name
	}
	op := [...]string{"Take", "Peek", "Reserve", "Inspect"}[min(int(req.Op), 3)]
	return fmt.Sprintf("%s(%s, cost %d)", op, strings.Join(names, "+"), req.Cost)
}

// now reads the backend's clock: the fake clock, or a peek's Result.Now.
func (e *env) now() time.Time {
	e.t.Helper()
	if e.fake != nil {
		return e.fake.Now()
	}
	return e.do(e.clockRequest()).Now
}

// clockRequest peeks the scratch rule, with its own trail and hold keys
// (same hash tag, so the same server and clock), so that reading the
// clock never processes the test's holds.
func (e *env) clockRequest() driver.Request {
	return driver.Request{Op: driver.OpPeek, Policy: "p", Rules: []driver.Rule{e.clockRule()}, Cost: 1,
		TrailKey: e.key("clock!t"), TrailMax: 0, TrailTTL: time.Hour, HoldKey: e.key("clock!h")}
}

// advanceTo moves the backend's clock to at least target: it sets the
// fake clock, or polls the backend's clock until it has passed target.
// It returns the backend's time then.
func (e *env) advanceTo(target time.Time) time.Time {
	e.t.Helper()
	if e.fake != nil {
		if target.After(e.fake.Now()) {
			e.fake.Set(target)
		}
		return e.fake.Now()
	}
	now := e.now()
	deadline := time.Now().Add(target.Sub(now) + 10*time.Second)
	for now.Before(target) {
		if time.Now().After(deadline) {
			e.t.Fatalf("the backend's clock reads %v, has not reached %v by the deadline", now, target)
		}
		// Poll: wait about half the remaining time, at most 20ms.
		time.Sleep(min(target.Sub(now)/2, 20*time.Millisecond))
		now = e.now()
	}
	return now
}

// alignTo waits for the next epoch-aligned boundary of w and then off
// more; it returns the boundary.
func (e *env) alignTo(w, off time.Duration) time.Time {
	e.t.Helper()
	b := windowStart(e.now(), w).Add(w)
	e.advanceTo(b.Add(off))
	return b
}

// ensureRoom makes sure the backend's clock is at least room before the
// end of its epoch-aligned window of w, waiting for the next one if not.
func (e *env) ensureRoom(w, room time.Duration) {
	e.t.Helper()
	now := e.now()
	if end := windowStart(now, w).Add(w); end.Sub(now) < room {
		e.advanceTo(end)
	}
}

// before abandons the attempt when res was decided at or after deadline:
// the machine was too slow for the real-clock windows. Run retries the
// case with fresh keys, up to 3 times.
func (e *env) before(res driver.Result, deadline time.Time, what string) {
	e.t.Helper()
	if res.Now.Before(deadline) {
		return
	}
	msg := fmt.Sprintf("%s was decided at %v, not before %v", what, res.Now, deadline)
	if e.fake != nil {
		e.t.Fatalf("timing: %s (a fake clock never moves by itself: a bug in the case)", msg)
	}
	panic(tooSlow{msg})
}

func windowStart(t time.Time, w time.Duration) time.Time {
	ns, wn := t.UnixNano(), int64(w)
	s := ns / wn * wn
	if ns%wn < 0 {
		s -= wn
	}
	return time.Unix(0, s)
}

func near(a, b time.Time, tol time.Duration) bool {
	d := a.Sub(b)
	return d <= tol && d >= -tol
}

func nearDur(a, b, tol time.Duration) bool {
	d := a - b
	return d <= tol && d >= -tol
}

// want builds an expected rule result: Remaining follows from limit and
// used; RetryAfter is zero when allowed.
func want(allowed bool, used, limit int64, resetAfter, retryAfter time.Duration) driver.RuleResult {
	return driver.RuleResult{Allowed: allowed, Used: used, Limit: limit, Remaining: max(0, limit-used),
		ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// tooHigh builds the expected result of a cost that can never fit.
func tooHigh(used, limit int64, resetAfter time.Duration) driver.RuleResult {
	r := want(false, used, limit, resetAfter, 0)
	r.CostTooHigh = true
	return r
}

func fmtRule(r driver.RuleResult) string {
	s := fmt.Sprintf("{allowed:%t used:%d limit:%d remaining:%d reset:%v retry:%v", r.Allowed, r.Used, r.Limit,
		r.Remaining, r.ResetAfter, r.RetryAfter)
	if r.CostTooHigh {
		s += " costTooHigh"
	}
	return s + "}"
}

// expect checks res.Allowed and each rule's result (durations within the
// tolerance).
func (e *env) expect(label string, res driver.Result, allowed bool, wants ...driver.RuleResult) {
	e.t.Helper()
	if res.Allowed != allowed {
		e.t.Errorf("%s: Allowed = %t, want %t (rules %s)", label, res.Allowed, allowed, fmtRules(res.Rules))
	}
	for i, w := range wants {
		g := res.Rules[i]
		if g.Allowed != w.Allowed || g.Used != w.Used || g.Limit != w.Limit || g.Remaining != w.Remaining ||
			g.CostTooHigh != w.CostTooHigh || !nearDur(g.ResetAfter, w.ResetAfter, e.tol) ||
			!nearDur(g.RetryAfter, w.RetryAfter, e.tol) {
			e.t.Errorf("%s rule %d = %s, want %s", label, i, fmtRule(g), fmtRule(w))
		}
	}
}

func fmtRules(rs []driver.RuleResult) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmtRule(r)
	}
	return strings.Join(s, " ")
}

// used checks only the Used count of each rule.
func (e *env) used(label string, res driver.Result, used ...int64) {
	e.t.Helper()
	for i, u := range used {
		if res.Rules[i].Used != u {
			e.t.Errorf("%s rule %d = %s, want used %d", label, i, fmtRule(res.Rules[i]), u)
		}
	}
}
