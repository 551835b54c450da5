// Package conformance is the behaviour suite every freqcap backend passes.
//
// A backend's test runs it in a few lines:
//
//	func TestConformance(t *testing.T) {
//		clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
//		conformance.Run(t, conformance.Harness{
//			NewBackend: func(t *testing.T) driver.Backend {
//				return memory.New(&memory.Options{Clock: clock})
//			},
//			Clock: clock,
//		})
//	}
//
// As gocloud.dev's drivertest runs the portable type, the suite drives the
// backend through the sdk: every case builds sdk rules and policies and
// calls an [sdk.Limiter] made with sdk.New(backend, sdk.WithPrefix(…)), so
// the sdk's translation (keys, rule resolution, the reported GCRA limit,
// the trail, reservations, idempotency keys, batches) is tested with the
// backend's contract (package driver: the algorithms' arithmetic, the
// denial trail, reservations).
//
// The optional parts of the contract are discovered by type assertion on
// the backend (driver.Peeker, Reserver, Inspector, Resetter, Batcher,
// Describer, Overrider, ValueLister, Linker); idempotency keys by asking (a backend without them refuses
// a key with errors.ErrUnsupported). A case needing one the backend lacks checks that
// the sdk refuses the operation with an error wrapping
// errors.ErrUnsupported, then is skipped with a message naming the
// interface: it never passes silently.
//
// Every expectation is computed from the backend's own clock
// (Decision.At), so the same cases run against a fake clock (exact,
// instant, sequential) and against a server whose clock is its own
// (Harness.Clock nil: short real windows, time advanced by polling the
// backend's clock, subtests in parallel). On a real clock a case whose
// call came later than an instant it needs (a late step, detected from
// Decision.At) is retried with fresh keys, at most twice, and the retry
// is logged; a wrong count or verdict is never retried.
//
// Each subtest uses its own key prefix and its own subject (a fresh
// random hash tag), so parallel tests and shared servers never collide.
//
// To run the suite against a server in a container — a Redis, a Redis
// Cluster, a Sentinel deployment or an image of your own — start it with
// package containers (sdk/conformance/containers) and build the backend
// on the addresses it returns.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "time/tzdata" // the calendar cases need zones on any machine

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// Harness tells Run how to test one backend.
type Harness struct {
	// NewBackend returns the backend under test. It is called once per
	// subtest, with the subtest's t, so each may get a fresh backend (and
	// register its cleanup with t); returning one shared backend is fine
	// too (keys never collide). Required.
	NewBackend func(t *testing.T) driver.Backend
	// Clock is the fake clock the backend reads (its Now), advanced by the
	// suite. Nil means the backend has its own clock (a Redis server's
	// TIME): the suite then uses short real windows, waits by polling the
	// backend's clock and runs the subtests in parallel. The clock is read
	// by peeking a scratch rule of the test's own subject, so on a Redis
	// Cluster it is the clock of the node holding the test's keys.
	Clock *fakeclock.Clock
	// Tolerance is the slack allowed in durations and instants the
	// backend reports (e.g. for a backend storing microseconds). Default:
	// 0 with a fake clock, 2ms with a real one. Counts are always exact.
	Tolerance time.Duration
}

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
					if c.fakeOnly && realClock {
						t.Skip("needs a fake clock (Harness.Clock): the instants it tests cannot be waited for")
					}
					if realClock && !g.serial {
						t.Parallel()
					}
					if missing(t, &h, c.needs) {
						return
					}
					for attempt := 1; ; attempt++ {
						late := runCase(t, &h, c, attempt)
						if late == "" {
							return
						}
						if attempt == lateAttempts {
							t.Fatalf("timing: %s (%d attempts): the backend is too slow for this case's real-clock windows", late, lateAttempts)
						}
						t.Logf("timing: %s; retrying with fresh keys (attempt %d)", late, attempt+1)
					}
				})
			}
		})
	}
}

// feature is an optional interface of package driver.
type feature uint16

const (
	peeker feature = 1 << iota
	reserver
	inspector
	resetter
	idempotent
	batcher
	describer
	overrider
	valueLister
	linker
)

var features = []struct {
	f    feature
	name string
	has  func(driver.Backend) bool // nil: found by calling refused
	// refused calls the sdk operation needing f and returns its error.
	refused func(e *env) error
}{
	{peeker, "driver.Peeker", func(b driver.Backend) bool { _, ok := b.(driver.Peeker); return ok },
		func(e *env) error {
			_, err := e.lim.Peek(bg(), e.policy(e.fixed("f", 1, time.Hour)), sdk.Attempt{Subject: e.subject()})
			return err
		}},
	{reserver, "driver.Reserver", func(b driver.Backend) bool { _, ok := b.(driver.Reserver); return ok },
		func(e *env) error {
			_, _, err := e.lim.Reserve(bg(), e.policy(e.fixed("f", 1, time.Hour)), sdk.Attempt{Subject: e.subject()}, time.Minute)
			return err
		}},
	{inspector, "driver.Inspector", func(b driver.Backend) bool { _, ok := b.(driver.Inspector); return ok },
		func(e *env) error {
			_, err := e.lim.Admin().Inspect(bg(), e.policy(e.fixed("f", 1, time.Hour)), e.subject())
			return err
		}},
	{resetter, "driver.Resetter", func(b driver.Backend) bool { _, ok := b.(driver.Resetter); return ok },
		func(e *env) error {
			return e.lim.Admin().Reset(bg(), e.policy(e.fixed("f", 1, time.Hour)), e.subject())
		}},
	{idempotent, "idempotency keys", nil, func(e *env) error {
		_, err := e.lim.Take(bg(), e.policy(e.fixed("f", 1, time.Hour)), sdk.Attempt{Subject: e.subject(), IdempotencyKey: "k"})
		return err
	}},
	{batcher, "driver.Batcher", func(b driver.Backend) bool { _, ok := b.(driver.Batcher); return ok }, nil},
	{describer, "driver.Describer", func(b driver.Backend) bool { _, ok := b.(driver.Describer); return ok },
		func(e *env) error { _, err := e.lim.Admin().Describe(bg()); return err }},
	{overrider, "driver.Overrider", func(b driver.Backend) bool { _, ok := b.(driver.Overrider); return ok },
		func(e *env) error {
			_, err := e.lim.Admin().Overrides(bg(), e.ovPolicy(e.fixed("f", 1, time.Hour)), e.subject())
			return err
		}},
	{linker, "driver.Linker", func(b driver.Backend) bool { _, ok := b.(driver.Linker); return ok },
		func(e *env) error { _, err := e.lim.Admin().LinkOf(bg(), "x"); return err }},
	{valueLister, "driver.ValueLister", func(b driver.Backend) bool { _, ok := b.(driver.ValueLister); return ok },
		func(e *env) error {
			p := e.policy(e.fixed("f", 1, time.Hour), sdk.FixedWindow("g", 1, time.Hour).By(dim, valueDim))
			_, err := e.lim.Admin().Values(bg(), p, e.subject(), valueDim, sdk.ValuesOptions{})
			return err
		}},
}

// missing reports whether the backend lacks a feature in needs. If so, it
// checks that the sdk refuses the operation (errors.ErrUnsupported) and
// skips the test, naming the interface.
func missing(t *testing.T, h *Harness, needs feature) bool {
	t.Helper()
	if needs == 0 {
		return false
	}
	e := newEnv(t, h)
	var names []string
	for _, f := range features {
		if needs&f.f == 0 {
			continue
		}
		if f.has == nil { // no interface: a backend without it refuses the operation
			if err := f.refused(e); errors.Is(err, errors.ErrUnsupported) {
				names = append(names, f.name)
			}
			continue
		}
		if f.has(e.b) {
			continue
		}
		names = append(names, f.name)
		if f.refused == nil {
			continue // the sdk falls back (Batcher: one call per attempt)
		}
		if err := f.refused(e); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("the sdk's operation needing %s on %T (which lacks it) = %v, want an error wrapping errors.ErrUnsupported",
				f.name, e.b, err)
		}
	}
	if len(names) == 0 {
		return false
	}
	if t.Failed() {
		return true
	}
	t.Skipf("skipped: backend %T does not implement %s (optional; the sdk refuses it with errors.ErrUnsupported)",
		e.b, strings.Join(names, ", "))
	return true
}

// lateAttempts is how many times Run tries a real-clock case whose steps
// came late (a loaded machine: each try has fresh keys, and each checks
// everything the first does).
const lateAttempts = 5

// late is panicked by env.before with a real clock when a step was
// decided after the instant it needed; runCase recovers it.
type late struct{ msg string }

// runCase runs c once on a fresh env. It returns why, if the attempt was
// abandoned because a step was late for its real-clock window.
func runCase(t *testing.T, h *Harness, c testCase, attempt int) (why string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			l, ok := r.(late)
			if !ok {
				panic(r)
			}
			why = l.msg
		}
	}()
	e := newEnv(t, h)
	// A retry after a late step stretches the real-clock windows of the
	// cases that scale with e.w() (transitions): 1×, 2×, then 4×.
	e.slow = time.Duration(1) << min(attempt-1, 2)
	c.run(e)
	return ""
}

type group struct {
	name   string
	serial bool // never parallel (the concurrency cases load the machine)
	cases  []testCase
}

type testCase struct {
	name     string
	needs    feature
	fakeOnly bool
	run      func(e *env)
}

// NewTag returns a random hash tag for a test's keys.
func NewTag() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dim is the dimension every rule of the suite is keyed by.
const dim = "s"

// env is one subtest's backend, Limiter, subject and clock.
type env struct {
	t        *testing.T
	h        *Harness
	b        driver.Backend
	lim      *sdk.Limiter
	fake     *fakeclock.Clock
	tol      time.Duration
	tag      string
	trailMax int
	trailTTL time.Duration
	clockP   *sdk.Policy
	slow     time.Duration // real clock only: e.w()'s multiplier (runCase)
}

func newEnv(t *testing.T, h *Harness) *env {
	t.Helper()
	tag := NewTag()
	b := h.NewBackend(t)
	e := &env{
		t: t, h: h, b: b, fake: h.Clock, tol: h.Tolerance,
		lim: sdk.New(b, limiterOptions(h, tag)...),
		tag: tag, trailMax: 20, trailTTL: time.Hour, slow: 1,
	}
	p, err := sdk.NewPolicy("clock", []sdk.Rule{sdk.FixedWindow("clock", driver.MaxLimit, time.Second).By(dim)}, sdk.WithTrail(0, 0))
	if err != nil {
		t.Fatalf("NewPolicy(clock) = %v", err)
	}
	e.clockP = p
	if e.fake != nil {
		if got, want := e.readClock(), e.fake.Now(); !near(got, want, e.tol) {
			t.Fatalf("Harness.Clock: the backend's Decision.At = %v, want the clock's %v (does NewBackend read Clock.Now?)", got, want)
		}
	}
	return e
}

// limiterOptions are the options of a subtest's Limiter: its key prefix
// and, with a fake clock, that clock (a backend that is not
// driver.Clocked reads it too: the Limiter's clock must agree with the
// backend's, which quiet hours need).
func limiterOptions(h *Harness, tag string) []sdk.Option {
	opts := []sdk.Option{sdk.WithPrefix("ct-" + tag)}
	if h.Clock != nil {
		opts = append(opts, sdk.WithClock(h.Clock))
	}
	return opts
}

// subject is the test's subject; sub, if given, names another one (its
// own hash tag, perhaps on another cluster node).
func (e *env) subject(sub ...string) sdk.Subject {
	v := e.tag
	if len(sub) > 0 {
		v += "-" + sub[0]
	}
	return sdk.Subject{dim: v}
}

// pick returns fake with a fake clock, real with a real one.
func (e *env) pick(fake, real time.Duration) time.Duration {
	if e.fake != nil {
		return fake
	}
	return real
}

func (e *env) fixed(name string, limit int64, w time.Duration) sdk.Rule {
	return sdk.FixedWindow(name, limit, w).By(dim)
}

func (e *env) sliding(name string, limit int64, w time.Duration, cells int) sdk.Rule {
	return sdk.SlidingWindow(name, limit, w).WithSubWindows(cells).By(dim)
}

// cellScale is what the cell cases (a SlidingWindow rule counting in
// cells) multiply their limits and costs by: a sliding window whose limit
// is at most driver.LogLine is an exact log (the log cases hold it to that).
const cellScale = driver.LogLine + 1

// cells is a SlidingWindow rule counting in cells: limit*cellScale.
func (e *env) cells(name string, limit int64, w time.Duration, cells int) sdk.Rule {
	return e.sliding(name, limit*cellScale, w, cells)
}

// scaled returns steps for cells rules: every cost, used and limit times
// cellScale.
func scaled(steps []step) []step {
	out := make([]step, len(steps))
	for i, s := range steps {
		s.cost = max(s.cost, 1) * cellScale
		rules := make([]ruleAt, len(s.want.rules))
		for j, r := range s.want.rules {
			r.used, r.limit = r.used*cellScale, r.limit*cellScale
			rules[j] = r
		}
		if s.want.rules != nil {
			s.want.rules = rules
		}
		if s.want.used != nil {
			used := make([]int64, len(s.want.used))
			for j, u := range s.want.used {
				used[j] = u * cellScale
			}
			s.want.used = used
		}
		out[i] = s
	}
	return out
}

func (e *env) log(name string, limit int64, w time.Duration) sdk.Rule {
	return sdk.SlidingLog(name, limit, w).By(dim)
}

func (e *env) gcra(name string, limit int64, per time.Duration, burst int64) sdk.Rule {
	return sdk.GCRA(name, limit, per, burst).By(dim)
}

func (e *env) calendar(name string, limit int64, unit driver.CalendarUnit, loc *time.Location) sdk.Rule {
	return sdk.Calendar(name, limit, unit, loc).By(dim)
}

// policy returns the policy "p" of rules with the test's trail settings.
// Policies of the same name share the state of the rules they share (a
// rule's key depends on the policy's name and the rule's identity, not on
// the other rules), so a case asks for any subset of its rules.
func (e *env) policy(rules ...sdk.Rule) *sdk.Policy {
	e.t.Helper()
	p, err := sdk.NewPolicy("p", rules, sdk.WithTrail(e.trailMax, e.trailTTL))
	if err != nil {
		e.t.Fatalf("NewPolicy(p) = %v", err)
	}
	return p
}

func names(rules []sdk.Rule) string {
	s := make([]string, len(rules))
	for i, r := range rules {
		s[i] = r.Name
	}
	return strings.Join(s, "+")
}

// shaped fails the test unless d (with err) is a decision for rules: no
// error, one rule decision per rule, in order, at the backend's clock.
func (e *env) shaped(label string, rules []sdk.Rule, d sdk.Decision, err error) sdk.Decision {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s = error %v, want a decision", label, err)
	}
	if len(d.Rules) != len(rules) {
		e.t.Fatalf("%s = %d rule decisions, want %d", label, len(d.Rules), len(rules))
	}
	for i, r := range rules {
		if d.Rules[i].Rule != r.Name {
			e.t.Fatalf("%s rule %d = %q, want %q (policy order)", label, i, d.Rules[i].Rule, r.Name)
		}
	}
	if d.At.IsZero() || d.Degraded {
		e.t.Fatalf("%s: At %v, Degraded %t, want the backend's clock and a real decision", label, d.At, d.Degraded)
	}
	return d
}

func (e *env) takeAttempt(a sdk.Attempt, rules ...sdk.Rule) sdk.Decision {
	e.t.Helper()
	d, err := e.lim.Take(bg(), e.policy(rules...), a)
	return e.shaped(fmt.Sprintf("Take(%s, cost %d)", names(rules), max(a.Cost, 1)), rules, d, err)
}

func (e *env) take(cost int64, rules ...sdk.Rule) sdk.Decision {
	e.t.Helper()
	return e.takeAttempt(sdk.Attempt{Subject: e.subject(), Cost: cost}, rules...)
}

func (e *env) peek(cost int64, rules ...sdk.Rule) sdk.Decision {
	e.t.Helper()
	return e.peekAttempt(sdk.Attempt{Subject: e.subject(), Cost: cost}, rules...)
}

func (e *env) peekAttempt(a sdk.Attempt, rules ...sdk.Rule) sdk.Decision {
	e.t.Helper()
	d, err := e.lim.Peek(bg(), e.policy(rules...), a)
	return e.shaped(fmt.Sprintf("Peek(%s, cost %d)", names(rules), max(a.Cost, 1)), rules, d, err)
}

// inspect inspects the subject under the policy of rules; it returns the
// inspection as a decision (allowed iff every rule allows a unit) and the
// denials.
func (e *env) inspect(rules ...sdk.Rule) (sdk.Decision, []sdk.Denial) {
	e.t.Helper()
	in, err := e.lim.Admin().Inspect(bg(), e.policy(rules...), e.subject())
	label := fmt.Sprintf("Inspect(%s)", names(rules))
	if err != nil {
		e.t.Fatalf("%s = error %v, want an inspection", label, err)
	}
	if in.Policy != "p" || len(in.Skipped) != 0 {
		e.t.Fatalf("%s = policy %q, skipped %v, want p and none skipped", label, in.Policy, in.Skipped)
	}
	// An inspection has no summary: make one (as the sdk summarizes a
	// decision) so that it reads like a peek's decision.
	d := sdk.Decision{Allowed: true, Policy: in.Policy, At: in.At, Rules: in.Rules}
	for _, r := range in.Rules {
		d.Allowed = d.Allowed && r.Allowed
		d.CostTooHigh = d.CostTooHigh || r.CostTooHigh
		if !r.Allowed {
			d.Denied = append(d.Denied, r.Rule)
			d.RetryAfter = max(d.RetryAfter, r.RetryAfter)
		}
	}
	return e.shaped(label, rules, d, nil), in.Denials
}

func (e *env) reserveAttempt(a sdk.Attempt, ttl time.Duration, rules ...sdk.Rule) (sdk.Decision, *sdk.Reservation) {
	e.t.Helper()
	d, r, err := e.lim.Reserve(bg(), e.policy(rules...), a, ttl)
	d = e.shaped(fmt.Sprintf("Reserve(%s, cost %d)", names(rules), max(a.Cost, 1)), rules, d, err)
	if d.Allowed != (r != nil) {
		e.t.Fatalf("Reserve(%s) = allowed %t with reservation %v, want a reservation iff allowed", names(rules), d.Allowed, r)
	}
	return d, r
}

func (e *env) reserve(ttl time.Duration, cost int64, rules ...sdk.Rule) (sdk.Decision, *sdk.Reservation) {
	e.t.Helper()
	return e.reserveAttempt(sdk.Attempt{Subject: e.subject(), Cost: cost}, ttl, rules...)
}

// reserver returns the backend's driver.Reserver, for the contract points
// the sdk cannot reach (settling an id it never made).
func (e *env) reserver() driver.Reserver {
	e.t.Helper()
	rv, ok := e.b.(driver.Reserver)
	if !ok {
		e.t.Fatalf("%T is not a driver.Reserver", e.b)
	}
	return rv
}

// reservationKey is the key of the subject's reservations under policy p
// (KeyLayout.Reservations).
func (e *env) reservationKey(rules ...sdk.Rule) string {
	e.t.Helper()
	k := e.lim.Admin().KeyLayout(e.policy(rules...), e.subject()).Reservations
	if k == "" {
		e.t.Fatalf("KeyLayout(p) = none")
	}
	return k
}

// now reads the backend's clock: the fake clock, or a peek's Decision.At.
func (e *env) now() time.Time {
	e.t.Helper()
	if e.fake != nil {
		return e.fake.Now()
	}
	return e.readClock()
}

// readClock asks the backend for its clock: a peek (a take where the
// backend has no Peeker) of the scratch policy "clock", whose keys share
// the test's hash tag (so the same server) but not its policy's state.
func (e *env) readClock() time.Time {
	e.t.Helper()
	a := sdk.Attempt{Subject: e.subject()}
	var d sdk.Decision
	var err error
	if _, ok := e.b.(driver.Peeker); ok {
		d, err = e.lim.Peek(bg(), e.clockP, a)
	} else {
		d, err = e.lim.Take(bg(), e.clockP, a)
	}
	if err != nil || d.At.IsZero() {
		e.t.Fatalf("reading the backend's clock: %v (At %v)", err, d.At)
	}
	return d.At
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

// advance moves the backend's clock d on from now.
func (e *env) advance(d time.Duration) time.Time {
	e.t.Helper()
	if e.fake != nil {
		e.fake.Advance(d)
		return e.fake.Now()
	}
	return e.advanceTo(e.now().Add(d))
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

// before abandons the attempt when d was decided at or after deadline:
// the step was late for its real-clock window. Run retries the case with
// fresh keys, up to lateAttempts times. With a fake clock it is a bug in the case.
func (e *env) before(d sdk.Decision, deadline time.Time, what string) {
	e.t.Helper()
	if d.At.Before(deadline) {
		return
	}
	msg := fmt.Sprintf("%s was decided at %v, not before %v", what, d.At, deadline)
	if e.fake != nil {
		e.t.Fatalf("timing: %s (a fake clock never moves by itself: a bug in the case)", msg)
	}
	panic(late{msg})
}

// stillBefore is before for what returns no Decision: with a real clock,
// the backend's clock must still read before deadline after the calls
// just made (else they may have seen the instant pass: a late attempt).
func (e *env) stillBefore(deadline time.Time, what string) {
	e.t.Helper()
	if e.fake != nil {
		return
	}
	if now := e.readClock(); !now.Before(deadline) {
		panic(late{fmt.Sprintf("%s ended at %v, not before %v", what, now, deadline)})
	}
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

// want builds an expected rule decision: Remaining follows from limit and
// used; RetryAfter is zero when allowed.
func want(allowed bool, used, limit int64, resetAfter, retryAfter time.Duration) sdk.RuleDecision {
	return sdk.RuleDecision{Allowed: allowed, Used: used, Limit: limit, Remaining: max(0, limit-used),
		ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// tooHigh builds the expected result of a cost that can never fit.
func tooHigh(used, limit int64, resetAfter time.Duration) sdk.RuleDecision {
	r := want(false, used, limit, resetAfter, 0)
	r.CostTooHigh = true
	return r
}

func fmtRule(r sdk.RuleDecision) string {
	s := fmt.Sprintf("{allowed:%t used:%d limit:%d remaining:%d reset:%v retry:%v", r.Allowed, r.Used, r.Limit,
		r.Remaining, r.ResetAfter, r.RetryAfter)
	if r.CostTooHigh {
		s += " costTooHigh"
	}
	return s + "}"
}

func fmtRules(rs []sdk.RuleDecision) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmtRule(r)
	}
	return strings.Join(s, " ")
}

// sameRule reports whether g matches w (durations within tol; the name,
// algorithm and strategy are not compared).
func sameRule(g, w sdk.RuleDecision, tol time.Duration) bool {
	return g.Allowed == w.Allowed && g.Used == w.Used && g.Limit == w.Limit && g.Remaining == w.Remaining &&
		g.CostTooHigh == w.CostTooHigh && nearDur(g.ResetAfter, w.ResetAfter, tol) &&
		nearDur(g.RetryAfter, w.RetryAfter, tol)
}

// expect checks d.Allowed and each rule's decision (durations within the
// tolerance), and the sdk's summary of them (Denied, RetryAfter,
// CostTooHigh).
func (e *env) expect(label string, d sdk.Decision, allowed bool, wants ...sdk.RuleDecision) {
	e.t.Helper()
	if d.Allowed != allowed {
		e.t.Errorf("%s: Allowed = %t, want %t (rules %s)", label, d.Allowed, allowed, fmtRules(d.Rules))
	}
	for i, w := range wants {
		if g := d.Rules[i]; !sameRule(g, w, e.tol) {
			e.t.Errorf("%s rule %d = %s, want %s", label, i, fmtRule(g), fmtRule(w))
		}
	}
	e.summary(label, d)
}

// summary checks the sdk's summary of d's rules.
func (e *env) summary(label string, d sdk.Decision) {
	e.t.Helper()
	var denied []string
	var retry time.Duration
	tooHigh := false
	for _, r := range d.Rules {
		tooHigh = tooHigh || r.CostTooHigh
		if !r.Allowed {
			denied = append(denied, r.Rule)
			retry = max(retry, r.RetryAfter)
		}
	}
	if d.Allowed {
		retry = 0
	}
	if strings.Join(d.Denied, ",") != strings.Join(denied, ",") || d.CostTooHigh != tooHigh || d.RetryAfter != retry {
		e.t.Errorf("%s: Denied %v, CostTooHigh %t, RetryAfter %v, want %v, %t, %v (from its rules)", label,
			d.Denied, d.CostTooHigh, d.RetryAfter, denied, tooHigh, retry)
	}
}

// used checks only the Used count of each rule.
func (e *env) used(label string, d sdk.Decision, used ...int64) {
	e.t.Helper()
	for i, u := range used {
		if d.Rules[i].Used != u {
			e.t.Errorf("%s rule %d = %s, want used %d", label, i, fmtRule(d.Rules[i]), u)
		}
	}
}

func bg() context.Context { return context.Background() }
