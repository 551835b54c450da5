package conformance

import (
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// The batch cases hold a backend to driver.Batcher: one result per
// request in input order, each request atomic by itself, requests on one
// hash tag carried out in order, failures reported per request.

func (e *env) batcher() driver.Batcher {
	e.t.Helper()
	bt, ok := e.b.(driver.Batcher)
	if !ok {
		e.t.Fatalf("Harness.Features has Batch but %T is not a driver.Batcher", e.b)
	}
	return bt
}

// batch sends reqs in one TakeBatch and checks the number of results.
func (e *env) batch(reqs ...driver.Request) []driver.BatchResult {
	e.t.Helper()
	out := e.batcher().TakeBatch(bg(), reqs)
	if len(out) != len(reqs) {
		e.t.Fatalf("TakeBatch(%d requests) = %d results, want %d", len(reqs), len(out), len(reqs))
	}
	return out
}

// ok returns br's result, failing the test on an error or a malformed
// result.
func (e *env) ok(label string, br driver.BatchResult, req driver.Request) driver.Result {
	e.t.Helper()
	return e.shaped(label, req, br.Result, br.Err)
}

// inTag returns req with every key moved to hash tag e.tag+"-"+sub: the
// keys of another subject, perhaps on another cluster node.
func (e *env) inTag(sub string, req driver.Request) driver.Request {
	tag := e.tag + "-" + sub
	move := func(k string) string {
		if k == "" {
			return ""
		}
		return "ct:{" + tag + "}" + k[len("ct:{"+e.tag+"}"):]
	}
	rules := make([]driver.Rule, len(req.Rules))
	for i, r := range req.Rules {
		r.Key = move(r.Key)
		rules[i] = r
	}
	req.Rules = rules
	req.TrailKey, req.HoldKey, req.IdemKey = move(req.TrailKey), move(req.HoldKey), move(req.IdemKey)
	return req
}

// batchOrder: eight subjects (eight hash tags) with 0..3 units used of 3
// each; one batch takes a unit from each and peeks the first again.
func batchOrder(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	if out := e.batcher().TakeBatch(bg(), nil); len(out) != 0 {
		e.t.Errorf("TakeBatch(no requests) = %d results, want 0", len(out))
	}
	f := e.fixed("f", 3, w)
	var reqs []driver.Request
	for i := range 8 {
		sub := fmt.Sprint(i)
		if pre := int64(i % 4); pre > 0 {
			e.do(e.inTag(sub, e.request(driver.OpTake, pre, f)))
		}
		reqs = append(reqs, e.inTag(sub, e.request(driver.OpTake, 1, f)))
	}
	reqs = append(reqs, e.inTag("0", e.request(driver.OpPeek, 1, f)))
	out := e.batch(reqs...)
	for i := range 8 {
		label := fmt.Sprintf("TakeBatch entry %d (subject %d, %d of 3 used before)", i, i, i%4)
		res := e.ok(label, out[i], reqs[i])
		allowed := i%4 < 3
		if res.Allowed != allowed {
			e.t.Errorf("%s: Allowed = %t, want %t", label, res.Allowed, allowed)
		}
		e.used(label, res, min(int64(i%4)+1, 3))
	}
	e.used("TakeBatch entry 8 (a peek of subject 0, after its take)", e.ok("TakeBatch entry 8", out[8], reqs[8]), 1)
}

// batchSameSubject: requests on one subject in one batch are decided in
// order, each all-or-nothing.
func batchSameSubject(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 4, w)
	g := e.log("g", 100, w)
	reqs := []driver.Request{
		e.request(driver.OpTake, 3, f, g),
		e.request(driver.OpTake, 3, f, g),
		e.request(driver.OpTake, 1, f, g),
		e.request(driver.OpTake, 1, f, g),
		e.request(driver.OpPeek, 1, f, g),
	}
	out := e.batch(reqs...)
	wants := []struct {
		allowed bool
		f, g    int64
	}{{true, 3, 3}, {false, 3, 3}, {true, 4, 4}, {false, 4, 4}, {false, 4, 4}}
	for i, w := range wants {
		label := fmt.Sprintf("TakeBatch entry %d (%s)", i, opName(reqs[i]))
		res := e.ok(label, out[i], reqs[i])
		if res.Allowed != w.allowed {
			e.t.Errorf("%s: Allowed = %t, want %t", label, res.Allowed, w.allowed)
		}
		e.used(label, res, w.f, w.g)
	}
	e.used("Peek(f+g) after the batch (a denied request took nothing from g)", e.peek(1, f, g), 4, 4)
}

// batchErrors: an invalid request fails alone.
func batchErrors(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 5, w)
	bad := e.inTag("bad", e.request(driver.OpTake, 1, f))
	bad.Cost = 0
	reqs := []driver.Request{
		e.request(driver.OpTake, 1, f),
		bad,
		e.inTag("other", e.request(driver.OpTake, 2, f)),
		e.request(driver.OpTake, 1, f),
	}
	out := e.batch(reqs...)
	if out[1].Err == nil {
		e.t.Errorf("TakeBatch entry 1 (cost 0) = %+v, want an error", out[1].Result)
	}
	e.used("TakeBatch entry 0", e.ok("TakeBatch entry 0", out[0], reqs[0]), 1)
	e.used("TakeBatch entry 2", e.ok("TakeBatch entry 2", out[2], reqs[2]), 2)
	e.used("TakeBatch entry 3", e.ok("TakeBatch entry 3", out[3], reqs[3]), 2)
	e.used("Peek of the invalid request's subject", e.do(e.inTag("bad", e.request(driver.OpPeek, 1, f))), 0)
}

// batchIdem: idempotency keys work within and across batches.
func batchIdem(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	f := e.fixed("f", 10, w)
	a := e.idem(e.request(driver.OpTake, 1, f), "a", time.Hour)
	reqs := []driver.Request{
		a,
		a,                              // the same attempt again, in the same batch
		e.inTag("b", a),                // the same key for another subject: another attempt
		e.request(driver.OpTake, 1, f), // no key
	}
	check := func(round string, out []driver.BatchResult) []driver.Result {
		e.t.Helper()
		res := make([]driver.Result, len(out))
		for i := range out {
			res[i] = e.ok(fmt.Sprintf("%s entry %d", round, i), out[i], reqs[i])
		}
		return res
	}
	r1 := check("first batch", e.batch(reqs...))
	e.fresh("first batch entry 0", r1[0])
	e.used("first batch entry 0", r1[0], 1)
	e.sameResult("first batch entry 1 (key a again)", r1[1], r1[0])
	e.fresh("first batch entry 2 (key a, subject b)", r1[2])
	e.used("first batch entry 2", r1[2], 1)
	e.fresh("first batch entry 3 (no key)", r1[3])
	e.used("first batch entry 3", r1[3], 2)

	r2 := check("retried batch", e.batch(reqs...))
	e.sameResult("retried batch entry 0", r2[0], r1[0])
	e.sameResult("retried batch entry 1", r2[1], r1[0])
	e.sameResult("retried batch entry 2", r2[2], r1[2])
	e.fresh("retried batch entry 3 (no key)", r2[3])
	e.used("retried batch entry 3", r2[3], 3)
	e.used("Peek(f)", e.peek(1, f), 3)
}
