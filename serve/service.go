package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/gen/freqcap/v1/freqcapv1connect"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
)

// service implements the generated handler interface over the Server's
// Limiter and policies.
type service struct {
	s *Server
}

var _ freqcapv1connect.FreqcapServiceHandler = (*service)(nil)

func newService(s *Server) *service { return &service{s: s} }

func invalid(reason freqcapv1.Reason, format string, args ...any) *connect.Error {
	return protoconv.NewError(connect.CodeInvalidArgument, reason, fmt.Sprintf(format, args...))
}

// policy returns the policy named name if the call's caller may do op on
// it: PermissionDenied when not (whether or not it exists), NotFound
// when it may but there is no such policy. The set it comes from is the
// version the call decides with.
func (svc *service) policy(ctx context.Context, op Op, name string) (*sdk.Policy, *policySet, error) {
	set := svc.s.policies.current()
	if name == "" {
		return nil, nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "policy is required")
	}
	annotate(ctx, AttrPolicy.String(name))
	c := callerOf(ctx)
	if c == nil || !c.allows(op, name) {
		who := "this caller"
		if c != nil {
			who = fmt.Sprintf("credential %q", c.Name)
		}
		return nil, nil, protoconv.NewError(connect.CodePermissionDenied, freqcapv1.Reason_REASON_PERMISSION_DENIED,
			fmt.Sprintf("%s may not %s on policy %q", who, op, name))
	}
	p := set.byName[name]
	if p == nil {
		return nil, nil, protoconv.NewError(connect.CodeNotFound, freqcapv1.Reason_REASON_UNKNOWN_POLICY,
			fmt.Sprintf("no such policy %q (ListPolicies lists them)", name))
	}
	return p, set, nil
}

// decision converts d, decided under set's version, to the wire.
func decision(set *policySet, d sdk.Decision) *freqcapv1.Decision {
	out := protoconv.Decision(d)
	out.PolicyVersion = set.version
	return out
}

// checkSubject refuses dimensions the policy does not have: a misspelt
// one would otherwise be ignored. Missing and bad values are the sdk's
// to refuse. The error names the dimension, never a value.
func checkSubject(p *sdk.Policy, s map[string]string) *connect.Error {
	dims := p.Dimensions()
	for d := range s {
		if !slices.Contains(dims, d) {
			return invalid(freqcapv1.Reason_REASON_INVALID_SUBJECT, "policy %q has no dimension %q (its dimensions: %v)", p.Name(), d, dims)
		}
	}
	return nil
}

// failed turns an sdk error into the call's error. Backend failures are
// logged (they name servers) and answered with a message that does not.
func (svc *service) failed(op string, p *sdk.Policy, err error) error {
	code, reason := protoconv.Classify(err)
	msg := err.Error() // the sdk's own errors: no subject values
	switch reason {
	case freqcapv1.Reason_REASON_BACKEND_UNAVAILABLE:
		svc.s.logRate.Log(svc.s.log, slog.LevelWarn, "backend-"+op, "serve: backend failed (one line per operation every 10 s)", "op", op, "policy", p.Name(), "err", err)
		msg = "could not decide: the backend is unavailable (details are in the server's log); a consuming call may have been applied: retry it with the same idempotency key"
	case freqcapv1.Reason_REASON_BACKEND_REFUSED:
		svc.s.logRate.Log(svc.s.log, slog.LevelWarn, "refused-"+op, "serve: the backend refuses to decide (one line per operation every 10 s)", "op", op, "policy", p.Name(), "err", err)
		msg = "could not decide: the backend refuses to decide (a master's maxmemory-policy may evict freqcap's keys: /readyz says which, the server's log why); nothing was applied"
	case freqcapv1.Reason_REASON_DEADLINE_EXCEEDED:
		msg = "the call's deadline passed before an answer (a consuming call may have been applied: retry it with the same idempotency key)"
	}
	return protoconv.NewError(code, reason, msg)
}

func (svc *service) setHeaders(h http.Header, set *policySet, p *sdk.Policy, d sdk.Decision) {
	set.headers.Set(h, p, d)
	ratelimitheaders.SetRetryAfter(h, d)
}

func (svc *service) Take(ctx context.Context, req *connect.Request[freqcapv1.TakeRequest]) (*connect.Response[freqcapv1.TakeResponse], error) {
	m := req.Msg
	p, set, err := svc.policy(ctx, OpTake, m.GetPolicy())
	if err != nil {
		return nil, err
	}
	if err := checkSubject(p, m.GetSubject()); err != nil {
		return nil, err
	}
	zone, err := protoconv.Zone(m.GetZone())
	if err != nil {
		return nil, svc.failed("take", p, err)
	}
	d, err := svc.s.cfg.Limiter.Take(ctx, p, sdk.Attempt{Subject: m.GetSubject(), Cost: m.GetCost(), IdempotencyKey: m.GetIdempotencyKey(),
		IdempotencyTTL: protoconv.IdempotencyTTL(m.GetIdempotencyTtl()), Zone: zone,
		Class: m.GetClass(), Priority: int(m.GetPriority()), Identity: m.GetIdentity()})
	if err != nil {
		return nil, svc.failed("take", p, err)
	}
	res := connect.NewResponse(&freqcapv1.TakeResponse{Decision: decision(set, d)})
	svc.setHeaders(res.Header(), set, p, d)
	return res, nil
}

func (svc *service) Peek(ctx context.Context, req *connect.Request[freqcapv1.PeekRequest]) (*connect.Response[freqcapv1.PeekResponse], error) {
	m := req.Msg
	p, set, err := svc.policy(ctx, OpPeek, m.GetPolicy())
	if err != nil {
		return nil, err
	}
	if err := checkSubject(p, m.GetSubject()); err != nil {
		return nil, err
	}
	zone, err := protoconv.Zone(m.GetZone())
	if err != nil {
		return nil, svc.failed("peek", p, err)
	}
	d, err := svc.s.cfg.Limiter.Peek(ctx, p, sdk.Attempt{Subject: m.GetSubject(), Cost: m.GetCost(), Zone: zone,
		Class: m.GetClass(), Priority: int(m.GetPriority()), Identity: m.GetIdentity()})
	if err != nil {
		return nil, svc.failed("peek", p, err)
	}
	res := connect.NewResponse(&freqcapv1.PeekResponse{Decision: decision(set, d)})
	svc.setHeaders(res.Header(), set, p, d)
	return res, nil
}

func (svc *service) Reserve(ctx context.Context, req *connect.Request[freqcapv1.ReserveRequest]) (*connect.Response[freqcapv1.ReserveResponse], error) {
	m := req.Msg
	p, set, err := svc.policy(ctx, OpReserve, m.GetPolicy())
	if err != nil {
		return nil, err
	}
	if err := checkSubject(p, m.GetSubject()); err != nil {
		return nil, err
	}
	if m.GetTtl() == nil {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "ttl is required")
	}
	if err := m.GetTtl().CheckValid(); err != nil {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "ttl: %v", err)
	}
	ttl := m.GetTtl().AsDuration()
	if ttl < time.Millisecond || ttl > svc.s.cfg.MaxReserveTTL {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "ttl must be from 1ms to %v, got %v", svc.s.cfg.MaxReserveTTL, ttl)
	}
	zone, err := protoconv.Zone(m.GetZone())
	if err != nil {
		return nil, svc.failed("reserve", p, err)
	}
	d, r, err := svc.s.cfg.Limiter.Reserve(ctx, p, sdk.Attempt{Subject: m.GetSubject(), Cost: m.GetCost(), IdempotencyKey: m.GetIdempotencyKey(),
		IdempotencyTTL: protoconv.IdempotencyTTL(m.GetIdempotencyTtl()), Zone: zone,
		Class: m.GetClass(), Priority: int(m.GetPriority()), Identity: m.GetIdentity()}, ttl)
	if err != nil {
		return nil, svc.failed("reserve", p, err)
	}
	res := connect.NewResponse(&freqcapv1.ReserveResponse{Decision: decision(set, d), ReservationId: r.ID()})
	svc.setHeaders(res.Header(), set, p, d)
	return res, nil
}

func (svc *service) settle(ctx context.Context, op, policy string, subj map[string]string, id string, commit bool) error {
	p, _, err := svc.policy(ctx, OpReserve, policy)
	if err != nil {
		return err
	}
	if err := checkSubject(p, subj); err != nil {
		return err
	}
	if id == "" {
		return invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "reservation_id is required")
	}
	r, err := svc.s.cfg.Limiter.ReservationOf(p, subj, id)
	if err == nil {
		if commit {
			err = r.Commit(ctx)
		} else {
			err = r.Cancel(ctx)
		}
	}
	if err != nil {
		return svc.failed(op, p, err)
	}
	return nil
}

func (svc *service) Commit(ctx context.Context, req *connect.Request[freqcapv1.CommitRequest]) (*connect.Response[freqcapv1.CommitResponse], error) {
	m := req.Msg
	if err := svc.settle(ctx, "commit", m.GetPolicy(), m.GetSubject(), m.GetReservationId(), true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&freqcapv1.CommitResponse{}), nil
}

func (svc *service) Cancel(ctx context.Context, req *connect.Request[freqcapv1.CancelRequest]) (*connect.Response[freqcapv1.CancelResponse], error) {
	m := req.Msg
	if err := svc.settle(ctx, "cancel", m.GetPolicy(), m.GetSubject(), m.GetReservationId(), false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&freqcapv1.CancelResponse{}), nil
}

// batch decides attempts with f (TakeBatch or PeekBatch): the attempts
// naming a dimension the policy lacks, or a zone that does not load, fail
// alone, the others go to f in
// one call, and the results come back in input order.
func (svc *service) batch(ctx context.Context, op string, set *policySet, p *sdk.Policy, in []*freqcapv1.Attempt,
	f func(context.Context, *sdk.Policy, []sdk.Attempt) []sdk.BatchResult) ([]*freqcapv1.BatchResult, error) {
	if len(in) > svc.s.cfg.MaxBatch {
		return nil, invalid(freqcapv1.Reason_REASON_TOO_LARGE, "%d attempts: a batch holds at most %d", len(in), svc.s.cfg.MaxBatch)
	}
	out := make([]*freqcapv1.BatchResult, len(in))
	all := protoconv.Attempts(in)
	valid := make([]sdk.Attempt, 0, len(in))
	idx := make([]int, 0, len(in))
	for i, a := range in {
		if cerr := checkSubject(p, a.GetSubject()); cerr != nil {
			out[i] = &freqcapv1.BatchResult{Error: attemptError(cerr)}
			continue
		}
		zone, err := protoconv.Zone(a.GetZone())
		if err != nil {
			var ce *connect.Error
			errors.As(svc.failed(op, p, err), &ce)
			out[i] = &freqcapv1.BatchResult{Error: attemptError(ce)}
			continue
		}
		all[i].Zone = zone
		valid = append(valid, all[i])
		idx = append(idx, i)
	}
	if len(valid) > 0 {
		for j, r := range f(ctx, p, valid) {
			if r.Err != nil {
				var ce *connect.Error
				errors.As(svc.failed(op, p, r.Err), &ce)
				out[idx[j]] = &freqcapv1.BatchResult{Error: attemptError(ce)}
				continue
			}
			out[idx[j]] = &freqcapv1.BatchResult{Decision: decision(set, r.Decision)}
		}
	}
	return out, nil
}

func attemptError(e *connect.Error) *freqcapv1.AttemptError {
	return &freqcapv1.AttemptError{Code: e.Code().String(), Message: e.Message(), Reason: protoconv.ReasonOf(e)}
}

func (svc *service) TakeBatch(ctx context.Context, req *connect.Request[freqcapv1.TakeBatchRequest]) (*connect.Response[freqcapv1.TakeBatchResponse], error) {
	p, set, err := svc.policy(ctx, OpTake, req.Msg.GetPolicy())
	if err != nil {
		return nil, err
	}
	rs, err := svc.batch(ctx, "take", set, p, req.Msg.GetAttempts(), svc.s.cfg.Limiter.TakeBatch)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&freqcapv1.TakeBatchResponse{Results: rs}), nil
}

func (svc *service) PeekBatch(ctx context.Context, req *connect.Request[freqcapv1.PeekBatchRequest]) (*connect.Response[freqcapv1.PeekBatchResponse], error) {
	p, set, err := svc.policy(ctx, OpPeek, req.Msg.GetPolicy())
	if err != nil {
		return nil, err
	}
	rs, err := svc.batch(ctx, "peek", set, p, req.Msg.GetAttempts(), svc.s.cfg.Limiter.PeekBatch)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&freqcapv1.PeekBatchResponse{Results: rs}), nil
}

func (svc *service) Inspect(ctx context.Context, req *connect.Request[freqcapv1.InspectRequest]) (*connect.Response[freqcapv1.InspectResponse], error) {
	m := req.Msg
	p, _, err := svc.policy(ctx, OpInspect, m.GetPolicy())
	if err != nil {
		return nil, err
	}
	if err := checkSubject(p, m.GetSubject()); err != nil {
		return nil, err
	}
	in, err := svc.s.cfg.Limiter.Admin().Inspect(ctx, p, m.GetSubject())
	if err != nil {
		return nil, svc.failed("inspect", p, err)
	}
	return connect.NewResponse(protoconv.Inspection(in)), nil
}

// resetRules splits p's rules into those whose dimensions s gives all of
// (Reset deletes their state) and the others (kept); with named rules
// (ResetRules), those not named are kept too.
func resetRules(p *sdk.Policy, s map[string]string, named []string) (reset, kept []string) {
	reset, kept = []string{}, []string{}
rules:
	for _, r := range p.Rules() {
		if len(named) > 0 && !slices.Contains(named, r.Name) {
			kept = append(kept, r.Name)
			continue
		}
		for _, d := range r.Dimensions {
			if _, ok := s[d]; !ok {
				kept = append(kept, r.Name)
				continue rules
			}
		}
		reset = append(reset, r.Name)
	}
	return reset, kept
}

func (svc *service) Reset(ctx context.Context, req *connect.Request[freqcapv1.ResetRequest]) (*connect.Response[freqcapv1.ResetResponse], error) {
	m := req.Msg
	p, _, err := svc.policy(ctx, OpReset, m.GetPolicy())
	if err != nil {
		return nil, err
	}
	if err := checkSubject(p, m.GetSubject()); err != nil {
		return nil, err
	}
	for _, d := range p.ShardBy() {
		if _, ok := m.GetSubject()[d]; !ok {
			return nil, invalid(freqcapv1.Reason_REASON_INVALID_SUBJECT, "the subject must give the shard dimension %q", d)
		}
	}
	reset, kept := resetRules(p, m.GetSubject(), m.GetRules())
	var rerr error
	if len(m.GetRules()) > 0 {
		rerr = svc.s.cfg.Limiter.Admin().ResetRules(ctx, p, m.GetSubject(), m.GetRules()...)
	} else {
		rerr = svc.s.cfg.Limiter.Admin().Reset(ctx, p, m.GetSubject())
	}
	if rerr != nil {
		if _, reason := protoconv.Classify(rerr); reason != freqcapv1.Reason_REASON_BACKEND_UNAVAILABLE {
			return nil, svc.failed("reset", p, rerr) // invalid input: nothing was tried
		}
	}
	caller := callerOf(ctx)
	entry := AuditEntry{
		At: time.Now(), Action: ActionReset, Caller: caller.Name, Remote: remoteAddr(ctx, req), Policy: p.Name(),
		Subject: m.GetSubject(), Rules: reset, Kept: kept, Outcome: "ok",
	}
	if rerr != nil {
		entry.Outcome = "failed: backend error"
	}
	if svc.s.cfg.Audit != nil {
		if err := svc.s.cfg.Audit(entry); err != nil {
			svc.s.log.Error("serve: a reset could not be audited", "policy", p.Name(), "caller", caller.Name, "outcome", entry.Outcome, "err", err)
			return nil, protoconv.NewError(connect.CodeInternal, freqcapv1.Reason_REASON_UNSPECIFIED,
				"the reset was "+entry.Outcome+" but could not be recorded in the audit log (details are in the server's log)")
		}
	}
	if rerr != nil {
		return nil, svc.failed("reset", p, rerr)
	}
	svc.s.log.Info("serve: subject reset", "policy", p.Name(), "caller", caller.Name, "rules", reset)
	return connect.NewResponse(&freqcapv1.ResetResponse{Policy: p.Name(), ResetRules: reset, KeptRules: kept}), nil
}

func (svc *service) ListPolicies(ctx context.Context, req *connect.Request[freqcapv1.ListPoliciesRequest]) (*connect.Response[freqcapv1.ListPoliciesResponse], error) {
	c := callerOf(ctx)
	set := svc.s.policies.current()
	out := &freqcapv1.ListPoliciesResponse{Version: set.version, VersionAt: instant(set.at)}
	for _, p := range set.order {
		if c != nil && c.mayUse(p.Name()) {
			out.Policies = append(out.Policies, protoconv.Policy(p))
		}
	}
	return connect.NewResponse(out), nil
}

// instant is t on the wire (absent when zero).
func instant(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
