package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // gzip-compressed requests, as connect takes them
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/freqcap/freqcap/gen/envoy/service/ratelimit/v3/ratelimitv3connect"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/protoconv"
)

// The gRPC stack. Calls in the gRPC protocol (content type
// application/grpc…, over HTTP/2) are served by grpc-go's transport,
// whose cost per call is about half of net/http's HTTP/2 server with
// connect (docs/BENCHMARKS.md); the other protocols (Connect, gRPC-Web,
// HTTP/JSON, and /healthz, /readyz, /metrics) by connect over net/http.
// Both stacks call the same handler of each operation (the connect
// handler methods of service, policyService, overrideService,
// personService and envoyService) through the same frame (drain,
// credentials before the body, the call's time bound, metrics, logs), so
// a call's answer does not depend on the stack. split.go routes each connection by its first
// request.

// attrErrorType is the error.type of a failed call's span.
const attrErrorType = attribute.Key("error.type")

// streamWorkers is the number of goroutines that serve gRPC calls (more
// calls at once each get a goroutine of their own).
const streamWorkers = 64

// newGRPC returns the server of the gRPC stack, serving every method of
// the connect handlers (grpcServices).
func (s *Server) newGRPC() *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestSize),
		grpc.MaxConcurrentStreams(250), // net/http's HTTP/2 default
		// Calls run on a pool of goroutines whose stacks have grown
		// (a new goroutine per call grows its stack on every call).
		grpc.NumStreamWorkers(streamWorkers),
		// As net/http's side: idle connections close after idleTimeout;
		// clients may ping every 10 s (grpc-go's default would answer a
		// client pinging more often than every 5 min with GOAWAY).
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if s.cfg.TracerProvider != nil || s.cfg.MeterProvider != nil {
		// otelgrpc: what otelconnect does on connect's stack (otel.go).
		o := []otelgrpc.Option{otelgrpc.WithPropagators(propagation.TraceContext{})}
		if s.cfg.TracerProvider != nil {
			o = append(o, otelgrpc.WithTracerProvider(s.cfg.TracerProvider))
		}
		if s.cfg.MeterProvider != nil {
			o = append(o, otelgrpc.WithMeterProvider(s.cfg.MeterProvider))
		}
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(o...)))
	}
	g := grpc.NewServer(opts...)
	for _, sd := range s.grpcServices() {
		g.RegisterService(sd, nil)
	}
	return g
}

// grpcServices are the services of the gRPC stack: every method of the
// connect handlers New mounts (TestGRPCServesEveryMethod).
func (s *Server) grpcServices() []*grpc.ServiceDesc {
	svc := newService(s)
	ps := &policyService{s: s}
	ovs := &overrideService{s: s}
	pes := &personService{s: s}
	es := &envoyService{svc: svc}
	desc := func(name string, methods ...grpc.MethodDesc) *grpc.ServiceDesc {
		return &grpc.ServiceDesc{ServiceName: name, HandlerType: (*any)(nil), Methods: methods}
	}
	return []*grpc.ServiceDesc{
		desc(freqcapv1connect.FreqcapServiceName,
			unary(s, "Take", svc.Take),
			unary(s, "Peek", svc.Peek),
			unary(s, "Reserve", svc.Reserve),
			unary(s, "Commit", svc.Commit),
			unary(s, "Cancel", svc.Cancel),
			unary(s, "TakeBatch", svc.TakeBatch),
			unary(s, "PeekBatch", svc.PeekBatch),
			unary(s, "Inspect", svc.Inspect),
			unary(s, "Reset", svc.Reset),
			unary(s, "ListPolicies", svc.ListPolicies),
		),
		desc(freqcapv1connect.PolicyServiceName,
			unary(s, "PlanPolicies", ps.PlanPolicies),
			unary(s, "ApplyPolicies", ps.ApplyPolicies),
			unary(s, "PolicyHistory", ps.PolicyHistory),
			unary(s, "GetPolicyVersion", ps.GetPolicyVersion),
			unary(s, "RollbackPolicies", ps.RollbackPolicies),
		),
		desc(freqcapv1connect.OverrideServiceName,
			unary(s, "SetOverride", ovs.SetOverride),
			unary(s, "ListOverrides", ovs.ListOverrides),
			unary(s, "DeleteOverride", ovs.DeleteOverride),
		),
		desc(freqcapv1connect.PersonServiceName,
			unary(s, "LinkIdentity", pes.LinkIdentity),
			unary(s, "UnlinkIdentity", pes.UnlinkIdentity),
			unary(s, "GetPerson", pes.GetPerson),
			unary(s, "SetPersonZone", pes.SetPersonZone),
		),
		desc(ratelimitv3connect.RateLimitServiceName,
			unary(s, "ShouldRateLimit", es.ShouldRateLimit),
		),
	}
}

// unary serves the connect handler h as the gRPC method name: frame
// first (credentials from the metadata: a refused call's message is
// never read or parsed), then the message, then h; h's headers and
// trailers become the call's, a *connect.Error its status with the same
// code, message and details.
func unary[Req, Res any](s *Server, name string, h func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var out *Res
		err := s.frame(ctx, name, s.grpcAuthenticated, func(ctx context.Context) error {
			in := new(Req)
			if err := dec(in); err != nil {
				return decodeError(err)
			}
			res, err := h(ctx, connect.NewRequest(in))
			if err != nil {
				return err
			}
			if err := sendMetadata(ctx, res.Header(), nil); err != nil { // the handlers set no trailers
				return err
			}
			out = res.Msg
			return nil
		})
		if err != nil {
			annotate(ctx, attrErrorType.String(connect.CodeOf(err).String())) // as otelconnect's spans
			return nil, grpcStatus(ctx, err)
		}
		return out, nil
	}}
}

// grpcAuthenticated is authFirst and guard on the gRPC stack: the
// caller whose bearer secret the call's metadata sends (without
// credentials: loopback clients only, as guard).
func (s *Server) grpcAuthenticated(ctx context.Context) (*Caller, error) {
	remote := remoteAddr(ctx, nil)
	if s.callers == nil {
		authority := metadata.ValueFromIncomingContext(ctx, ":authority")
		if !httpauth.LoopbackHostport(remote) || len(authority) > 0 && !httpauth.LoopbackHostport(authority[0]) {
			return nil, protoconv.NewError(connect.CodePermissionDenied, freqcapv1.Reason_REASON_PERMISSION_DENIED,
				"freqcap serve without credentials answers loopback clients only")
		}
		return local, nil
	}
	return s.authenticate(http.Header{"Authorization": metadata.ValueFromIncomingContext(ctx, "authorization")}, remote)
}

// remoteAddr is the client's address of a call on either stack: req's
// peer on connect's, the transport's peer on grpc-go's (req nil or
// without one).
func remoteAddr(ctx context.Context, req connect.AnyRequest) string {
	if req != nil {
		if a := req.Peer().Addr; a != "" {
			return a
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// decodeError is a message that did not decode: ResourceExhausted over
// MaxRequestSize (grpc-go's code, as connect's), else InvalidArgument.
func decodeError(err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		return connect.NewError(connect.CodeResourceExhausted, errors.New(status.Convert(err).Message()))
	}
	return protoconv.NewError(connect.CodeInvalidArgument, freqcapv1.Reason_REASON_INVALID_ARGUMENT, "the request message does not parse: "+status.Convert(err).Message())
}

// sendMetadata sends a handler's response headers and trailers as the
// call's (gRPC metadata keys are lower case).
func sendMetadata(ctx context.Context, header, trailer http.Header) error {
	if md := toMetadata(header); md != nil {
		if err := grpc.SetHeader(ctx, md); err != nil {
			return err
		}
	}
	if md := toMetadata(trailer); md != nil {
		return grpc.SetTrailer(ctx, md)
	}
	return nil
}

func toMetadata(h http.Header) metadata.MD {
	if len(h) == 0 {
		return nil
	}
	md := make(metadata.MD, len(h))
	for k, vs := range h {
		md[strings.ToLower(k)] = vs
	}
	return md
}

// grpcStatus is err as a gRPC status: a *connect.Error's code, message and
// details (its metadata, e.g. a lockout's Retry-After, in the trailers),
// as connect's gRPC protocol sends them.
func grpcStatus(ctx context.Context, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Code(connect.CodeOf(err)), err.Error())
	}
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	if md := toMetadata(ce.Meta()); md != nil {
		_ = grpc.SetTrailer(ctx, md) // best effort: the status carries the reason
	}
	return status.FromProto(st).Err()
}
