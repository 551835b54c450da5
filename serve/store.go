package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// docFaults checks doc as policyfile.Load checks a file, before the
// store: its fault as one DocumentFault whose message names the line and
// key, or none.
func docFaults(doc []byte) []*freqcapv1.DocumentFault {
	if _, err := policyfile.Load(bytes.NewReader(doc)); err != nil {
		return []*freqcapv1.DocumentFault{{Message: err.Error()}}
	}
	return nil
}

// docError is the error of an apply of a document with faults.
type docError struct{ faults []*freqcapv1.DocumentFault }

func (e *docError) Error() string {
	msgs := make([]string, len(e.faults))
	for i, f := range e.faults {
		msgs[i] = f.GetMessage()
	}
	return "invalid policy document: " + strings.Join(msgs, "; ")
}

func version(v policystore.Version, withDoc bool) *freqcapv1.PolicyVersion {
	out := &freqcapv1.PolicyVersion{Version: v.Number, At: instant(v.At), By: v.By, Reason: v.Reason}
	if withDoc {
		out.Yaml = string(v.Source)
	}
	return out
}

// apply plans doc (or, n > 0, version n's document again) and stores the
// plan if the store is still at expected (expected < 0: any), re-keying
// rules only with confirmRekey.
func apply(ctx context.Context, st *policystore.Store, doc []byte, n, expected int64, confirmRekey bool, by, reason string) (policystore.Version, error) {
	var plan *policystore.Plan
	var err error
	if n > 0 {
		plan, err = st.PlanRollback(ctx, n)
	} else if f := docFaults(doc); f != nil {
		return policystore.Version{}, &docError{f}
	} else {
		plan, err = st.Plan(ctx, doc)
	}
	if err != nil {
		return policystore.Version{}, err
	}
	if expected >= 0 && plan.Base != expected {
		return policystore.Version{}, fmt.Errorf("serve: apply: the store is at version %d, not %d: %w", plan.Base, expected, policystore.ErrVersionConflict)
	}
	plan.ConfirmRekey = confirmRekey
	return st.Apply(ctx, plan, by, reason)
}

// policyService implements PolicyService over Config.Store.
type policyService struct{ s *Server }

// storeFor returns the store if the caller may do op on every policy.
func (ps *policyService) storeFor(ctx context.Context, op Op) (*policystore.Store, error) {
	if err := onEveryPolicy(ctx, op, "the policy store"); err != nil {
		return nil, err
	}
	if ps.s.cfg.Store == nil {
		return nil, protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_UNSUPPORTED,
			"this server serves a policy file, not a policy store (start it with --policies store)")
	}
	return ps.s.cfg.Store, nil
}

// storeFailed turns a store's error into the call's error.
func (ps *policyService) storeFailed(op string, err error) error {
	var de *docError
	switch {
	case errors.As(err, &de):
		e := connect.NewError(connect.CodeInvalidArgument, errors.New(de.Error()))
		if d, derr := connect.NewErrorDetail(&freqcapv1.ErrorDetail{Reason: freqcapv1.Reason_REASON_INVALID_POLICY_DOCUMENT, Faults: de.faults}); derr == nil {
			e.AddDetail(d)
		}
		return e
	case errors.Is(err, policystore.ErrVersionConflict):
		return protoconv.NewError(connect.CodeAborted, freqcapv1.Reason_REASON_VERSION_CONFLICT,
			"the policy store moved past the expected version (someone applied in between): nothing was stored; plan again")
	case errors.Is(err, policystore.ErrRekeyNotConfirmed):
		return protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_REKEY_UNCONFIRMED, err.Error())
	case errors.Is(err, policystore.ErrUnreadableVersion):
		// Not an outage: retrying does not help, a new version does.
		return protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_UNREADABLE_POLICY_VERSION,
			err.Error()+": apply a document, or roll back to a version that loads (plans are made against the newest one that does)")
	case errors.Is(err, policystore.ErrNoPolicyVersion):
		return protoconv.NewError(connect.CodeNotFound, freqcapv1.Reason_REASON_NO_POLICY_VERSION, "the policy store has no such version")
	}
	code, reason := protoconv.Classify(err)
	msg := err.Error()
	if reason == freqcapv1.Reason_REASON_BACKEND_UNAVAILABLE {
		ps.s.logRate.Log(ps.s.log, slog.LevelWarn, "store-"+op, "serve: policy store failed (one line per operation every 10 s)", "op", op, "err", err)
		msg = "the policy store is unavailable (details are in the server's log)"
	}
	return protoconv.NewError(code, reason, msg)
}

// audit records a store write; an error recording it fails the call.
func (ps *policyService) audit(ctx context.Context, peer, action string, v policystore.Version, err error) error {
	caller := callerOf(ctx)
	e := AuditEntry{At: time.Now(), Action: action, Caller: caller.Name, Remote: peer, Outcome: "ok"}
	if err != nil {
		e.Outcome = "failed: " + connect.CodeOf(ps.storeFailed(action, err)).String()
	} else {
		e.Detail = fmt.Sprintf("version %d: %s", v.Number, v.Reason)
	}
	if ps.s.cfg.Audit != nil {
		if aerr := ps.s.cfg.Audit(e); aerr != nil {
			ps.s.log.Error("serve: a policy-store write could not be audited", "action", action, "caller", caller.Name, "outcome", e.Outcome, "err", aerr)
			return protoconv.NewError(connect.CodeInternal, freqcapv1.Reason_REASON_UNSPECIFIED,
				"the "+action+" was "+e.Outcome+" but could not be recorded in the audit log (details are in the server's log)")
		}
	}
	if err == nil {
		ps.s.log.Info("serve: policy store written", "action", action, "caller", caller.Name, "version", v.Number)
	}
	return nil
}

func (ps *policyService) PlanPolicies(ctx context.Context, req *connect.Request[freqcapv1.PlanPoliciesRequest]) (*connect.Response[freqcapv1.PlanPoliciesResponse], error) {
	st, err := ps.storeFor(ctx, OpInspect)
	if err != nil {
		return nil, err
	}
	doc := []byte(req.Msg.GetYaml())
	if f := docFaults(doc); f != nil {
		return connect.NewResponse(&freqcapv1.PlanPoliciesResponse{Faults: f}), nil
	}
	plan, err := st.Plan(ctx, doc)
	if err != nil {
		return nil, ps.storeFailed("plan", err)
	}
	return connect.NewResponse(protoconv.Plan(plan)), nil
}

func (ps *policyService) ApplyPolicies(ctx context.Context, req *connect.Request[freqcapv1.ApplyPoliciesRequest]) (*connect.Response[freqcapv1.ApplyPoliciesResponse], error) {
	st, err := ps.storeFor(ctx, OpAdmin)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if m.GetExpectedVersion() < 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "expected_version must not be negative")
	}
	if strings.TrimSpace(m.GetReason()) == "" {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "reason is required: say why, it is kept with the version")
	}
	v, err := apply(ctx, st, []byte(m.GetYaml()), 0, m.GetExpectedVersion(), m.GetConfirmRekey(), callerOf(ctx).Name, m.GetReason())
	if aerr := ps.audit(ctx, remoteAddr(ctx, req), ActionPolicyApply, v, err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, ps.storeFailed("apply", err)
	}
	return connect.NewResponse(&freqcapv1.ApplyPoliciesResponse{Version: version(v, false)}), nil
}

func (ps *policyService) PolicyHistory(ctx context.Context, req *connect.Request[freqcapv1.PolicyHistoryRequest]) (*connect.Response[freqcapv1.PolicyHistoryResponse], error) {
	st, err := ps.storeFor(ctx, OpInspect)
	if err != nil {
		return nil, err
	}
	hs, err := st.History(ctx, int(req.Msg.GetMax()))
	if err != nil {
		return nil, ps.storeFailed("history", err)
	}
	out := &freqcapv1.PolicyHistoryResponse{}
	for _, h := range hs {
		out.Versions = append(out.Versions, version(h.Version, false))
	}
	return connect.NewResponse(out), nil
}

func (ps *policyService) GetPolicyVersion(ctx context.Context, req *connect.Request[freqcapv1.GetPolicyVersionRequest]) (*connect.Response[freqcapv1.GetPolicyVersionResponse], error) {
	st, err := ps.storeFor(ctx, OpInspect)
	if err != nil {
		return nil, err
	}
	if req.Msg.GetVersion() < 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "version must not be negative")
	}
	v, err := st.Version(ctx, req.Msg.GetVersion())
	if err != nil {
		return nil, ps.storeFailed("version", err)
	}
	return connect.NewResponse(&freqcapv1.GetPolicyVersionResponse{Version: version(v, true)}), nil
}

func (ps *policyService) RollbackPolicies(ctx context.Context, req *connect.Request[freqcapv1.RollbackPoliciesRequest]) (*connect.Response[freqcapv1.RollbackPoliciesResponse], error) {
	st, err := ps.storeFor(ctx, OpAdmin)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if m.GetVersion() <= 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "version is required (a version of PolicyHistory)")
	}
	if m.GetExpectedVersion() < 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "expected_version must not be negative")
	}
	if strings.TrimSpace(m.GetReason()) == "" {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "reason is required: say why, it is kept with the version")
	}
	expected := m.GetExpectedVersion()
	if expected == 0 {
		expected = -1 // whatever version is current
	}
	v, err := apply(ctx, st, nil, m.GetVersion(), expected, m.GetConfirmRekey(), callerOf(ctx).Name, m.GetReason())
	if aerr := ps.audit(ctx, remoteAddr(ctx, req), ActionPolicyRollback, v, err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, ps.storeFailed("rollback", err)
	}
	return connect.NewResponse(&freqcapv1.RollbackPoliciesResponse{Version: version(v, false)}), nil
}
