// Package middleware is the decision freqcap's HTTP middleware and gRPC
// interceptors make for each request, whatever the transport: take one
// attempt from a Taker — the in-process *sdk.Limiter or the remote client
// of freqcap serve, which has the same Take — and sort the answer into
// what the request gets:
//
//   - Allow: let through, with the RateLimit headers;
//   - Deny: refused (HTTP 429, gRPC RESOURCE_EXHAUSTED) with the
//     RateLimit headers and, when a retry can pass, Retry-After;
//   - BadKey: the request names no valid subject or cost (HTTP 400, gRPC
//     INVALID_ARGUMENT); nothing was consumed;
//   - Unavailable: no decision, failing closed (HTTP 503, gRPC
//     UNAVAILABLE);
//   - Pass: no decision, let through without headers (failing open, or
//     the key function returned ErrSkip).
//
// The headers are package ratelimitheaders', the same that freqcap serve
// and the console send. The transports build on this package:
// middleware/httplimit (net/http and routers built on it, such as chi),
// middleware/echolimit, middleware/ginlimit, middleware/grpclimit
// (google.golang.org/grpc servers) and middleware/connectlimit
// (connectrpc.com/connect handlers); each imports only its own framework.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
)

// Taker is what the middleware needs of a limiter: one Take per request.
// *sdk.Limiter has it, and so has the remote client of freqcap serve
// (package client), with the same signature and the same errors (they
// wrap the sdk's sentinels), so middleware works in-process and remote
// alike.
type Taker interface {
	Take(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error)
}

var _ Taker = (*sdk.Limiter)(nil)

// ErrSkip, returned by a key function, lets the request through without a
// decision and without headers: nothing is taken (a health check, an
// internal caller).
var ErrSkip = errors.New("middleware: not rate limited")

// Failure is what the middleware does when the limiter could not decide:
// when Take returns an error that is not about the request itself, or a
// degraded decision (a fail-open policy's answer when its backend failed).
type Failure int

const (
	// FailurePolicy, the default, follows the policy: a fail-open policy
	// (sdk.WithFailOpen) lets the request through, a fail-closed one refuses
	// it as Unavailable. A degraded decision passes (only a fail-open
	// policy yields one).
	FailurePolicy Failure = iota
	// FailOpen lets the request through whatever the policy says.
	FailOpen
	// FailClosed refuses the request as Unavailable whatever the policy
	// says, degraded decisions included.
	FailClosed
)

// String returns "policy", "open" or "closed".
func (f Failure) String() string {
	switch f {
	case FailurePolicy:
		return "policy"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("Failure(%d)", int(f))
}

// Outcome is what a request gets.
type Outcome int

// The outcomes; see the package documentation.
const (
	Allow Outcome = iota + 1
	Deny
	BadKey
	Unavailable
	Pass
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case BadKey:
		return "bad key"
	case Unavailable:
		return "unavailable"
	case Pass:
		return "pass"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Verdict is the outcome of one request and what it was drawn from.
type Verdict struct {
	Outcome Outcome
	// Decision is the limiter's decision (Allow, Deny, and Pass or
	// Unavailable for a degraded decision); zero when there was none.
	Decision sdk.Decision
	// Err is why there was no decision: the key function's error or the
	// limiter's (BadKey, Unavailable, Pass), or a degraded decision's
	// backend error. Limiter errors may name servers: log them, do not
	// send them to clients.
	Err error
}

// Decide takes a from t under p and sorts the answer, failing as f says.
// keyErr is the error of the caller's key or cost function, if any: then
// nothing is taken, and the verdict is Pass for ErrSkip, else BadKey. A
// Take error for the request's own input (sdk.ErrInvalidSubject,
// sdk.ErrInvalidCost, sdk.ErrInvalidIdempotencyKey, sdk.ErrInvalidZone,
// sdk.ErrInvalidClass, sdk.ErrInvalidPriority, which consume nothing) is
// BadKey too.
func Decide(ctx context.Context, t Taker, p *sdk.Policy, f Failure, a sdk.Attempt, keyErr error) Verdict {
	if keyErr != nil {
		if errors.Is(keyErr, ErrSkip) {
			return Verdict{Outcome: Pass, Err: keyErr}
		}
		return Verdict{Outcome: BadKey, Err: keyErr}
	}
	d, err := t.Take(ctx, p, a)
	switch {
	case err != nil && badInput(err):
		return Verdict{Outcome: BadKey, Err: err}
	case err != nil:
		return Verdict{Outcome: failed(p, f), Err: err}
	case d.Degraded:
		o := Pass
		if f == FailClosed {
			o = Unavailable
		}
		return Verdict{Outcome: o, Decision: d, Err: d.Err}
	case d.Allowed:
		return Verdict{Outcome: Allow, Decision: d}
	}
	return Verdict{Outcome: Deny, Decision: d}
}

// badInput reports whether a Take error is about the attempt itself.
func badInput(err error) bool {
	for _, e := range [...]error{sdk.ErrInvalidSubject, sdk.ErrInvalidCost, sdk.ErrInvalidIdempotencyKey,
		sdk.ErrInvalidZone, sdk.ErrInvalidClass, sdk.ErrInvalidPriority} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// failed is the outcome of a Take error under p and f.
func failed(p *sdk.Policy, f Failure) Outcome {
	switch {
	case f == FailOpen, f == FailurePolicy && p.FailOpen():
		return Pass
	}
	return Unavailable
}

// SetHeaders sets on h the headers v's decision gives, for Allow and Deny:
// RateLimit and RateLimit-Policy, and Retry-After when a denial can pass
// on a retry (ratelimitheaders.Set and SetRetryAfter). Other outcomes get
// none.
func (v Verdict) SetHeaders(h http.Header, p *sdk.Policy) {
	if v.Outcome != Allow && v.Outcome != Deny {
		return
	}
	ratelimitheaders.Set(h, p, v.Decision)
	ratelimitheaders.SetRetryAfter(h, v.Decision)
}

// Message is the short text a refused request gets, for its response body
// or its status message. It names the policy and the denying rules, never
// a subject value, nor a limiter error (which may name servers).
func (v Verdict) Message() string {
	d := v.Decision
	switch v.Outcome {
	case Deny:
		what := fmt.Sprintf("rate limited by policy %q (%s)", d.Policy, strings.Join(d.Denied, ", "))
		switch {
		case d.CostTooHigh:
			return what + ": the request costs more than a rule's limit and can never be allowed; do not retry it"
		case d.RetryAfter > 0:
			return fmt.Sprintf("%s: retry in %ds", what, ratelimitheaders.Seconds(d.RetryAfter))
		}
		return what
	case BadKey:
		return "rate limit: the request does not name a valid subject or cost"
	case Unavailable:
		return "rate limit: could not decide (the limiter is unavailable)"
	case Allow:
		return "allowed"
	case Pass:
		return "not decided; let through"
	}
	return ""
}

// CheckNew is the check every adapter's New makes of what it was given:
// a limiter, a policy and a key function are required. pkg names the
// adapter in the error ("httplimit", "grpclimit", …).
func CheckNew(pkg string, t Taker, p *sdk.Policy, keyGiven bool) error {
	switch {
	case t == nil:
		return fmt.Errorf("%s: new: nil limiter", pkg)
	case p == nil:
		return fmt.Errorf("%s: new: %w: nil policy", pkg, sdk.ErrInvalidPolicy)
	case !keyGiven:
		return fmt.Errorf("%s: new: nil key function", pkg)
	}
	return nil
}
