package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/freqcap/freqcap/sdk/driver"
)

// BatchResult is one attempt's outcome in TakeBatch or PeekBatch: its
// Decision, or the error Take (or Peek) would have returned for it alone,
// naming the operation "take batch" (or "peek batch") instead: "sdk: peek
// batch: …".
type BatchResult struct {
	Decision Decision
	Err      error
}

// TakeBatch decides many attempts under one policy in as few backend
// round trips as it can (the Redis backend sends one pipeline per
// cluster node; a backend without batches gets one call per attempt, in
// order). Each attempt is decided as Take
// would decide it alone: atomically and all-or-nothing, with its own
// idempotency key, hot-deny cache lookup and fail-open answer; there is
// no atomicity across attempts. Attempts for the same shard values are
// decided in input order, so a later one sees an earlier one's units.
//
// It returns one BatchResult per attempt, in input order. An invalid
// attempt (or policy) fails alone, in its entry's Err; so does a backend
// failure, or the whole call's failure, reported in every entry it
// concerns (fail-open policies answer those entries Degraded instead).
// The observer sees one "take" event per decided attempt, with
// Event.Batch set and the batch call's latency. WithTimeout bounds the
// whole TakeBatch call.
func (l *Limiter) TakeBatch(ctx context.Context, p *Policy, as []Attempt) []BatchResult {
	return l.batch(ctx, "take", opTake, p, as)
}

// PeekBatch is TakeBatch without consuming: each attempt as Peek (its
// IdempotencyKey is ignored; the hot-deny cache is not used). On a backend
// that cannot peek every entry's error wraps errors.ErrUnsupported.
func (l *Limiter) PeekBatch(ctx context.Context, p *Policy, as []Attempt) []BatchResult {
	return l.batch(ctx, "peek", opPeek, p, as)
}

func (l *Limiter) batch(ctx context.Context, op string, dop opKind, p *Policy, as []Attempt) []BatchResult {
	out := make([]BatchResult, len(as))
	all := make([]call, len(as))
	calls := make([]*call, 0, len(as))
	idx := make([]int, 0, len(as))
	for i, a := range as {
		a, err := l.identify(ctx, op+" batch", p, a)
		if err != nil {
			out[i].Err = err
			continue
		}
		c := &all[i]
		if err := l.prepare(c, op, true, dop, p, a, 0); err != nil {
			out[i].Err = err
			continue
		}
		c.batch = len(as)
		if d, ok := l.cached(c); ok {
			out[i].Decision = d
			continue
		}
		calls = append(calls, c)
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return out
	}
	answers := l.sendBatch(ctx, dop, calls)
	for k, c := range calls {
		out[idx[k]].Decision, out[idx[k]].Err = l.finish(c, answers[k])
	}
	return out
}

// sendBatch asks the backend for the calls' requests (all of one kind,
// opTake or opPeek): in one TakeBatch or PeekBatch call if it is a
// driver.Batcher, else one Take or Peek call each, in order.
func (l *Limiter) sendBatch(ctx context.Context, kind opKind, calls []*call) []answer {
	out := make([]answer, len(calls))
	bt, ok := l.b.(driver.Batcher)
	if !ok {
		for i, c := range calls {
			out[i] = l.send(ctx, kind, c.req)
		}
		return out
	}
	reqs := make([]driver.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	start := l.now()
	var brs []driver.BatchResult
	if kind == opPeek {
		brs = bt.PeekBatch(ctx, reqs)
	} else {
		brs = bt.TakeBatch(ctx, reqs)
	}
	lat := l.now().Sub(start)
	var all error
	if len(brs) != len(reqs) {
		all = fmt.Errorf("backend answered %d results for %d requests", len(brs), len(reqs))
	}
	for i := range out {
		a := answer{start: start, lat: lat, err: all}
		if all == nil {
			a.r, a.err = brs[i].Result, brs[i].Err
			if a.err == nil {
				a.err = checkResult(reqs[i], a.r)
			}
			if a.err != nil {
				a.r = driver.Result{}
			}
		}
		out[i] = a
	}
	return out
}

// errNilBackend is what every method of a Limiter without a backend (the
// zero Limiter, or New(nil)) answers, whatever the policy's failure mode:
// it is the caller's mistake, not a backend failure fail-open may hide.
var errNilBackend = errors.New("no backend (the zero Limiter, or New(nil)): create the Limiter with sdk.New and a backend")
