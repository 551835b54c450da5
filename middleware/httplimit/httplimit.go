// Package httplimit is net/http middleware that rate limits each request
// with a freqcap policy: a key function names the request's subject, the
// limiter (an in-process *sdk.Limiter or the remote client of freqcap
// serve, see middleware.Taker) takes one attempt, and the request either
// goes on to the next handler with the IETF RateLimit and
// RateLimit-Policy headers set, or is refused with 429 Too Many Requests,
// the same headers and Retry-After.
//
//	lim, err := httplimit.New(limiter, policy, func(r *http.Request) (sdk.Subject, error) {
//		return sdk.Subject{"client": r.Header.Get("X-Api-Key")}, nil
//	})
//	…
//	http.ListenAndServe(addr, lim.Handler(mux))
//
// Routers that take net/http middleware, such as chi (Use, With), take
// lim.Handler as it is; middleware/echolimit and middleware/ginlimit adapt
// it to echo and gin.
//
// What each request gets (middleware.Decide sorts it out):
//
//   - allowed: the next handler runs, with RateLimit and RateLimit-Policy
//     set on the response;
//   - denied: 429, RateLimit, RateLimit-Policy, Retry-After (whole
//     seconds, absent when the cost exceeds a rule's limit so that no
//     retry can pass) and a JSON body; WithDeniedHandler replaces the
//     status and body;
//   - the key, cost, class or priority function fails, or the limiter
//     refuses what they gave (sdk.ErrInvalidSubject, sdk.ErrInvalidCost,
//     sdk.ErrInvalidClass, sdk.ErrInvalidPriority): 400 with a
//     JSON body, nothing consumed; WithKeyErrorHandler replaces it. A key
//     function returning middleware.ErrSkip lets the request through
//     undecided;
//   - the limiter could not decide: as WithFailure says (by default as
//     the policy says: through, without headers, for a fail-open policy;
//     503 with a JSON body for a fail-closed one; WithErrorHandler
//     replaces the 503).
package httplimit

import (
	"encoding/json"
	"net/http"

	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
)

// KeyFunc returns the subject a request counts against, e.g.
// sdk.Subject{"client": r.Header.Get("X-Api-Key")}. An error refuses the
// request (400 by default) and consumes nothing; middleware.ErrSkip lets
// it through undecided. Its error is passed to WithKeyErrorHandler's
// handler, never to the client.
type KeyFunc func(r *http.Request) (sdk.Subject, error)

// CostFunc returns the units a request takes (0 means 1). An error is
// answered as a key error.
type CostFunc func(r *http.Request) (int64, error)

// ClassFunc returns the class a request is taken as (sdk.Attempt.Class:
// one its policy declares, sdk.WithClass; "" for none). An error, or a
// class the policy does not declare, is answered as a key error.
type ClassFunc func(r *http.Request) (string, error)

// PriorityFunc returns a request's priority (sdk.Attempt.Priority, 0 to
// sdk.MaxPriority: a rule with headroom keeps its last units for higher
// priorities). An error, or a priority out of range, is answered as a
// key error.
type PriorityFunc func(r *http.Request) (int, error)

// Limiter is the middleware for one policy. It is safe for concurrent
// use; Handler is what most callers want.
type Limiter struct {
	t       middleware.Taker
	p       *sdk.Policy
	key     KeyFunc
	cost    CostFunc
	class   ClassFunc
	prio    PriorityFunc
	failure middleware.Failure
	onKey   func(w http.ResponseWriter, r *http.Request, err error)
	onErr   func(w http.ResponseWriter, r *http.Request, err error)
	onDeny  func(w http.ResponseWriter, r *http.Request, d sdk.Decision)
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithCost sets the function that gives a request's cost (default: every
// request costs 1).
func WithCost(f CostFunc) Option { return func(l *Limiter) { l.cost = f } }

// WithClass sets the function that gives a request's message class
// (default: none).
func WithClass(f ClassFunc) Option { return func(l *Limiter) { l.class = f } }

// WithPriority sets the function that gives a request's priority
// (default: 0, the lowest).
func WithPriority(f PriorityFunc) Option { return func(l *Limiter) { l.prio = f } }

// WithFailure sets what happens when the limiter cannot decide (default
// middleware.FailurePolicy: as the policy says).
func WithFailure(f middleware.Failure) Option { return func(l *Limiter) { l.failure = f } }

// WithKeyErrorHandler replaces the 400 answer to a request whose key or
// cost could not be found or was refused by the limiter; err says why
// (it may quote the key function's own error). Nothing was consumed.
func WithKeyErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(l *Limiter) { l.onKey = h }
}

// WithErrorHandler replaces the 503 answer when the limiter could not
// decide and the middleware fails closed. err is the limiter's error (or
// a degraded decision's): it may name servers, so log it rather than send
// it.
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(l *Limiter) { l.onErr = h }
}

// WithDeniedHandler replaces the 429 answer to a denied request. It is
// called with the RateLimit, RateLimit-Policy and Retry-After headers
// already set on w, and writes the status and body.
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d sdk.Decision)) Option {
	return func(l *Limiter) { l.onDeny = h }
}

// New returns middleware that limits requests with t under p, keyed by
// key. t, p and key are required.
func New(t middleware.Taker, p *sdk.Policy, key KeyFunc, opts ...Option) (*Limiter, error) {
	if err := middleware.CheckNew("httplimit", t, p, key != nil); err != nil {
		return nil, err
	}
	l := &Limiter{t: t, p: p, key: key}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Policy returns the policy the Limiter decides with.
func (l *Limiter) Policy() *sdk.Policy { return l.p }

// Handler returns next limited: a request runs next only when Admit lets
// it.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.Admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// Admit decides r with the Limiter's key function. When it returns true
// the request may go on (its RateLimit headers are set on w); when false,
// Admit has written the answer. Adapters for other routers call it.
func (l *Limiter) Admit(w http.ResponseWriter, r *http.Request) bool {
	s, err := l.key(r)
	return l.AdmitSubject(w, r, s, err)
}

// AdmitSubject is Admit for a subject found elsewhere (by an adapter
// whose key function reads its framework's context): keyErr is that key
// function's error, answered as Admit answers its own.
func (l *Limiter) AdmitSubject(w http.ResponseWriter, r *http.Request, s sdk.Subject, keyErr error) bool {
	a := sdk.Attempt{Subject: s}
	if keyErr == nil && l.cost != nil {
		a.Cost, keyErr = l.cost(r)
	}
	if keyErr == nil && l.class != nil {
		a.Class, keyErr = l.class(r)
	}
	if keyErr == nil && l.prio != nil {
		a.Priority, keyErr = l.prio(r)
	}
	v := middleware.Decide(r.Context(), l.t, l.p, l.failure, a, keyErr)
	v.SetHeaders(w.Header(), l.p)
	switch v.Outcome {
	case middleware.Allow, middleware.Pass:
		return true
	case middleware.Deny:
		if l.onDeny != nil {
			l.onDeny(w, r, v.Decision)
			return false
		}
		body := Body{Error: v.Message(), Policy: v.Decision.Policy, Denied: v.Decision.Denied}
		if !v.Decision.CostTooHigh {
			body.RetryAfterSeconds = ratelimitheaders.Seconds(v.Decision.RetryAfter)
		}
		writeJSON(w, http.StatusTooManyRequests, body)
	case middleware.BadKey:
		if l.onKey != nil {
			l.onKey(w, r, v.Err)
			return false
		}
		writeJSON(w, http.StatusBadRequest, Body{Error: v.Message()})
	default: // Unavailable
		if l.onErr != nil {
			l.onErr(w, r, v.Err)
			return false
		}
		writeJSON(w, http.StatusServiceUnavailable, Body{Error: v.Message()})
	}
	return false
}

// Body is the JSON body of the middleware's own answers: 429 (with the
// policy, the denying rules and, when a retry can pass, the seconds to
// wait, as Retry-After says), 400 and 503 (the error alone).
type Body struct {
	Error             string   `json:"error"`
	Policy            string   `json:"policy,omitempty"`
	Denied            []string `json:"denied,omitempty"`
	RetryAfterSeconds int64    `json:"retry_after_seconds,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, b Body) {
	data, err := json.Marshal(b)
	if err != nil { // a struct of strings: cannot happen
		http.Error(w, b.Error, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
