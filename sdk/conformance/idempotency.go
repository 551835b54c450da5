package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// The idempotency cases hold a backend to driver.Request.IdemKey: the
// first request with a key decides and stores its Result; a later one
// with the same key, until IdemTTL has passed, gets that Result back with
// Replayed set, consuming nothing, writing no trail entry and creating no
// hold.

// idem returns req made idempotent under key name (in the test's hash
// tag) for ttl.
func (e *env) idem(req driver.Request, name string, ttl time.Duration) driver.Request {
	e.t.Helper()
	if ib, ok := e.b.(driver.Idempotent); !ok || !ib.SupportsIdemKey() {
		e.t.Fatalf("Harness.Features has Idempotency but %T is not a driver.Idempotent reporting true", e.b)
	}
	req.IdemKey = e.key("!i:" + name)
	req.IdemTTL = ttl
	return req
}

// sameResult checks that got replays first: Replayed set, and otherwise
// first's answer (Now, Allowed, HoldID, every rule).
func (e *env) sameResult(label string, got, first driver.Result) {
	e.t.Helper()
	if !got.Replayed {
		e.t.Errorf("%s: Replayed = false, want true (a second request with the same IdemKey)", label)
	}
	if !near(got.Now, first.Now, e.tol) {
		e.t.Errorf("%s: Now = %v, want the first decision's %v", label, got.Now, first.Now)
	}
	if got.Allowed != first.Allowed || got.HoldID != first.HoldID || got.NonAtomic != first.NonAtomic {
		e.t.Errorf("%s: Allowed %t HoldID %q NonAtomic %t, want the first decision's %t %q %t", label,
			got.Allowed, got.HoldID, got.NonAtomic, first.Allowed, first.HoldID, first.NonAtomic)
	}
	if len(got.Rules) != len(first.Rules) {
		e.t.Fatalf("%s: %d rule results, want %d", label, len(got.Rules), len(first.Rules))
	}
	e.expect(label, got, first.Allowed, first.Rules...)
}

func (e *env) fresh(label string, res driver.Result) {
	e.t.Helper()
	if res.Replayed {
		e.t.Errorf("%s: Replayed = true, want false (no earlier request with this IdemKey is live)", label)
	}
}

func idemReplay(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := e.fourRules(5, w)
	req := e.idem(e.request(driver.OpTake, 2, rules...), "a", time.Hour)
	first := e.do(req)
	e.fresh("Take(all, cost 2, key a)", first)
	if !first.Allowed || first.HoldID != "" {
		e.t.Fatalf("Take(all, cost 2, key a) = allowed %t, HoldID %q, want allowed and no hold", first.Allowed, first.HoldID)
	}
	e.used("Take(all, cost 2, key a)", first, 2, 2, 2, 2)
	if e.fake != nil {
		e.fake.Advance(time.Second)
	}
	e.sameResult("Take(all, cost 2, key a) again", e.do(req), first)
	e.used("Peek(all) after the replay (it consumed nothing)", e.peek(1, rules...), 2, 2, 2, 2)

	// The key names the attempt: a retry asking another cost still gets
	// the first decision.
	other := req
	other.Cost = 1
	e.sameResult("Take(all, cost 1, key a)", e.do(other), first)

	// Another key decides afresh.
	b := e.do(e.idem(e.request(driver.OpTake, 2, rules...), "b", time.Hour))
	e.fresh("Take(all, cost 2, key b)", b)
	e.used("Take(all, cost 2, key b)", b, 4, 4, 4, 4)
	e.used("Peek(all)", e.peek(1, rules...), 4, 4, 4, 4)
}

func idemDenied(e *env) {
	w := e.pick(time.Minute, time.Second)
	f := e.fixed("f", 1, w)
	start := e.alignTo(w, 0)
	e.before(e.take(1, f), start.Add(w), "take")
	req := e.idem(e.request(driver.OpTake, 1, f), "d", time.Hour)
	first := e.do(req)
	e.before(first, start.Add(w), "take with key d")
	e.fresh("Take(f, key d) over the limit", first)
	e.expect("Take(f, key d) over the limit", first, false, want(false, 1, 1, start.Add(w).Sub(first.Now), start.Add(w).Sub(first.Now)))
	trail := 0
	if e.h.Features&Inspect != 0 {
		trail = len(e.inspect(f).Trail)
		if trail != 1 {
			e.t.Errorf("Inspect after one denial = %d trail entries, want 1", trail)
		}
	}
	// In the next window a fresh take is admitted; the retry still gets
	// the first (denied) decision, and adds nothing to the trail.
	e.advanceTo(start.Add(w))
	e.sameResult("Take(f, key d) again in the next window", e.do(req), first)
	if e.h.Features&Inspect != 0 {
		if n := len(e.inspect(f).Trail); n != trail {
			e.t.Errorf("Inspect after a replayed denial = %d trail entries, want %d (a replay writes no trail)", n, trail)
		}
	}
	res := e.take(1, f)
	e.before(res, start.Add(2*w), "take")
	e.expect("Take(f) without a key in the next window", res, true, want(true, 1, 1, start.Add(2*w).Sub(res.Now), 0))
}

func idemReserve(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	rules := []driver.Rule{e.fixed("f", 5, w), e.log("l", 5, w)}
	req := e.idem(e.request(driver.OpReserve, 2, rules...), "r", time.Hour)
	req.HoldID, req.HoldTTL = "h1", time.Hour
	first := e.do(req)
	e.fresh("Reserve(f+l, cost 2, hold h1, key r)", first)
	if !first.Allowed || first.HoldID != "h1" {
		e.t.Fatalf("Reserve(f+l, cost 2, hold h1, key r) = allowed %t, HoldID %q, want allowed, HoldID h1", first.Allowed, first.HoldID)
	}
	// The retry names another hold id (the sdk makes one per call): it
	// gets the first hold's id back and makes no hold.
	req.HoldID = "h2"
	e.sameResult("Reserve(…, hold h2, key r)", e.do(req), first)
	e.used("Peek(f+l) after the replay", e.peek(1, rules...), 2, 2)
	if err := e.settle("h2", false); !errors.Is(err, driver.ErrHoldNotFound) {
		e.t.Errorf("Settle(h2, cancel) = %v, want ErrHoldNotFound (a replay creates no hold)", err)
	}
	if err := e.settle("h1", false); err != nil {
		e.t.Fatalf("Settle(h1, cancel) = %v, want nil", err)
	}
	e.used("Peek(f+l) after cancelling h1", e.peek(1, rules...), 0, 0)
	// The record outlives the hold: a retry still replays, consuming
	// nothing.
	req.HoldID = "h3"
	e.sameResult("Reserve(…, hold h3, key r) after the cancel", e.do(req), first)
	e.used("Peek(f+l) after the second replay", e.peek(1, rules...), 0, 0)

	// A denied reservation is replayed as denied, with no hold.
	big := e.idem(e.request(driver.OpReserve, 6, rules...), "big", time.Hour)
	big.HoldID, big.HoldTTL = "b1", time.Hour
	denied := e.do(big)
	if denied.Allowed || denied.HoldID != "" {
		e.t.Fatalf("Reserve(f+l, cost 6, key big) = allowed %t, HoldID %q, want denied, no HoldID", denied.Allowed, denied.HoldID)
	}
	big.HoldID = "b2"
	e.sameResult("Reserve(f+l, cost 6, key big) again", e.do(big), denied)
	for _, id := range []string{"b1", "b2"} {
		if err := e.settle(id, true); !errors.Is(err, driver.ErrHoldNotFound) {
			e.t.Errorf("Settle(%s) of a denied reservation = %v, want ErrHoldNotFound", id, err)
		}
	}
}

func idemExpires(e *env) {
	w := time.Hour
	ttl := e.pick(time.Minute, 300*time.Millisecond)
	e.ensureRoom(w, ttl+10*time.Second)
	f := e.fixed("f", 10, w)
	req := e.idem(e.request(driver.OpTake, 1, f), "x", ttl)
	first := e.do(req)
	e.fresh("Take(f, key x)", first)
	e.used("Take(f, key x)", first, 1)
	if e.fake != nil {
		e.advanceTo(first.Now.Add(ttl - time.Millisecond))
		e.sameResult("Take(f, key x) 1ms before IdemTTL", e.do(req), first)
	}
	e.advanceTo(first.Now.Add(ttl + e.tol + time.Millisecond))
	again := e.do(req)
	e.fresh(fmt.Sprintf("Take(f, key x) %v after the first", ttl), again)
	e.used("Take(f, key x) after IdemTTL (decided afresh)", again, 2)
	e.sameResult("Take(f, key x) once more (the new record)", e.do(req), again)
	e.used("Peek(f)", e.peek(1, f), 2)
}

func idemPeek(e *env) {
	f := e.fixed("f", 10, time.Hour)
	e.ensureRoom(time.Hour, 10*time.Second)
	res := e.do(e.idem(e.request(driver.OpPeek, 1, f), "p", time.Hour))
	e.fresh("Peek(f, key p)", res)
	e.used("Peek(f, key p)", res, 0)
	res = e.do(e.idem(e.request(driver.OpTake, 1, f), "p", time.Hour))
	e.fresh("Take(f, key p) after a peek with key p (a peek stores nothing)", res)
	e.used("Take(f, key p)", res, 1)
	res = e.do(e.idem(e.request(driver.OpPeek, 1, f), "p", time.Hour))
	e.fresh("Peek(f, key p) after the take (a peek never replays)", res)
	e.used("Peek(f, key p) after the take", res, 1)
}

func idemReset(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 10, w)
	req := e.idem(e.request(driver.OpTake, 3, f), "k", time.Hour)
	first := e.do(req)
	rs, ok := e.b.(driver.Resetter)
	if !ok {
		e.t.Fatalf("Harness.Features has Reset but %T is not a driver.Resetter", e.b)
	}
	if err := rs.Reset(bg(), e.request(driver.OpTake, 1, f)); err != nil {
		e.t.Fatalf("Reset = %v", err)
	}
	e.sameResult("Take(f, key k) after Reset (Reset keeps idempotency records)", e.do(req), first)
	e.used("Peek(f) after Reset and the replay", e.peek(1, f), 0)
}
