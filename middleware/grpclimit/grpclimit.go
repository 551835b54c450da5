// Package grpclimit rate limits the calls of a google.golang.org/grpc
// server with a freqcap policy: unary and stream server interceptors that
// name each call's subject with a key function, take one attempt from the
// limiter (an in-process *sdk.Limiter or the remote client of freqcap
// serve, see middleware.Taker), and either run the handler or refuse the
// call with codes.ResourceExhausted.
//
//	lim, err := grpclimit.New(limiter, policy, func(ctx context.Context, method string, req any) (sdk.Subject, error) {
//		md, _ := metadata.FromIncomingContext(ctx)
//		return sdk.Subject{"client": strings.Join(md.Get("x-api-key"), ",")}, nil
//	})
//	…
//	srv := grpc.NewServer(grpc.UnaryInterceptor(lim.Unary()), grpc.StreamInterceptor(lim.Stream()))
//
// Both allowed and denied calls get the IETF headers as response header
// metadata, lowercase as gRPC wants: ratelimit and ratelimit-policy, plus
// retry-after (whole seconds) on a denial a retry can pass — the values
// HTTP answers carry (package ratelimitheaders). A denial's status also
// carries a google.rpc.RetryInfo detail with the same delay. What each call
// gets (middleware.Decide sorts it out):
//
//   - allowed: the handler runs (the headers are set, sent with its
//     response);
//   - denied: codes.ResourceExhausted, with the headers;
//   - the key or cost function fails, or the limiter refuses the subject
//     or cost: codes.InvalidArgument (WithKeyError replaces it), nothing
//     consumed; middleware.ErrSkip lets the call through undecided;
//   - the limiter could not decide: as WithFailure says (by default as
//     the policy says: through, without headers, for a fail-open policy;
//     codes.Unavailable for a fail-closed one).
//
// A stream is decided once, when it opens, before any message: its key
// function is called with a nil request.
package grpclimit

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/freqcap/freqcap/middleware"
	"github.com/freqcap/freqcap/sdk"
)

// KeyFunc returns the subject a call counts against. method is the full
// method name ("/package.Service/Method"); req is the request message of
// a unary call, nil for a stream. An error refuses the call
// (codes.InvalidArgument by default) and consumes nothing;
// middleware.ErrSkip lets it through undecided.
type KeyFunc func(ctx context.Context, method string, req any) (sdk.Subject, error)

// CostFunc returns the units a call takes (0 means 1), with KeyFunc's
// arguments. An error is answered as a key error.
type CostFunc func(ctx context.Context, method string, req any) (int64, error)

// ClassFunc returns the class a call is taken as (sdk.Attempt.Class: one
// its policy declares, sdk.WithClass; "" for none), with KeyFunc's
// arguments. An error, or a class the policy does
// not declare, is answered as a key error.
type ClassFunc func(ctx context.Context, method string, req any) (string, error)

// PriorityFunc returns a call's priority (sdk.Attempt.Priority, 0 to
// sdk.MaxPriority: a rule with headroom keeps its last units for higher
// priorities), with KeyFunc's arguments. An error, or a priority out of
// range, is answered as a key error.
type PriorityFunc func(ctx context.Context, method string, req any) (int, error)

// Limiter makes the interceptors of one policy. It is safe for concurrent
// use.
type Limiter struct {
	t       middleware.Taker
	p       *sdk.Policy
	key     KeyFunc
	cost    CostFunc
	class   ClassFunc
	prio    PriorityFunc
	failure middleware.Failure
	onKey   func(ctx context.Context, err error) error
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithCost sets the function that gives a call's cost (default: every
// call costs 1).
func WithCost(f CostFunc) Option { return func(l *Limiter) { l.cost = f } }

// WithClass sets the function that gives a call's message class
// (default: none).
func WithClass(f ClassFunc) Option { return func(l *Limiter) { l.class = f } }

// WithPriority sets the function that gives a call's priority (default:
// 0, the lowest).
func WithPriority(f PriorityFunc) Option { return func(l *Limiter) { l.prio = f } }

// WithFailure sets what happens when the limiter cannot decide (default
// middleware.FailurePolicy: as the policy says).
func WithFailure(f middleware.Failure) Option { return func(l *Limiter) { l.failure = f } }

// WithKeyError sets the error returned for a call whose key or cost could
// not be found or was refused by the limiter (err says why; it may quote
// the key function's own error). The default is codes.InvalidArgument
// with a message that quotes nothing. Nothing was consumed.
func WithKeyError(f func(ctx context.Context, err error) error) Option {
	return func(l *Limiter) { l.onKey = f }
}

// New returns the interceptors' Limiter: calls are limited with t under
// p, keyed by key. t, p and key are required.
func New(t middleware.Taker, p *sdk.Policy, key KeyFunc, opts ...Option) (*Limiter, error) {
	if err := middleware.CheckNew("grpclimit", t, p, key != nil); err != nil {
		return nil, err
	}
	l := &Limiter{t: t, p: p, key: key}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Unary returns the unary server interceptor.
func (l *Limiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		v := l.decide(ctx, info.FullMethod, req)
		if md := Metadata(v, l.p); len(md) > 0 {
			// Sent as response headers, before the status, with
			// a reply or an error alike.
			if err := grpc.SetHeader(ctx, md); err != nil {
				return nil, status.Errorf(codes.Internal, "grpclimit: setting the rate-limit headers: %v", err)
			}
		}
		if err := l.refusal(ctx, v); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor. The stream is decided
// when it opens.
func (l *Limiter) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		v := l.decide(ctx, info.FullMethod, nil)
		if md := Metadata(v, l.p); len(md) > 0 {
			if err := ss.SetHeader(md); err != nil {
				return status.Errorf(codes.Internal, "grpclimit: setting the rate-limit headers: %v", err)
			}
		}
		if err := l.refusal(ctx, v); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func (l *Limiter) decide(ctx context.Context, method string, req any) middleware.Verdict {
	s, err := l.key(ctx, method, req)
	a := sdk.Attempt{Subject: s}
	if err == nil && l.cost != nil {
		a.Cost, err = l.cost(ctx, method, req)
	}
	if err == nil && l.class != nil {
		a.Class, err = l.class(ctx, method, req)
	}
	if err == nil && l.prio != nil {
		a.Priority, err = l.prio(ctx, method, req)
	}
	return middleware.Decide(ctx, l.t, l.p, l.failure, a, err)
}

// refusal is the error a refused call returns; nil when it goes on.
func (l *Limiter) refusal(ctx context.Context, v middleware.Verdict) error {
	switch v.Outcome {
	case middleware.Allow, middleware.Pass:
		return nil
	case middleware.Deny:
		st := status.New(codes.ResourceExhausted, v.Message())
		if d := v.Decision; !d.CostTooHigh && d.RetryAfter > 0 {
			if wd, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
				st = wd
			}
		}
		return st.Err()
	case middleware.BadKey:
		if l.onKey != nil {
			return l.onKey(ctx, v.Err)
		}
		return status.Error(codes.InvalidArgument, v.Message())
	}
	return status.Error(codes.Unavailable, v.Message())
}

// Metadata is v's rate-limit headers as gRPC metadata: ratelimit,
// ratelimit-policy and retry-after, as middleware.Verdict.SetHeaders
// sets them for HTTP, with lowercase keys. It is empty for outcomes
// without a decision.
func Metadata(v middleware.Verdict, p *sdk.Policy) metadata.MD {
	h := http.Header{}
	v.SetHeaders(h, p)
	md := metadata.MD{}
	for k, vs := range h {
		md[strings.ToLower(k)] = vs
	}
	return md
}
