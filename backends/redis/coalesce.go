package redis

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/freqcap/freqcap/backends/redis/capability"
	"github.com/freqcap/freqcap/sdk/driver"
)

// coalescer sends the concurrent single decisions and small batches of
// one Backend as multi-attempt scripts (take.lua's or a fast script's, as batches:
// Backend.scripts) (Options.Coalesce). It starts no
// goroutine: the callers themselves send the scripts.
//
// A call builds its requests' fast attempts (Backend.attempt), then
// enqueues its request (or batch). A call holding a slot (there are max) is a
// flusher: it takes up to batchAttempts queued requests from the head of
// the queue, sends them in one script (Backend.scripts), hands each
// caller its outcome and, once its own request is answered, hands its
// slot to the first queued caller that holds none (or frees it when none
// waits). A call that finds a free slot on arrival takes it; the others
// wait for their outcome or for a slot. So a queued call waits for the
// first slot to come free, at most one script in flight, and is then
// sent, unless batchAttempts calls queue before it. A call that finds no
// script in flight and nobody queued goes out alone, as an uncoalesced
// call (Backend.decideOne), holding the slot until it is answered. A
// flusher that takes a free slot while another script is in flight
// yields the processor once before it takes its batch: the callers
// woken by the same reply (a script's callers return at once, and call
// again) queue behind it meanwhile and go in its script, instead of the
// first of them going out alone and the rest waiting for a slot. Going
// alone whenever a slot was free left both the server and the client
// idle about 40% of the time under load (docs/BENCHMARKS.md).
type coalescer struct {
	max int // slots: scripts in flight at once

	mu    sync.Mutex
	queue []*waiter // not yet sent, in arrival order
	slots int       // slots held: by flushers, or handed to a waiter not yet awake
}

// waitState is where a waiter's request is.
type waitState uint8

const (
	queued waitState = iota // in coalescer.queue
	sent                    // taken by a flusher
	done                    // outcome in res
)

// waiter is one call waiting in the coalescer: a single decision, or a
// small batch (group) whose requests go in one script, in input order.
type waiter struct {
	reqs []request
	wake chan struct{} // capacity 1: a change of state or lead
	// Under coalescer.mu:
	state waitState
	lead  bool                 // holds a slot
	res   []driver.BatchResult // one per request

	one    [1]request // reqs' array for a single decision
	oneRes [1]driver.BatchResult
}

func newCoalescer(max int) *coalescer { return &coalescer{max: max} }

// signal wakes w, without blocking (w rereads its state under mu).
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// do carries out r, coalesced with the concurrent calls, on a server with
// scripting (rep). Its error, like Backend.scripts's, does not yet name
// the operation.
func (c *coalescer) do(ctx context.Context, b *Backend, rep *capability.Report, r request) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, err
	}
	b.attempt(&r, rep) // here, not by the flusher while it holds a slot
	c.mu.Lock()
	if c.slots == 0 && len(c.queue) == 0 {
		return c.alone(ctx, b, rep, r)
	}
	w := waiters.Get().(*waiter)
	w.one[0] = r
	w.reqs, w.res = w.one[:], w.oneRes[:]
	if err := c.wait(ctx, b, rep, w); err != nil {
		return driver.Result{}, err // (w may still be written to: not reused)
	}
	res := w.oneRes[0]
	w.reuse()
	return res.Result, res.Err
}

// waiters holds the single decisions' waiters for reuse: a waiter is
// answered once, after which no flusher holds it, so do puts back those
// it got an outcome for (a waiter given up while sent may still be
// answered: never put back).
var waiters = sync.Pool{New: func() any { return &waiter{wake: make(chan struct{}, 1)} }}

// reuse clears w, answered, and puts it back in waiters.
func (w *waiter) reuse() {
	select {
	case <-w.wake: // a signal not yet read
	default:
	}
	w.one[0], w.oneRes[0] = request{}, driver.BatchResult{}
	w.reqs, w.res, w.state, w.lead = nil, nil, queued, false
	waiters.Put(w)
}

// group carries out reqs (at most batchAttempts), a batch, coalesced with
// the concurrent calls: its requests go together, in input order, in one
// script shared with the calls queued beside them, and each outcome is
// written to out (len(reqs)), its error not yet naming the operation. A
// batch finding nothing in flight and nobody queued goes out at once, as
// it would uncoalesced.
func (c *coalescer) group(ctx context.Context, b *Backend, rep *capability.Report, reqs []request, out []driver.BatchResult) {
	if err := ctx.Err(); err != nil {
		fail(out, err)
		return
	}
	for i := range reqs { // here, as do, not by the flusher while it holds a slot
		b.attempt(&reqs[i], rep)
	}
	c.mu.Lock()
	if c.slots == 0 && len(c.queue) == 0 {
		c.slots++
		c.mu.Unlock()
		b.scripts(ctx, reqs, rep, out)
		c.mu.Lock()
		c.release()
		c.mu.Unlock()
		return
	}
	w := &waiter{reqs: reqs, res: out, wake: make(chan struct{}, 1)}
	if err := c.wait(ctx, b, rep, w); err != nil {
		fail(out, err)
	}
}

func fail(out []driver.BatchResult, err error) {
	for i := range out {
		out[i] = driver.BatchResult{Err: err}
	}
}

// wait queues w and returns once its outcome is in w.res, sending
// scripts while it holds a slot, or ctx's error if ctx ends first (see
// Options.Coalesce). Called with mu held; returns with it released.
func (c *coalescer) wait(ctx context.Context, b *Backend, rep *capability.Report, w *waiter) error {
	c.queue = append(c.queue, w)
	if c.slots < c.max {
		c.slots++
		w.lead = true
	}
	if w.lead && c.slots > 1 {
		c.yield()
	}
	for {
		switch {
		case w.state == done:
			if w.lead {
				c.pass(w)
			}
			c.mu.Unlock()
			return nil
		case w.lead && w.state == queued:
			if err := ctx.Err(); err != nil { // not sent: nothing consumed
				c.remove(w)
				c.pass(w)
				c.mu.Unlock()
				return err
			}
			f := c.take()
			c.mu.Unlock()
			c.flush(ctx, b, rep, f)
			c.mu.Lock()
			continue
		case w.lead: // sent by another flusher: let a queued call send
			c.pass(w)
		}
		c.mu.Unlock()
		select {
		case <-w.wake:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			if w.state == done {
				continue // the outcome arrived meanwhile: return it
			}
			if w.state == queued { // not sent: nothing consumed
				c.remove(w)
			} // else sent: it may run (as after a lost reply), never again
			if w.lead {
				c.pass(w)
			}
			c.mu.Unlock()
			return ctx.Err()
		}
	}
}

// yield lets the callers woken with a flusher that found a script in
// flight queue behind it before it takes its batch (the type's comment).
// Called with mu held; returns with it held.
func (c *coalescer) yield() {
	c.mu.Unlock()
	runtime.Gosched()
	c.mu.Lock()
}

// alone sends r at once, as it would go uncoalesced (one EVALSHA of its
// own, the short form), holding a slot: nobody waits and a slot is free,
// so a lone caller pays nothing for coalescing. Calls arriving meanwhile
// queue, and the slot goes to the first of them. Called with mu held; it
// returns with mu released.
func (c *coalescer) alone(ctx context.Context, b *Backend, rep *capability.Report, r request) (driver.Result, error) {
	c.slots++
	c.mu.Unlock()
	res, err := b.decideOne(ctx, &r, rep)
	c.mu.Lock()
	c.release()
	c.mu.Unlock()
	return res, err
}

// take removes waiters from the head of the queue, up to batchAttempts
// requests (always at least one waiter), marks them sent and returns
// them in a flushBuf's batch. Called with mu held.
func (c *coalescer) take() *flushBuf {
	n, attempts := 0, 0
	for n < len(c.queue) && (n == 0 || attempts+len(c.queue[n].reqs) <= batchAttempts) {
		attempts += len(c.queue[n].reqs)
		n++
	}
	f := flushes.Get().(*flushBuf)
	f.batch = append(f.batch, c.queue[:n]...)
	for _, w := range f.batch {
		w.state = sent
	}
	clear(c.queue[:n]) // let the sent waiters go
	c.queue = c.queue[n:]
	if len(c.queue) == 0 {
		c.queue = c.queue[:0:0] // the array's head is spent: start afresh
	}
	return f
}

// remove takes w, which gives up before being sent, out of the queue.
// Called with mu held.
func (c *coalescer) remove(w *waiter) {
	for i, q := range c.queue {
		if q == w {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// pass hands w's slot to the first queued waiter without one, or frees
// it. Called with mu held.
func (c *coalescer) pass(w *waiter) {
	w.lead = false
	c.release()
}

// release hands a slot to the first queued waiter without one, or frees
// it. Called with mu held.
func (c *coalescer) release() {
	for _, q := range c.queue {
		if !q.lead {
			q.lead = true
			q.signal()
			return
		}
	}
	c.slots--
}

// flush sends f's batch (take's) in one script, hands each waiter its
// outcome and puts f back. The script runs under flushContext(ctx): the
// flusher's deadline bounds it, but the flusher's caller giving up does
// not fail the others' attempts.
func (c *coalescer) flush(ctx context.Context, b *Backend, rep *capability.Report, f *flushBuf) {
	for _, w := range f.batch {
		f.reqs = append(f.reqs, w.reqs...)
	}
	f.out = append(f.out, make([]driver.BatchResult, len(f.reqs))...)
	b.scripts(flushContext{ctx}, f.reqs, rep, f.out)
	out := f.out
	c.mu.Lock()
	for _, w := range f.batch {
		n := copy(w.res, out)
		out = out[n:]
		w.state = done
		w.signal()
	}
	c.mu.Unlock()
	f.put()
}

// flushBuf is a flush's buffers, reused (flushes): its requests, their
// outcomes, and the waiters take hands it. A flush's requests are copies
// of its waiters' (the script is encoded from one slice): reusing the
// slices keeps a coalesced decision from allocating its request twice.
type flushBuf struct {
	reqs  []request
	out   []driver.BatchResult
	batch []*waiter
}

var flushes = sync.Pool{New: func() any { return new(flushBuf) }}

// put clears f (its requests and outcomes hold the callers' keys and
// results, its batch their waiters) and puts it back in flushes.
func (f *flushBuf) put() {
	clear(f.reqs)
	clear(f.out)
	clear(f.batch)
	f.reqs, f.out, f.batch = f.reqs[:0], f.out[:0], f.batch[:0]
	flushes.Put(f)
}

// flushContext is ctx's values and deadline without its cancellation:
// go-redis bounds a command's reads by its context's deadline (with
// ContextTimeoutEnabled, else by ReadTimeout), and fails a command whose
// context is done before it got a connection. Unlike
// context.WithoutCancel it keeps the deadline, without starting a timer.
type flushContext struct{ parent context.Context }

func (f flushContext) Deadline() (time.Time, bool) { return f.parent.Deadline() }
func (f flushContext) Done() <-chan struct{}       { return nil }
func (f flushContext) Err() error                  { return nil }
func (f flushContext) Value(key any) any           { return f.parent.Value(key) }
