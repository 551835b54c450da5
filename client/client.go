// Package client calls a freqcap serve over the network with the calls
// of sdk.Limiter: the same methods, arguments and results (sdk.Decision,
// sdk.Inspection, sdk.BatchResult), so a Go service moves from deciding
// in-process to deciding remotely by changing one constructor:
//
//	var lim client.Limiter = sdk.New(redis.New(rdb, nil)) // in-process
//	var lim client.Limiter = client.New("http://freqcap:8081", &client.Options{Token: tok}) // remote
//	d, err := lim.Allow(ctx, push, sdk.Subject{"user": id})
//
// Only the policy's name goes over the wire: the server's policy of that
// name decides (Policies returns the server's policies). Errors wrap the
// sdk's sentinels where the server reports one (errors.Is(err,
// sdk.ErrInvalidSubject) holds alike), and the connect error with the
// call's code (connect.CodeOf). A policy built with sdk.WithFailOpen answers
// allowed and Degraded when the server cannot be reached or cannot decide,
// as the in-process Limiter does when its backend fails.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/internal/wire"
	"github.com/freqcap/freqcap/sdk"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limiter is what *sdk.Limiter and *Client have in common: code written
// against it runs in-process or remote alike. Reserve is left out only
// because its reservation types differ (*sdk.Reservation,
// *client.Reservation); both have ID, Commit and Cancel.
type Limiter interface {
	Allow(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error)
	Take(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error)
	Peek(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error)
	TakeBatch(ctx context.Context, p *sdk.Policy, as []sdk.Attempt) []sdk.BatchResult
	PeekBatch(ctx context.Context, p *sdk.Policy, as []sdk.Attempt) []sdk.BatchResult
	Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error)
	Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error
}

var (
	_ Limiter = (*sdk.Limiter)(nil)
	_ Limiter = (*Client)(nil)
)

// Protocol is the wire protocol a Client speaks.
type Protocol int

// The protocols. All three reach the same handlers.
const (
	// GRPC: gRPC over HTTP/2 (clear-text HTTP/2 for an http:// URL),
	// binary protobuf. The default.
	GRPC Protocol = iota
	// ConnectJSON: the Connect protocol, JSON bodies, over HTTP/1.1
	// (HTTP/2 over TLS): what curl speaks.
	ConnectJSON
	// ConnectProto: the Connect protocol with binary protobuf bodies.
	ConnectProto
)

// Options configures a Client. Nil means defaults.
type Options struct {
	// Token is the caller's secret, sent as "Authorization: Bearer".
	Token string
	// Protocol is the wire protocol (default GRPC).
	Protocol Protocol
	// HTTPClient sends the requests (default: one with HTTP/2, clear
	// text for http:// URLs; TLS from TLSConfig).
	HTTPClient connect.HTTPClient
	// TLSConfig is the default HTTP client's TLS configuration (e.g.
	// the server's CA). Ignored with HTTPClient.
	TLSConfig *tls.Config
	// Timeout bounds each call (0: only ctx does).
	Timeout time.Duration
	// Conns is the number of HTTP clients (each with its own
	// connections) the default HTTP client is made of, each call taking
	// the next in turn (default DefaultConns). Over HTTP/2 the calls of
	// one connection share its one writer and reader; more connections
	// may help where client and server have cores to spare (on loopback
	// on 2 shared cores, 4 connections cost as much CPU per call as one:
	// docs/benchmarks/HISTORY.md). Ignored with HTTPClient.
	Conns int
}

// DefaultConns is Options.Conns's default.
const DefaultConns = 1

// Client calls one freqcap serve (or a load balancer in front of
// replicas). It is safe for concurrent use; create one and share it.
type Client struct {
	rpcs    []freqcapv1connect.FreqcapServiceClient // one per connection (Options.Conns)
	next    atomic.Uint32
	timeout time.Duration
	// The administrative calls (rare) use the first connection.
	store     freqcapv1connect.PolicyServiceClient
	overrides freqcapv1connect.OverrideServiceClient
}

// rpc returns the stub of the next connection in turn.
func (c *Client) rpc() freqcapv1connect.FreqcapServiceClient {
	if len(c.rpcs) == 1 {
		return c.rpcs[0]
	}
	return c.rpcs[c.next.Add(1)%uint32(len(c.rpcs))]
}

// ErrShuttingDown is wrapped by the errors of calls a server refused
// because it was shutting down: nothing was done, and the call can be
// sent again (to another replica).
var ErrShuttingDown = errors.New("the server is shutting down: nothing was done")

// New returns a Client of the server at baseURL ("http://host:port" or
// "https://…").
func New(baseURL string, opts *Options) *Client {
	var o Options
	if opts != nil {
		o = *opts
	}
	hcs := []connect.HTTPClient{o.HTTPClient}
	if o.HTTPClient == nil {
		n := o.Conns
		if n <= 0 {
			n = DefaultConns
		}
		hcs = make([]connect.HTTPClient, n)
		for i := range hcs {
			hcs[i] = newHTTPClient(baseURL, &o) // its own Transport: its own connection
		}
	}
	var copts []connect.ClientOption
	switch o.Protocol {
	case GRPC:
		copts = append(copts, connect.WithGRPC())
	case ConnectJSON:
		copts = append(copts, wire.JSONCodecs()[0])
	}
	if o.Token != "" {
		tok := "Bearer " + o.Token
		copts = append(copts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", tok)
				return next(ctx, req)
			}
		})))
	}
	c := &Client{timeout: o.Timeout}
	base := strings.TrimRight(baseURL, "/")
	for _, hc := range hcs {
		c.rpcs = append(c.rpcs, freqcapv1connect.NewFreqcapServiceClient(hc, base, copts...))
	}
	c.store = freqcapv1connect.NewPolicyServiceClient(hcs[0], base, copts...)
	c.overrides = freqcapv1connect.NewOverrideServiceClient(hcs[0], base, copts...)
	return c
}

// newHTTPClient is the default HTTP client of New: HTTP/2, in clear
// text with prior knowledge for gRPC to an http:// URL.
func newHTTPClient(baseURL string, o *Options) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = o.TLSConfig
	t.MaxIdleConnsPerHost = 256
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	t.Protocols.SetHTTP2(true)
	if o.Protocol == GRPC && strings.HasPrefix(baseURL, "http://") {
		// gRPC needs HTTP/2: in clear text, with prior knowledge.
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: t}
}

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return ctx, func() {}
}

// wrap names the operation and adds the sdk sentinel the server's reason
// stands for.
func wrap(op string, err error) error {
	reason := wire.ReasonOf(err)
	if reason == freqcapv1.Reason_REASON_SHUTTING_DOWN {
		return fmt.Errorf("client: %s: %w: %w", op, ErrShuttingDown, err)
	}
	if s := wire.Sentinel(reason); s != nil {
		return fmt.Errorf("client: %s: %w: %w", op, s, err)
	}
	return fmt.Errorf("client: %s: %w", op, err)
}

// undecided reports whether err means the server could not be reached or
// could not decide (where a fail-open policy answers degraded), as
// opposed to a refusal of the request itself.
func undecided(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal, connect.CodeAborted:
		return true
	}
	return false
}

// degraded is a fail-open policy's answer when the server did not decide.
func degraded(p *sdk.Policy, err error) sdk.Decision {
	return sdk.Decision{Allowed: true, Policy: p.Name(), At: time.Now(), Degraded: true, Err: err}
}

func name(p *sdk.Policy) string {
	if p == nil {
		return ""
	}
	return p.Name()
}

// Allow takes one unit for s: Take(ctx, p, sdk.Attempt{Subject: s}).
func (c *Client) Allow(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Decision, error) {
	return c.Take(ctx, p, sdk.Attempt{Subject: s})
}

// Take is sdk.Limiter.Take through the server.
func (c *Client) Take(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().Take(ctx, connect.NewRequest(&freqcapv1.TakeRequest{
		Policy: name(p), Subject: a.Subject, Cost: a.Cost, IdempotencyKey: a.IdempotencyKey,
	}))
	if err != nil {
		err = wrap("take", err)
		if p.FailOpen() && undecided(err) {
			return degraded(p, err), nil
		}
		return sdk.Decision{}, err
	}
	return wire.FromDecision(res.Msg.GetDecision()), nil
}

// Peek is sdk.Limiter.Peek through the server.
func (c *Client) Peek(ctx context.Context, p *sdk.Policy, a sdk.Attempt) (sdk.Decision, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().Peek(ctx, connect.NewRequest(&freqcapv1.PeekRequest{
		Policy: name(p), Subject: a.Subject, Cost: a.Cost,
	}))
	if err != nil {
		err = wrap("peek", err)
		if p.FailOpen() && undecided(err) {
			return degraded(p, err), nil
		}
		return sdk.Decision{}, err
	}
	return wire.FromDecision(res.Msg.GetDecision()), nil
}

// Reservation is units Reserve consumed and holds until Commit or Cancel
// (or until its ttl passes). Any replica of the server settles it. Only
// the first Commit or Cancel succeeds; later ones return an error
// wrapping sdk.ErrReservationNotFound.
type Reservation struct {
	c       *Client
	policy  string
	subject sdk.Subject
	id      string
}

// ID returns the reservation's id (empty for a degraded reservation).
func (r *Reservation) ID() string {
	if r == nil {
		return ""
	}
	return r.id
}

// Commit keeps the reserved units.
func (r *Reservation) Commit(ctx context.Context) error { return r.settle(ctx, true) }

// Cancel gives the reserved units back.
func (r *Reservation) Cancel(ctx context.Context) error { return r.settle(ctx, false) }

func (r *Reservation) settle(ctx context.Context, commit bool) error {
	if r == nil {
		return fmt.Errorf("client: settle: nil reservation: %w", sdk.ErrReservationNotFound)
	}
	if r.id == "" {
		return nil // degraded: nothing was held
	}
	ctx, cancel := r.c.ctx(ctx)
	defer cancel()
	if commit {
		_, err := r.c.rpc().Commit(ctx, connect.NewRequest(&freqcapv1.CommitRequest{Policy: r.policy, Subject: r.subject, ReservationId: r.id}))
		if err != nil {
			return wrap("commit", err)
		}
		return nil
	}
	_, err := r.c.rpc().Cancel(ctx, connect.NewRequest(&freqcapv1.CancelRequest{Policy: r.policy, Subject: r.subject, ReservationId: r.id}))
	if err != nil {
		return wrap("cancel", err)
	}
	return nil
}

// Reserve is sdk.Limiter.Reserve through the server: a denied Reserve
// returns a nil Reservation; a degraded one (fail-open) a Reservation
// whose Commit and Cancel do nothing.
func (c *Client) Reserve(ctx context.Context, p *sdk.Policy, a sdk.Attempt, ttl time.Duration) (sdk.Decision, *Reservation, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().Reserve(ctx, connect.NewRequest(&freqcapv1.ReserveRequest{
		Policy: name(p), Subject: a.Subject, Cost: a.Cost, IdempotencyKey: a.IdempotencyKey, Ttl: durationpb.New(ttl),
	}))
	if err != nil {
		err = wrap("reserve", err)
		if p.FailOpen() && undecided(err) {
			return degraded(p, err), &Reservation{c: c}, nil
		}
		return sdk.Decision{}, nil, err
	}
	d := wire.FromDecision(res.Msg.GetDecision())
	if !d.Allowed {
		return d, nil, nil
	}
	return d, &Reservation{c: c, policy: name(p), subject: a.Subject, id: res.Msg.GetReservationId()}, nil
}

// ReservationOf returns the reservation id under p for s (its shard
// values suffice), e.g. one another process made, to Commit or Cancel
// it (sdk.Limiter.ReservationOf).
func (c *Client) ReservationOf(p *sdk.Policy, s sdk.Subject, id string) *Reservation {
	return &Reservation{c: c, policy: name(p), subject: s, id: id}
}

func (c *Client) batchResults(p *sdk.Policy, op string, n int, rs []*freqcapv1.BatchResult, err error) []sdk.BatchResult {
	out := make([]sdk.BatchResult, n)
	if err == nil && len(rs) != n {
		err = connect.NewError(connect.CodeInternal, fmt.Errorf("the server answered %d results for %d attempts", len(rs), n))
	}
	if err != nil {
		err = wrap(op, err)
		for i := range out {
			if p.FailOpen() && undecided(err) {
				out[i].Decision = degraded(p, err)
			} else {
				out[i].Err = err
			}
		}
		return out
	}
	for i, r := range rs {
		if e := r.GetError(); e != nil {
			var code connect.Code
			if code.UnmarshalText([]byte(e.GetCode())) != nil {
				code = connect.CodeUnknown
			}
			aerr := wrap(op, wire.NewError(code, e.GetReason(), e.GetMessage()))
			if p.FailOpen() && undecided(aerr) {
				out[i].Decision = degraded(p, aerr)
			} else {
				out[i].Err = aerr
			}
			continue
		}
		out[i].Decision = wire.FromDecision(r.GetDecision())
	}
	return out
}

// TakeBatch is sdk.Limiter.TakeBatch through the server, in one call:
// one result per attempt, in input order. A failure of the whole call
// is reported in every entry.
func (c *Client) TakeBatch(ctx context.Context, p *sdk.Policy, as []sdk.Attempt) []sdk.BatchResult {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().TakeBatch(ctx, connect.NewRequest(&freqcapv1.TakeBatchRequest{Policy: name(p), Attempts: wire.ToAttempts(as)}))
	var rs []*freqcapv1.BatchResult
	if err == nil {
		rs = res.Msg.GetResults()
	}
	return c.batchResults(p, "take batch", len(as), rs, err)
}

// PeekBatch is sdk.Limiter.PeekBatch through the server.
func (c *Client) PeekBatch(ctx context.Context, p *sdk.Policy, as []sdk.Attempt) []sdk.BatchResult {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().PeekBatch(ctx, connect.NewRequest(&freqcapv1.PeekBatchRequest{Policy: name(p), Attempts: wire.ToAttempts(as)}))
	var rs []*freqcapv1.BatchResult
	if err == nil {
		rs = res.Msg.GetResults()
	}
	return c.batchResults(p, "peek batch", len(as), rs, err)
}

// Inspect is sdk.Limiter.Inspect through the server.
func (c *Client) Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().Inspect(ctx, connect.NewRequest(&freqcapv1.InspectRequest{Policy: name(p), Subject: s}))
	if err != nil {
		return sdk.Inspection{}, wrap("inspect", err)
	}
	return wire.FromInspection(res.Msg), nil
}

// Reset is sdk.Limiter.Reset through the server (audited there with the
// caller's name).
func (c *Client) Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error {
	_, _, err := c.ResetRules(ctx, p, s)
	return err
}

// ResetRules is Reset that also returns the rules reset and those kept
// (the subject lacks one of their dimensions).
func (c *Client) ResetRules(ctx context.Context, p *sdk.Policy, s sdk.Subject) (reset, kept []string, err error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().Reset(ctx, connect.NewRequest(&freqcapv1.ResetRequest{Policy: name(p), Subject: s}))
	if err != nil {
		return nil, nil, wrap("reset", err)
	}
	return res.Msg.GetResetRules(), res.Msg.GetKeptRules(), nil
}

// Policies returns the policies the server serves to this caller, built
// as the server loaded them.
func (c *Client) Policies(ctx context.Context) ([]*sdk.Policy, error) {
	sp, err := c.ServedPolicies(ctx)
	return sp.Policies, err
}

// ServedPolicies are the policies a server serves to a caller, and their
// version.
type ServedPolicies struct {
	// Version is the policy-store version served (0: a policy file);
	// At when it was applied.
	Version  int64
	At       time.Time
	Policies []*sdk.Policy
}

// ServedPolicies is Policies with the version of the policy store they
// come from.
func (c *Client) ServedPolicies(ctx context.Context) (ServedPolicies, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.rpc().ListPolicies(ctx, connect.NewRequest(&freqcapv1.ListPoliciesRequest{}))
	if err != nil {
		return ServedPolicies{}, wrap("policies", err)
	}
	out := ServedPolicies{Version: res.Msg.GetVersion(), Policies: make([]*sdk.Policy, 0, len(res.Msg.GetPolicies()))}
	if at := res.Msg.GetVersionAt(); at != nil {
		out.At = at.AsTime()
	}
	for _, wp := range res.Msg.GetPolicies() {
		p, err := wire.FromPolicy(wp)
		if err != nil {
			return ServedPolicies{}, fmt.Errorf("client: policies: %w", err)
		}
		out.Policies = append(out.Policies, p)
	}
	return out, nil
}
