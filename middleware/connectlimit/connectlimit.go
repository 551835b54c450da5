// Package connectlimit rate limits the handlers of a connectrpc.com/connect
// service with a freqcap policy: an interceptor that names each call's
// subject with a key function, takes one attempt from the limiter (an
// in-process *sdk.Limiter or the remote client of freqcap serve, see
// middleware.Taker), and either runs the handler or refuses the call with
// connect.CodeResourceExhausted.
//
//	lim, err := connectlimit.New(limiter, policy, func(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header) (sdk.Subject, error) {
//		return sdk.Subject{"client": h.Get("X-Api-Key")}, nil
//	})
//	…
//	path, handler := greetv1connect.NewGreetServiceHandler(svc, connect.WithInterceptors(lim))
//
// It answers as package grpclimit does, over every protocol connect
// serves (gRPC, gRPC-Web, Connect): the RateLimit, RateLimit-Policy and,
// on a denial a retry can pass, Retry-After headers on allowed and denied
// calls (on a denial, as the error's metadata), a google.rpc.RetryInfo
// detail on a denial, connect.CodeInvalidArgument for a key error (nothing
// consumed; middleware.ErrSkip lets the call through undecided) and, when
// the limiter cannot decide, what WithFailure says (by default the
// policy's setting: through, or connect.CodeUnavailable). Streams are
// decided once, when they open. Client-side calls pass untouched.
package connectlimit

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/sdk"
)

// KeyFunc returns the subject a call counts against, from its procedure
// (spec.Procedure), its peer and its request headers. An error refuses
// the call (connect.CodeInvalidArgument by default) and consumes
// nothing; middleware.ErrSkip lets it through undecided.
type KeyFunc func(ctx context.Context, spec connect.Spec, peer connect.Peer, header http.Header) (sdk.Subject, error)

// CostFunc returns the units a call takes (0 means 1), with KeyFunc's
// arguments. An error is answered as a key error.
type CostFunc func(ctx context.Context, spec connect.Spec, peer connect.Peer, header http.Header) (int64, error)

// ClassFunc returns the class a call is taken as (sdk.Attempt.Class: one
// its policy declares, sdk.WithClass; "" for none), with KeyFunc's
// arguments. An error, or a class the policy does
// not declare, is answered as a key error.
type ClassFunc func(ctx context.Context, spec connect.Spec, peer connect.Peer, header http.Header) (string, error)

// PriorityFunc returns a call's priority (sdk.Attempt.Priority, 0 to
// sdk.MaxPriority: a rule with headroom keeps its last units for higher
// priorities), with KeyFunc's arguments. An error, or a priority out of
// range, is answered as a key error.
type PriorityFunc func(ctx context.Context, spec connect.Spec, peer connect.Peer, header http.Header) (int, error)

// Interceptor is a connect.Interceptor for one policy. It is safe for
// concurrent use.
type Interceptor struct {
	t       middleware.Taker
	p       *sdk.Policy
	key     KeyFunc
	cost    CostFunc
	class   ClassFunc
	prio    PriorityFunc
	failure middleware.Failure
	onKey   func(ctx context.Context, err error) error
}

var _ connect.Interceptor = (*Interceptor)(nil)

// Option configures an Interceptor in New.
type Option func(*Interceptor)

// WithCost sets the function that gives a call's cost (default: every
// call costs 1).
func WithCost(f CostFunc) Option { return func(i *Interceptor) { i.cost = f } }

// WithClass sets the function that gives a call's message class
// (default: none).
func WithClass(f ClassFunc) Option { return func(i *Interceptor) { i.class = f } }

// WithPriority sets the function that gives a call's priority (default:
// 0, the lowest).
func WithPriority(f PriorityFunc) Option { return func(i *Interceptor) { i.prio = f } }

// WithFailure sets what happens when the limiter cannot decide (default
// middleware.FailurePolicy: as the policy says).
func WithFailure(f middleware.Failure) Option { return func(i *Interceptor) { i.failure = f } }

// WithKeyError sets the error returned for a call whose key or cost could
// not be found or was refused by the limiter (err says why; it may quote
// the key function's own error). The default is connect.CodeInvalidArgument
// with a message that quotes nothing. Nothing was consumed.
func WithKeyError(f func(ctx context.Context, err error) error) Option {
	return func(i *Interceptor) { i.onKey = f }
}

// New returns an Interceptor that limits calls with t under p, keyed by
// key. t, p and key are required.
func New(t middleware.Taker, p *sdk.Policy, key KeyFunc, opts ...Option) (*Interceptor, error) {
	if err := middleware.CheckNew("connectlimit", t, p, key != nil); err != nil {
		return nil, err
	}
	i := &Interceptor{t: t, p: p, key: key}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

// WrapUnary decides a unary call before its handler runs.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		v := i.decide(ctx, req.Spec(), req.Peer(), req.Header())
		if err := i.refusal(ctx, v); err != nil {
			return nil, err
		}
		res, err := next(ctx, req)
		var ce *connect.Error
		switch {
		case err == nil:
			v.SetHeaders(res.Header(), i.p)
		case errors.As(err, &ce):
			v.SetHeaders(ce.Meta(), i.p)
		}
		return res, err
	}
}

// WrapStreamingClient returns next: client streams are not limited.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler decides a stream when it opens.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		v := i.decide(ctx, conn.Spec(), conn.Peer(), conn.RequestHeader())
		if err := i.refusal(ctx, v); err != nil {
			return err
		}
		v.SetHeaders(conn.ResponseHeader(), i.p)
		return next(ctx, conn)
	}
}

func (i *Interceptor) decide(ctx context.Context, spec connect.Spec, peer connect.Peer, h http.Header) middleware.Verdict {
	s, err := i.key(ctx, spec, peer, h)
	a := sdk.Attempt{Subject: s}
	if err == nil && i.cost != nil {
		a.Cost, err = i.cost(ctx, spec, peer, h)
	}
	if err == nil && i.class != nil {
		a.Class, err = i.class(ctx, spec, peer, h)
	}
	if err == nil && i.prio != nil {
		a.Priority, err = i.prio(ctx, spec, peer, h)
	}
	return middleware.Decide(ctx, i.t, i.p, i.failure, a, err)
}

// refusal is the error a refused call returns; nil when it goes on.
func (i *Interceptor) refusal(ctx context.Context, v middleware.Verdict) error {
	switch v.Outcome {
	case middleware.Allow, middleware.Pass:
		return nil
	case middleware.Deny:
		e := connect.NewError(connect.CodeResourceExhausted, errors.New(v.Message()))
		if d := v.Decision; !d.CostTooHigh && d.RetryAfter > 0 {
			if det, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
				e.AddDetail(det)
			}
		}
		v.SetHeaders(e.Meta(), i.p)
		return e
	case middleware.BadKey:
		if i.onKey != nil {
			return i.onKey(ctx, v.Err)
		}
		return connect.NewError(connect.CodeInvalidArgument, errors.New(v.Message()))
	}
	return connect.NewError(connect.CodeUnavailable, errors.New(v.Message()))
}
