package client

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/sdk"
)

// Retry says how a Client sends a call again when its reply may have been
// lost: the server was killed or redeployed mid-call, a connection was
// reset, a load balancer answered 502, 503 or 504, the server's backend
// failed, or the call's own deadline (PerTry, or serve's
// --request-timeout) passed while the caller's still had time. Only
// Take, Allow, Reserve and TakeBatch, which carry idempotency keys, and
// the calls that consume nothing (Peek, PeekBatch, Inspect) are re-sent;
// Commit, Cancel, Reset and the administrative calls never are.
//
// A consuming call is re-sent with the same idempotency key, so it is
// decided once: a re-send of an attempt the server had decided gets the
// first decision back (Decision.Replayed) and consumes nothing more. An
// attempt without a key gets one from the client (128 random bits,
// base64url) before its first send, unless Tries is 1.
//
// The server's backend remembers a key for the attempt's IdempotencyTTL
// (on Redis a restarted serve finds it; a serve on the memory backend
// loses it when it restarts, and its counts with it). A key of the
// caller's keeps the caller's IdempotencyTTL (0: the policy's, its
// longest window). A generated key only has to outlive the call's own
// re-sends, so, unless the attempt sets an IdempotencyTTL, the client
// asks for the call's retry window plus GeneratedKeySlack (the server
// cuts it to the policy's). The window is the time left before the
// call's deadline (its context's or Options.Timeout's) when the key is
// made; with a PerTry bound, at most Tries sends of PerTry and the
// longest pauses between them. A call with neither a deadline nor PerTry
// has no bound on when its last re-send arrives: its generated key keeps
// the policy's IdempotencyTTL.
//
// A fail-open policy's call answers degraded only once its re-sends are
// spent (or its deadline would pass during the next pause).
type Retry struct {
	// Tries is the most sends of one call, the first included; 1 never
	// re-sends and generates no idempotency keys. 0 means
	// DefaultRetry.Tries.
	Tries int
	// Backoff is the pause before the first re-send, doubled before each
	// next one up to MaxBackoff, each drawn from [½, 1½) of it (0 means
	// DefaultRetry's). A pause that would end past the call's deadline is
	// not taken: the call returns its last error at once.
	Backoff, MaxBackoff time.Duration
	// PerTry bounds each send (0: only the call's context and
	// Options.Timeout do), so that a server that stopped answering
	// without closing the connection leaves time for a re-send. Set it
	// above serve's --request-timeout: a send cut short may still have
	// been decided, which costs a re-send, never a second decision.
	PerTry time.Duration
}

// DefaultRetry is Options.Retry's default: 5 sends, pausing about 50,
// 100, 200 and 400 ms between them, which rides out a replica's restart
// or a load balancer's failover within a sender's usual deadline of a
// few seconds, and no PerTry bound. Retries are on by default because a
// sender that cannot tell whether its attempt counted either sends
// without asking (uncapped) or gives up a send it was allowed; the
// price is one idempotency record per consuming attempt, kept by the
// backend for the call's retry window plus GeneratedKeySlack (so a
// minute and a few seconds for a call with a deadline of a few seconds;
// the policy's IdempotencyTTL for a call with no deadline: Retry's doc),
// and such attempts skip the server's hot-deny cache and Redis'
// one-policy fast scripts (the same as an attempt with the caller's own
// key). A sender that gives every
// attempt its own key (a message id) pays nothing more; Tries: 1 turns
// retries and generated keys off.
var DefaultRetry = Retry{Tries: 5, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}

// withDefaults fills r's zero fields from DefaultRetry.
func (r Retry) withDefaults() Retry {
	if r.Tries <= 0 {
		r.Tries = DefaultRetry.Tries
	}
	if r.Backoff <= 0 {
		r.Backoff = DefaultRetry.Backoff
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = max(DefaultRetry.MaxBackoff, r.Backoff)
	}
	return r
}

// newKey returns a fresh idempotency key: 128 random bits, base64url.
func newKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// GeneratedKeySlack is how much longer than its call's retry window the
// server's backend keeps a key the client generated (Retry): room for a
// last re-send's trip and the servers' queues.
const GeneratedKeySlack = time.Minute

// keyed returns a with an idempotency key: its own, or a new one when
// c re-sends calls, with the TTL keyTTL gives for ctx, the whole call's
// context, unless a has its own.
func (c *Client) keyed(ctx context.Context, a sdk.Attempt) sdk.Attempt {
	if a.IdempotencyKey == "" && c.retry.Tries > 1 {
		a.IdempotencyKey = newKey()
		if a.IdempotencyTTL == 0 {
			a.IdempotencyTTL = c.retry.keyTTL(ctx)
		}
	}
	return a
}

// keyTTL is how long a key generated for a call with context ctx must be
// kept (Retry's doc): its retry window plus GeneratedKeySlack, or 0 (the
// policy's IdempotencyTTL) when nothing bounds the window.
func (r Retry) keyTTL(ctx context.Context) time.Duration {
	var window time.Duration
	bounded := false
	if dl, ok := ctx.Deadline(); ok {
		window, bounded = max(time.Until(dl), 0), true
	}
	if r.PerTry > 0 {
		// Tries sends of PerTry and the longest pauses between them
		// (pause: each at most 1½ of its backoff).
		b, all := r.Backoff, time.Duration(r.Tries)*r.PerTry
		for n := 1; n < r.Tries; n++ {
			all += b + b/2
			b = min(2*b, r.MaxBackoff)
		}
		if !bounded || all < window {
			window, bounded = all, true
		}
	}
	if !bounded {
		return 0
	}
	return window + GeneratedKeySlack
}

// lost reports whether err, the error of one send, leaves the call's
// reply lost (or the call not done) in a way a re-send may mend, with ctx
// (the whole call's) still live:
//   - unavailable: no connection, a connection reset or GOAWAY before the
//     reply, a proxy's 502, 503 or 504, serve's backend failed (the call
//     may have been applied) or serve is shutting down (nothing was done);
//   - deadline_exceeded: the send's own deadline or serve's passed, the
//     caller's has not;
//   - unknown, internal and canceled only when the client made them up
//     (connect.IsWireError false): a stream reset, a reply cut off, a
//     write to a closed connection. Sent by a server they are its answer.
//
// Every other code is the server's refusal of the call itself (invalid
// input, credentials, scopes, lockout, no such policy): sending it again
// cannot change it. fromServer is set for an error the server reported
// in a reply (a batch entry's), which is never the transport's.
func lost(ctx context.Context, err error, fromServer bool) bool {
	var ce *connect.Error
	if err == nil || ctx.Err() != nil || !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return true
	case connect.CodeUnknown, connect.CodeInternal, connect.CodeCanceled:
		return !fromServer && !connect.IsWireError(ce)
	}
	return false
}

// pause waits before re-send number n (1 for the first), and reports
// false at once, without waiting, when the wait would end past ctx's
// deadline or ctx ends first.
func (c *Client) pause(ctx context.Context, n int) bool {
	d := c.retry.Backoff
	for i := 1; i < n && d < c.retry.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.retry.MaxBackoff)
	d = d/2 + rand.N(d) // [½, 1½)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// send calls f, re-sending it while its error is lost and c.retry allows.
// Each send gets a context bounded by Retry.PerTry.
func (c *Client) send(ctx context.Context, f func(context.Context) error) error {
	return c.resend(ctx, func(ctx context.Context) (bool, error) { return false, f(ctx) })
}

// resend is send for an f that says whether its error is the server's
// answer (a batch entry's: lost's fromServer).
func (c *Client) resend(ctx context.Context, f func(context.Context) (answered bool, err error)) error {
	for n := 1; ; n++ {
		var answered bool
		err := c.try(ctx, func(ctx context.Context) (err error) {
			answered, err = f(ctx)
			return err
		})
		if n >= c.retry.Tries || !lost(ctx, err, answered) || !c.pause(ctx, n) {
			return err
		}
	}
}

// try is one send of f, bounded by Retry.PerTry.
func (c *Client) try(ctx context.Context, f func(context.Context) error) error {
	if c.retry.PerTry <= 0 {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.retry.PerTry)
	defer cancel()
	return f(ctx)
}
