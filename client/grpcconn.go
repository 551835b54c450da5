package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
)

// grpcConn is one connection of a Client speaking gRPC without an
// Options.HTTPClient: grpc-go's transport, which costs about half of
// net/http's HTTP/2 client with connect per call (docs/BENCHMARKS.md).
// It serves the generated connect client interfaces, so the rest of the
// client does not depend on the transport: a call's answer, its error's
// code, message and details (the reason) are the same as connect's.
type grpcConn struct {
	cc    *grpc.ClientConn
	token string // "Bearer …", or ""
}

// reconnect is the backoff between dials of a lost connection (dialGRPC).
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// maxRecv bounds an answer (a batch of DefaultMaxBatch decisions is far
// smaller).
const maxRecv = 64 << 20

// dialGRPC returns a connection to baseURL ("http://host:port" in clear
// text, "https://host:port" with tlsConfig). grpc.NewClient connects at
// the first call. A lost connection is dialled again after reconnect's
// backoff: grpc-go's default waits 1 s, then 1.6 s, 2.56 s … while a call
// meanwhile fails at once with the last dial's error, so after a restart
// of serve (about 100 ms) a Retry's re-sends failed for seconds; this
// starts at 50 ms and waits at most 2 s.
func dialGRPC(baseURL string, tlsConfig *tls.Config, token string) (*grpcConn, error) {
	creds := insecure.NewCredentials()
	host, ok := strings.CutPrefix(baseURL, "http://")
	if !ok {
		if host, ok = strings.CutPrefix(baseURL, "https://"); !ok {
			return nil, fmt.Errorf("client: %q is not an http:// or https:// URL", baseURL)
		}
		cfg := tlsConfig
		if cfg == nil {
			cfg = &tls.Config{}
		}
		creds = credentials.NewTLS(cfg)
	}
	host = strings.TrimRight(host, "/")
	cc, err := grpc.NewClient("passthrough:///"+host, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)), grpc.WithConnectParams(reconnect))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	g := &grpcConn{cc: cc}
	if token != "" {
		g.token = "Bearer " + token
	}
	return g, nil
}

// grpcLife is what a Client's cleanup is attached to (Client.dialGRPC):
// the Client and every service stub (grpcRef) hold it, and invoke keeps
// it alive until its call returns, so a Client dropped during a call
// (its last use may come before the call ends) never has its connections
// closed under that call. Nothing it reaches points back at it (the
// cleanup's argument must not).
type grpcLife struct{ conns []*grpcConn }

// grpcRef is a connection as the service stubs hold it.
type grpcRef struct {
	*grpcConn
	life *grpcLife
}

// invoke calls method with req's message: the answer, or the error as a
// *connect.Error.
func invoke[Req, Res any](g grpcRef, ctx context.Context, method string, req *connect.Request[Req]) (*connect.Response[Res], error) {
	defer runtime.KeepAlive(g.life)
	if g.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", g.token)
	}
	out := new(Res)
	var trailer metadata.MD
	if err := g.cc.Invoke(ctx, method, req.Msg, out, grpc.Trailer(&trailer)); err != nil {
		ce := connectError(err)
		for k, vs := range trailer {
			for _, v := range vs {
				ce.Meta().Add(k, v) // e.g. a lockout's Retry-After
			}
		}
		return nil, ce
	}
	return connect.NewResponse(out), nil
}

// connectError is a grpc-go error as connect's client reports it: the
// same code, message and details. An error with details came from a
// freqcap server (every refusal of serve's carries its reason): it is a
// wire error (connect.IsWireError), as connect marks an error a server
// sent; one without was made by the transport (a reset stream, a closed
// connection, the context), which retry.go may re-send.
func connectError(err error) *connect.Error {
	st, ok := status.FromError(err)
	if !ok {
		return connect.NewError(connect.CodeUnknown, err)
	}
	details := st.Proto().GetDetails()
	var ce *connect.Error
	if len(details) > 0 {
		ce = connect.NewWireError(connect.Code(st.Code()), errors.New(st.Message()))
	} else {
		ce = connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	for _, d := range details {
		if ed, err := connect.NewErrorDetail(d); err == nil {
			ce.AddDetail(ed)
		}
	}
	return ce
}

func (g *grpcConn) close() error { return g.cc.Close() }

// The methods of the services, by their connect procedure names
// (the gRPC method names).

type grpcFreqcap struct{ grpcRef }

var _ freqcapv1connect.FreqcapServiceClient = grpcFreqcap{}

func (g grpcFreqcap) Take(ctx context.Context, r *connect.Request[freqcapv1.TakeRequest]) (*connect.Response[freqcapv1.TakeResponse], error) {
	return invoke[freqcapv1.TakeRequest, freqcapv1.TakeResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceTakeProcedure, r)
}

func (g grpcFreqcap) Peek(ctx context.Context, r *connect.Request[freqcapv1.PeekRequest]) (*connect.Response[freqcapv1.PeekResponse], error) {
	return invoke[freqcapv1.PeekRequest, freqcapv1.PeekResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServicePeekProcedure, r)
}

func (g grpcFreqcap) Reserve(ctx context.Context, r *connect.Request[freqcapv1.ReserveRequest]) (*connect.Response[freqcapv1.ReserveResponse], error) {
	return invoke[freqcapv1.ReserveRequest, freqcapv1.ReserveResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceReserveProcedure, r)
}

func (g grpcFreqcap) Commit(ctx context.Context, r *connect.Request[freqcapv1.CommitRequest]) (*connect.Response[freqcapv1.CommitResponse], error) {
	return invoke[freqcapv1.CommitRequest, freqcapv1.CommitResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceCommitProcedure, r)
}

func (g grpcFreqcap) Cancel(ctx context.Context, r *connect.Request[freqcapv1.CancelRequest]) (*connect.Response[freqcapv1.CancelResponse], error) {
	return invoke[freqcapv1.CancelRequest, freqcapv1.CancelResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceCancelProcedure, r)
}

func (g grpcFreqcap) TakeBatch(ctx context.Context, r *connect.Request[freqcapv1.TakeBatchRequest]) (*connect.Response[freqcapv1.TakeBatchResponse], error) {
	return invoke[freqcapv1.TakeBatchRequest, freqcapv1.TakeBatchResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceTakeBatchProcedure, r)
}

func (g grpcFreqcap) PeekBatch(ctx context.Context, r *connect.Request[freqcapv1.PeekBatchRequest]) (*connect.Response[freqcapv1.PeekBatchResponse], error) {
	return invoke[freqcapv1.PeekBatchRequest, freqcapv1.PeekBatchResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServicePeekBatchProcedure, r)
}

func (g grpcFreqcap) Inspect(ctx context.Context, r *connect.Request[freqcapv1.InspectRequest]) (*connect.Response[freqcapv1.InspectResponse], error) {
	return invoke[freqcapv1.InspectRequest, freqcapv1.InspectResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceInspectProcedure, r)
}

func (g grpcFreqcap) Reset(ctx context.Context, r *connect.Request[freqcapv1.ResetRequest]) (*connect.Response[freqcapv1.ResetResponse], error) {
	return invoke[freqcapv1.ResetRequest, freqcapv1.ResetResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceResetProcedure, r)
}

func (g grpcFreqcap) ListPolicies(ctx context.Context, r *connect.Request[freqcapv1.ListPoliciesRequest]) (*connect.Response[freqcapv1.ListPoliciesResponse], error) {
	return invoke[freqcapv1.ListPoliciesRequest, freqcapv1.ListPoliciesResponse](g.grpcRef, ctx, freqcapv1connect.FreqcapServiceListPoliciesProcedure, r)
}

type grpcPolicies struct{ grpcRef }

var _ freqcapv1connect.PolicyServiceClient = grpcPolicies{}

func (g grpcPolicies) PlanPolicies(ctx context.Context, r *connect.Request[freqcapv1.PlanPoliciesRequest]) (*connect.Response[freqcapv1.PlanPoliciesResponse], error) {
	return invoke[freqcapv1.PlanPoliciesRequest, freqcapv1.PlanPoliciesResponse](g.grpcRef, ctx, freqcapv1connect.PolicyServicePlanPoliciesProcedure, r)
}

func (g grpcPolicies) ApplyPolicies(ctx context.Context, r *connect.Request[freqcapv1.ApplyPoliciesRequest]) (*connect.Response[freqcapv1.ApplyPoliciesResponse], error) {
	return invoke[freqcapv1.ApplyPoliciesRequest, freqcapv1.ApplyPoliciesResponse](g.grpcRef, ctx, freqcapv1connect.PolicyServiceApplyPoliciesProcedure, r)
}

func (g grpcPolicies) PolicyHistory(ctx context.Context, r *connect.Request[freqcapv1.PolicyHistoryRequest]) (*connect.Response[freqcapv1.PolicyHistoryResponse], error) {
	return invoke[freqcapv1.PolicyHistoryRequest, freqcapv1.PolicyHistoryResponse](g.grpcRef, ctx, freqcapv1connect.PolicyServicePolicyHistoryProcedure, r)
}

func (g grpcPolicies) GetPolicyVersion(ctx context.Context, r *connect.Request[freqcapv1.GetPolicyVersionRequest]) (*connect.Response[freqcapv1.GetPolicyVersionResponse], error) {
	return invoke[freqcapv1.GetPolicyVersionRequest, freqcapv1.GetPolicyVersionResponse](g.grpcRef, ctx, freqcapv1connect.PolicyServiceGetPolicyVersionProcedure, r)
}

func (g grpcPolicies) RollbackPolicies(ctx context.Context, r *connect.Request[freqcapv1.RollbackPoliciesRequest]) (*connect.Response[freqcapv1.RollbackPoliciesResponse], error) {
	return invoke[freqcapv1.RollbackPoliciesRequest, freqcapv1.RollbackPoliciesResponse](g.grpcRef, ctx, freqcapv1connect.PolicyServiceRollbackPoliciesProcedure, r)
}

type grpcOverrides struct{ grpcRef }

var _ freqcapv1connect.OverrideServiceClient = grpcOverrides{}

func (g grpcOverrides) SetOverride(ctx context.Context, r *connect.Request[freqcapv1.SetOverrideRequest]) (*connect.Response[freqcapv1.SetOverrideResponse], error) {
	return invoke[freqcapv1.SetOverrideRequest, freqcapv1.SetOverrideResponse](g.grpcRef, ctx, freqcapv1connect.OverrideServiceSetOverrideProcedure, r)
}

func (g grpcOverrides) ListOverrides(ctx context.Context, r *connect.Request[freqcapv1.ListOverridesRequest]) (*connect.Response[freqcapv1.ListOverridesResponse], error) {
	return invoke[freqcapv1.ListOverridesRequest, freqcapv1.ListOverridesResponse](g.grpcRef, ctx, freqcapv1connect.OverrideServiceListOverridesProcedure, r)
}

func (g grpcOverrides) DeleteOverride(ctx context.Context, r *connect.Request[freqcapv1.DeleteOverrideRequest]) (*connect.Response[freqcapv1.DeleteOverrideResponse], error) {
	return invoke[freqcapv1.DeleteOverrideRequest, freqcapv1.DeleteOverrideResponse](g.grpcRef, ctx, freqcapv1connect.OverrideServiceDeleteOverrideProcedure, r)
}

type grpcPeople struct{ grpcRef }

var _ freqcapv1connect.PersonServiceClient = grpcPeople{}

func (g grpcPeople) LinkIdentity(ctx context.Context, r *connect.Request[freqcapv1.LinkIdentityRequest]) (*connect.Response[freqcapv1.LinkIdentityResponse], error) {
	return invoke[freqcapv1.LinkIdentityRequest, freqcapv1.LinkIdentityResponse](g.grpcRef, ctx, freqcapv1connect.PersonServiceLinkIdentityProcedure, r)
}

func (g grpcPeople) UnlinkIdentity(ctx context.Context, r *connect.Request[freqcapv1.UnlinkIdentityRequest]) (*connect.Response[freqcapv1.UnlinkIdentityResponse], error) {
	return invoke[freqcapv1.UnlinkIdentityRequest, freqcapv1.UnlinkIdentityResponse](g.grpcRef, ctx, freqcapv1connect.PersonServiceUnlinkIdentityProcedure, r)
}

func (g grpcPeople) GetPerson(ctx context.Context, r *connect.Request[freqcapv1.GetPersonRequest]) (*connect.Response[freqcapv1.GetPersonResponse], error) {
	return invoke[freqcapv1.GetPersonRequest, freqcapv1.GetPersonResponse](g.grpcRef, ctx, freqcapv1connect.PersonServiceGetPersonProcedure, r)
}

func (g grpcPeople) SetPersonZone(ctx context.Context, r *connect.Request[freqcapv1.SetPersonZoneRequest]) (*connect.Response[freqcapv1.SetPersonZoneResponse], error) {
	return invoke[freqcapv1.SetPersonZoneRequest, freqcapv1.SetPersonZoneResponse](g.grpcRef, ctx, freqcapv1connect.PersonServiceSetPersonZoneProcedure, r)
}
