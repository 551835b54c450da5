package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
)

// PolicyStore is the policy store PolicyService reads and writes: plan,
// apply, history and rollback of versioned policy documents.
// sdk/policyfile's Store does the work; StoreOf adapts it.
type PolicyStore interface {
	// Plan validates doc (a policy file's YAML) and compares it with the
	// store's current version, storing nothing. Faults are in the Plan,
	// not the error.
	Plan(ctx context.Context, doc []byte) (Plan, error)
	// Apply stores doc as the next version if the store's version is
	// still expected (else an error wrapping driver.ErrVersionConflict),
	// and, when it re-keys a rule, only with confirmRekey (else
	// ErrRekeyUnconfirmed). An invalid doc is a *DocumentError.
	Apply(ctx context.Context, doc []byte, expected int64, confirmRekey bool, by, reason string) (Version, error)
	// History returns up to max versions (max <= 0: all), newest first,
	// without their documents.
	History(ctx context.Context, max int) ([]Version, error)
	// Version returns version n (0: the current one) with its document;
	// driver.ErrNoPolicyVersion when there is none,
	// policyfile.ErrUnreadableVersion when it does not load.
	Version(ctx context.Context, n int64) (Version, error)
	// Rollback applies version n's document again as a new version, as
	// Apply would (expected 0: whatever version is current).
	Rollback(ctx context.Context, n, expected int64, confirmRekey bool, by, reason string) (Version, error)
}

// Plan is what applying a policy document would do.
type Plan struct {
	// Faults are the document's faults; when there are any, the other
	// fields are empty.
	Faults []Fault
	// Base is the store's version the plan compares with (0: empty).
	Base int64
	// Text is the plan in words, as `freqcap policy diff` prints it.
	Text     string
	Changes  []Change
	Warnings []string
	// Rekey: some rule's dimensions change; an apply must confirm it.
	Rekey bool
}

// Fault is one fault of a policy document: its line (1-based, 0 when
// unknown) and key path.
type Fault struct {
	Line    int
	Key     string
	Message string
}

// Change is one change of a rule (or of a policy, Rule empty).
type Change struct {
	Policy, Rule string
	// Kind and Carries are sdk/policyfile's words for what changed and
	// what of the counts carries over.
	Kind, Carries string
	Detail        string
}

// Version is one version of the policy store.
type Version struct {
	Version    int64
	At         time.Time
	By, Reason string
	// Document is the policy document as applied (Version only).
	Document []byte
}

// ErrRekeyUnconfirmed is returned by PolicyStore.Apply and Rollback for a
// document that re-keys a rule without the caller's confirmation.
var ErrRekeyUnconfirmed = errors.New("serve: the document re-keys a rule (its counts start afresh): confirm it")

// DocumentError is an invalid policy document's error: its faults.
type DocumentError struct{ Faults []Fault }

// Error lists the faults, each with its line and key when known.
func (e *DocumentError) Error() string {
	var b strings.Builder
	b.WriteString("invalid policy document")
	for i, f := range e.Faults {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// String writes the fault as "line N, key: message" (the parts known).
func (f Fault) String() string {
	var where []string
	if f.Line > 0 {
		where = append(where, fmt.Sprintf("line %d", f.Line))
	}
	if f.Key != "" {
		where = append(where, f.Key)
	}
	if len(where) == 0 {
		return f.Message
	}
	return strings.Join(where, ", ") + ": " + f.Message
}

func faults(fs []Fault) []*freqcapv1.DocumentFault {
	out := make([]*freqcapv1.DocumentFault, len(fs))
	for i, f := range fs {
		out[i] = &freqcapv1.DocumentFault{Line: int32(f.Line), Key: f.Key, Message: f.Message}
	}
	return out
}

func version(v Version, withDoc bool) *freqcapv1.PolicyVersion {
	out := &freqcapv1.PolicyVersion{Version: v.Version, At: instant(v.At), By: v.By, Reason: v.Reason}
	if withDoc {
		out.Yaml = string(v.Document)
	}
	return out
}

// policyService implements PolicyService over Config.Store.
type policyService struct{ s *Server }

// storeFor returns the store if the caller may do op on every policy.
func (ps *policyService) storeFor(ctx context.Context, op Op) (PolicyStore, error) {
	c := callerOf(ctx)
	if c == nil || !c.allows(op, "*") {
		who := "this caller"
		if c != nil {
			who = fmt.Sprintf("credential %q", c.Name)
		}
		return nil, protoconv.NewError(connect.CodePermissionDenied, freqcapv1.Reason_REASON_PERMISSION_DENIED,
			fmt.Sprintf("%s may not %s the policy store (it needs %s on every policy: %s@*)", who, op, op, op))
	}
	if ps.s.cfg.Store == nil {
		return nil, protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_UNSUPPORTED,
			"this server serves a policy file, not a policy store (start it with --policies store)")
	}
	return ps.s.cfg.Store, nil
}

// storeFailed turns a store's error into the call's error.
func (ps *policyService) storeFailed(op string, err error) error {
	var de *DocumentError
	switch {
	case errors.As(err, &de):
		e := connect.NewError(connect.CodeInvalidArgument, errors.New(de.Error()))
		if d, derr := connect.NewErrorDetail(&freqcapv1.ErrorDetail{Reason: freqcapv1.Reason_REASON_INVALID_POLICY_DOCUMENT, Faults: faults(de.Faults)}); derr == nil {
			e.AddDetail(d)
		}
		return e
	case errors.Is(err, driver.ErrVersionConflict):
		return protoconv.NewError(connect.CodeAborted, freqcapv1.Reason_REASON_VERSION_CONFLICT,
			"the policy store moved past the expected version (someone applied in between): nothing was stored; plan again")
	case errors.Is(err, ErrRekeyUnconfirmed):
		return protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_REKEY_UNCONFIRMED, err.Error())
	case errors.Is(err, policyfile.ErrUnreadableVersion):
		// Not an outage: retrying does not help, a new version does.
		return protoconv.NewError(connect.CodeFailedPrecondition, freqcapv1.Reason_REASON_UNREADABLE_POLICY_VERSION,
			err.Error()+": apply a document, or roll back to a version that loads (plans are made against the newest one that does)")
	case errors.Is(err, driver.ErrNoPolicyVersion):
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
func (ps *policyService) audit(ctx context.Context, peer, action string, v Version, err error) error {
	caller := callerOf(ctx)
	e := AuditEntry{At: time.Now(), Action: action, Caller: caller.Name, Remote: peer, Outcome: "ok"}
	if err != nil {
		e.Outcome = "failed: " + connect.CodeOf(ps.storeFailed(action, err)).String()
	} else {
		e.Detail = fmt.Sprintf("version %d: %s", v.Version, v.Reason)
	}
	if ps.s.cfg.Audit != nil {
		if aerr := ps.s.cfg.Audit(e); aerr != nil {
			ps.s.log.Error("serve: a policy-store write could not be audited", "action", action, "caller", caller.Name, "outcome", e.Outcome, "err", aerr)
			return protoconv.NewError(connect.CodeInternal, freqcapv1.Reason_REASON_UNSPECIFIED,
				"the "+action+" was "+e.Outcome+" but could not be recorded in the audit log (details are in the server's log)")
		}
	}
	if err == nil {
		ps.s.log.Info("serve: policy store written", "action", action, "caller", caller.Name, "version", v.Version)
	}
	return nil
}

func (ps *policyService) PlanPolicies(ctx context.Context, req *connect.Request[freqcapv1.PlanPoliciesRequest]) (*connect.Response[freqcapv1.PlanPoliciesResponse], error) {
	st, err := ps.storeFor(ctx, OpInspect)
	if err != nil {
		return nil, err
	}
	plan, err := st.Plan(ctx, []byte(req.Msg.GetYaml()))
	if err != nil {
		return nil, ps.storeFailed("plan", err)
	}
	out := &freqcapv1.PlanPoliciesResponse{Valid: len(plan.Faults) == 0, Faults: faults(plan.Faults)}
	if out.Valid {
		out.BaseVersion, out.Text, out.Warnings, out.Rekey = plan.Base, plan.Text, plan.Warnings, plan.Rekey
		for _, c := range plan.Changes {
			out.Changes = append(out.Changes, &freqcapv1.PolicyChange{Policy: c.Policy, Rule: c.Rule, Kind: c.Kind, Carries: c.Carries, Detail: c.Detail})
		}
	}
	return connect.NewResponse(out), nil
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
	v, err := st.Apply(ctx, []byte(m.GetYaml()), m.GetExpectedVersion(), m.GetConfirmRekey(), callerOf(ctx).Name, m.GetReason())
	if aerr := ps.audit(ctx, req.Peer().Addr, ActionPolicyApply, v, err); aerr != nil {
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
	vs, err := st.History(ctx, int(req.Msg.GetMax()))
	if err != nil {
		return nil, ps.storeFailed("history", err)
	}
	out := &freqcapv1.PolicyHistoryResponse{}
	for _, v := range vs {
		out.Versions = append(out.Versions, version(v, false))
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
	v, err := st.Rollback(ctx, m.GetVersion(), m.GetExpectedVersion(), m.GetConfirmRekey(), callerOf(ctx).Name, m.GetReason())
	if aerr := ps.audit(ctx, req.Peer().Addr, ActionPolicyRollback, v, err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, ps.storeFailed("rollback", err)
	}
	return connect.NewResponse(&freqcapv1.RollbackPoliciesResponse{Version: version(v, false)}), nil
}
