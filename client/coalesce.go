package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
)

// Coalesce says how a Client coalesces the concurrent Take, Allow and
// Peek calls of one process into TakeBatch and PeekBatch RPCs, as the
// Redis backend coalesces concurrent decisions into scripts
// (redis.Options.Coalesce).
//
// A call that finds no RPC of its policy and operation in flight and
// nobody queued goes out at once, alone, as the Take or Peek RPC it
// would be without coalescing: a lone caller pays nothing. Calls
// arriving while one is in flight queue; up to InFlight RPCs per policy
// and operation go out at once, each taking up to MaxBatch queued calls
// (a batch of one goes as Take or Peek, more as TakeBatch or
// PeekBatch). Calls of different policies, and takes and peeks, never
// share an RPC; Reserve, the batches the caller makes (TakeBatch,
// PeekBatch) and the administrative calls are always RPCs of their own.
//
// Each call keeps what it would have alone. Its idempotency key (its
// own, or the one Retry generates) goes in its entry of the batch. Its
// errors are its own: an entry the server refused is that call's error,
// a failure of the whole RPC every call's in it, and each call is re-sent
// (Retry) on its own schedule, queueing again, with the same key. Its
// deadline is its own: a call never waits past it, queued or sent (it
// then returns deadline_exceeded, as a call whose reply did not come in
// time: one already sent may still be decided, and a re-send with the
// same key gets that decision). A batch RPC carries the latest deadline
// of its calls (none if one of them has none), so that no call's attempt
// fails for another's shorter deadline, and is cancelled once every call
// in it has given up.
//
// The RPCs go from goroutines the Client starts, one per RPC in flight;
// a batch RPC carries the context values of its first call.
type Coalesce struct {
	// Off sends every call in an RPC of its own.
	Off bool
	// MaxBatch bounds the calls in one RPC (0: DefaultCoalesce's). Keep
	// it within serve's --max-batch (default 1000).
	MaxBatch int
	// InFlight bounds the coalesced RPCs of one policy and operation in
	// flight at once (0: DefaultCoalesce's); a lone call's own RPC counts.
	InFlight int
}

// DefaultCoalesce is Options.Coalesce's default: batches of up to 128
// calls (the Redis backend's attempts per script), 2 RPCs in flight per
// policy and operation, so that two concurrent callers are sent at once,
// side by side, as without coalescing. Measured with 64 concurrent
// callers through serve (`freqcap bench -serve`) it decided about 3
// times as many per second as one RPC per call, and a lone caller sends
// the same Take at once, at the same latency (docs/SERVE.md, "A Go
// service").
var DefaultCoalesce = Coalesce{MaxBatch: 128, InFlight: 2}

// withDefaults fills o's zero fields from DefaultCoalesce.
func (o Coalesce) withDefaults() Coalesce {
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultCoalesce.MaxBatch
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultCoalesce.InFlight
	}
	return o
}

// op is a coalesced operation: its RPC for one attempt, and for many.
type op struct {
	one  func(c *Client, ctx context.Context, policy string, a sdk.Attempt) (sdk.Decision, error)
	many func(c *Client, ctx context.Context, policy string, as []*freqcapv1.Attempt) ([]*freqcapv1.BatchResult, error)
}

var (
	opTake = &op{one: (*Client).takeOne, many: (*Client).takeMany}
	opPeek = &op{one: (*Client).peekOne, many: (*Client).peekMany}
)

func (c *Client) takeOne(ctx context.Context, policy string, a sdk.Attempt) (sdk.Decision, error) {
	var w freqcapv1.Attempt
	protoconv.SetAttempt(&w, a)
	res, err := c.rpc().Take(ctx, connect.NewRequest(&freqcapv1.TakeRequest{
		Policy: policy, Subject: w.Subject, Cost: w.Cost, IdempotencyKey: w.IdempotencyKey, IdempotencyTtl: w.IdempotencyTtl,
		Zone: w.Zone, Class: w.Class, Priority: w.Priority, Identity: w.Identity,
	}))
	if err != nil {
		return sdk.Decision{}, err
	}
	return protoconv.FromDecision(res.Msg.GetDecision()), nil
}

func (c *Client) takeMany(ctx context.Context, policy string, as []*freqcapv1.Attempt) ([]*freqcapv1.BatchResult, error) {
	res, err := c.rpc().TakeBatch(ctx, connect.NewRequest(&freqcapv1.TakeBatchRequest{Policy: policy, Attempts: as}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResults(), nil
}

func (c *Client) peekOne(ctx context.Context, policy string, a sdk.Attempt) (sdk.Decision, error) {
	var w freqcapv1.Attempt
	protoconv.SetAttempt(&w, a)
	res, err := c.rpc().Peek(ctx, connect.NewRequest(&freqcapv1.PeekRequest{Policy: policy, Subject: w.Subject, Cost: w.Cost,
		Zone: w.Zone, Class: w.Class, Priority: w.Priority, Identity: w.Identity}))
	if err != nil {
		return sdk.Decision{}, err
	}
	return protoconv.FromDecision(res.Msg.GetDecision()), nil
}

func (c *Client) peekMany(ctx context.Context, policy string, as []*freqcapv1.Attempt) ([]*freqcapv1.BatchResult, error) {
	res, err := c.rpc().PeekBatch(ctx, connect.NewRequest(&freqcapv1.PeekBatchRequest{Policy: policy, Attempts: as}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResults(), nil
}

// entry reads one entry of a batch's reply: its decision, or the
// server's error for it.
func entry(r *freqcapv1.BatchResult) (sdk.Decision, error) {
	e := r.GetError()
	if e == nil {
		return protoconv.FromDecision(r.GetDecision()), nil
	}
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	return sdk.Decision{}, protoconv.NewError(code, e.GetReason(), e.GetMessage())
}

// miscount is the error of every entry of a batch whose reply has the
// wrong number of results.
func miscount(got, want int) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("the server answered %d results for %d attempts", got, want))
}

// decide carries out a (one send of it: Retry's re-sends are the
// caller's) under policy with o, coalesced unless c's Coalesce is off.
// answered says the error is the server's answer for a alone (a batch
// entry's), never the transport's.
func (c *Client) decide(ctx context.Context, o *op, policy string, a sdk.Attempt) (d sdk.Decision, answered bool, err error) {
	if c.coalesce.Off {
		d, err = o.one(c, ctx, policy, a)
		return d, false, err
	}
	k := queueKey{o, policy}
	q, ok := c.queues.Load(k)
	if !ok {
		q, _ = c.queues.LoadOrStore(k, &coalescer{c: c, op: o, policy: policy})
	}
	return q.(*coalescer).do(ctx, a)
}

type queueKey struct {
	op     *op
	policy string
}

// coalescer sends the concurrent calls of one operation under one policy
// (Coalesce's doc), as backends/redis's coalescer sends scripts: a call
// that finds nothing in flight and nobody queued goes alone, in its own
// goroutine, holding a slot (there are Coalesce.InFlight); the others
// queue. A call that queues while a slot is free takes it for a sender
// goroutine (run), which yields the processor once before it takes its
// batch, so that the callers woken by the same reply (they return at
// once, and call again) queue behind it and go in its RPC, instead of
// the first of them going alone and the rest waiting for a slot. A
// sender keeps its slot while calls queue, taking up to MaxBatch of
// them per RPC from the head of the queue; a lone call's slot, when the
// call is answered, goes to a new sender if calls queue. Callers wait
// for their outcome or their context, whichever comes first.
type coalescer struct {
	c      *Client
	op     *op
	policy string

	mu       sync.Mutex
	queue    []*waiter // not yet sent, in arrival order
	inflight int       // slots held: by lone calls and senders
}

// waitState is where a waiter's attempt is.
type waitState uint8

const (
	queued waitState = iota // in coalescer.queue
	sent                    // taken by a sender
	done                    // outcome set
)

// waiter is one call waiting in a coalescer.
type waiter struct {
	ctx  context.Context // the send's
	a    sdk.Attempt
	wake chan struct{} // capacity 1: signalled once, when done
	// Under coalescer.mu:
	state    waitState
	f        *flight // the batch RPC it went in (nil for a batch of one)
	d        sdk.Decision
	answered bool
	err      error
}

// flight is one batch RPC in flight. Under coalescer.mu.
type flight struct {
	left   int                // calls still waiting for its reply
	cancel context.CancelFunc // its context's
}

// do carries out a, coalesced with the concurrent calls (decide).
func (q *coalescer) do(ctx context.Context, a sdk.Attempt) (sdk.Decision, bool, error) {
	if err := ctx.Err(); err != nil {
		return sdk.Decision{}, false, ctxError(err)
	}
	q.mu.Lock()
	if q.inflight == 0 && len(q.queue) == 0 {
		return q.alone(ctx, a)
	}
	w := &waiter{ctx: ctx, a: a, wake: make(chan struct{}, 1)}
	q.queue = append(q.queue, w)
	if q.inflight < q.c.coalesce.InFlight {
		q.inflight++
		go q.run()
	}
	q.mu.Unlock()
	select {
	case <-w.wake: // the outcome, set before the signal
		return w.d, w.answered, w.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch w.state {
	case done: // the outcome arrived meanwhile: return it
		return w.d, w.answered, w.err
	case queued: // not sent: nothing consumed
		q.remove(w)
	case sent: // it may be decided (as after a lost reply)
		if f := w.f; f != nil {
			if f.left--; f.left == 0 {
				f.cancel() // nobody waits for the reply
			}
		}
	}
	return sdk.Decision{}, false, ctxError(ctx.Err())
}

// alone sends a at once in an RPC of its own, as it would go
// uncoalesced, holding a slot. Called with mu held; returns with it
// released.
func (q *coalescer) alone(ctx context.Context, a sdk.Attempt) (sdk.Decision, bool, error) {
	q.inflight++
	q.mu.Unlock()
	d, err := q.op.one(q.c, ctx, q.policy, a)
	q.mu.Lock()
	if len(q.queue) > 0 {
		go q.run() // with this call's slot
	} else {
		q.inflight--
	}
	q.mu.Unlock()
	return d, false, err
}

// run sends the queue's calls, a batch at a time, holding a slot, until
// the queue is empty.
func (q *coalescer) run() {
	for {
		runtime.Gosched() // let the callers woken with this one queue (the type's comment)
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		batch := q.take()
		if len(batch) == 1 {
			q.mu.Unlock()
			w := batch[0]
			d, err := q.op.one(q.c, w.ctx, q.policy, w.a)
			q.mu.Lock()
			w.finish(d, false, err)
			q.mu.Unlock()
			continue
		}
		ctx, f := q.flight(batch)
		q.mu.Unlock()
		q.send(ctx, f, batch)
	}
}

// take removes up to MaxBatch calls from the head of the queue and marks
// them sent. Called with mu held.
func (q *coalescer) take() []*waiter {
	n := min(len(q.queue), q.c.coalesce.MaxBatch)
	batch := make([]*waiter, n)
	copy(batch, q.queue)
	for _, w := range batch {
		w.state = sent
	}
	clear(q.queue[:n]) // let the sent waiters go
	q.queue = q.queue[n:]
	if len(q.queue) == 0 {
		q.queue = q.queue[:0:0] // the array's head is spent: start afresh
	}
	return batch
}

// flight makes batch's RPC context: the first call's values, the latest
// of the calls' deadlines (none if one has none), cancelled when every
// call has given up (do). Called with mu held.
func (q *coalescer) flight(batch []*waiter) (context.Context, *flight) {
	var latest time.Time
	for _, w := range batch {
		dl, ok := w.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	f := &flight{left: len(batch)}
	if latest.IsZero() {
		ctx, f.cancel = context.WithCancel(ctx)
	} else {
		ctx, f.cancel = context.WithDeadline(ctx, latest)
	}
	for _, w := range batch {
		w.f = f
	}
	return ctx, f
}

// send sends batch in one RPC and hands each call its outcome.
func (q *coalescer) send(ctx context.Context, f *flight, batch []*waiter) {
	as := make([]*freqcapv1.Attempt, len(batch))
	for i, w := range batch {
		as[i] = protoconv.ToAttempt(w.a)
	}
	rs, err := q.op.many(q.c, ctx, q.policy, as)
	f.cancel()
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range batch {
		switch {
		case err != nil: // the whole RPC's: the transport's, or a refusal of the call
			w.finish(sdk.Decision{}, false, err)
		case len(rs) != len(batch):
			w.finish(sdk.Decision{}, true, miscount(len(rs), len(batch)))
		default:
			d, eerr := entry(rs[i])
			w.finish(d, true, eerr)
		}
	}
}

// finish hands w its outcome. Called with mu held.
func (w *waiter) finish(d sdk.Decision, answered bool, err error) {
	w.d, w.answered, w.err, w.state = d, answered, err, done
	w.wake <- struct{}{}
}

// remove takes w, which gives up before being sent, out of the queue.
// Called with mu held.
func (q *coalescer) remove(w *waiter) {
	for i, x := range q.queue {
		if x == w {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return
		}
	}
}

// ctxError is the error of a call whose context ended, as connect
// reports it for an RPC.
func ctxError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	return err
}
