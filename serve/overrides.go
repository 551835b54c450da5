package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// overrideService implements OverrideService over the Limiter (a
// backend that keeps no overrides answers Unimplemented, reason
// UNSUPPORTED, through the sdk's errors.ErrUnsupported).
type overrideService struct{ s *Server }

// target checks the call's policy and subject for op.
func (ovs *overrideService) target(ctx context.Context, op Op, policy string, subj map[string]string) (*sdk.Policy, *sdk.Limiter, error) {
	svc := &service{s: ovs.s}
	p, _, err := svc.policy(ctx, op, policy)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSubject(p, subj); err != nil {
		return nil, nil, err
	}
	return p, ovs.s.cfg.Limiter, nil
}

// failed turns an sdk error into the call's error.
func (ovs *overrideService) failed(op string, p *sdk.Policy, err error) error {
	if errors.Is(err, sdk.ErrOverrideNotFound) {
		return protoconv.NewError(connect.CodeNotFound, freqcapv1.Reason_REASON_OVERRIDE_NOT_FOUND,
			"no such override for this subject under this policy (never set, deleted, or ended)")
	}
	return (&service{s: ovs.s}).failed(op, p, err)
}

// describe says what an override does, for the audit log (no subject
// values).
func describe(o driver.Override) string {
	var b strings.Builder
	fmt.Fprintf(&b, "override #%d %s", o.ID, o.Kind)
	if o.Kind == driver.Exempt && o.Counted {
		b.WriteString(" (counted)")
	}
	if len(o.Limits) > 0 {
		fmt.Fprintf(&b, " %v", o.Limits)
	}
	if !o.Until.IsZero() {
		b.WriteString(" until " + o.Until.UTC().Format(time.RFC3339))
	}
	if o.Reason != "" {
		b.WriteString(": " + o.Reason)
	}
	return b.String()
}

// audit records an override change; an error recording it fails the
// call.
func (ovs *overrideService) audit(ctx context.Context, peer, action string, p *sdk.Policy, subj sdk.Subject, detail string, err error) error {
	caller := callerOf(ctx)
	e := AuditEntry{At: time.Now(), Action: action, Caller: caller.Name, Remote: peer, Policy: p.Name(), Subject: subj, Outcome: "ok", Detail: detail}
	if err != nil {
		e.Outcome = "failed: " + connect.CodeOf(ovs.failed(action, p, err)).String()
	}
	return ovs.s.recordChange(e, "an override change", "detail", detail)
}

// recordChange writes e, a change's audit entry, to Config.Audit and logs
// a change made (what it was, for the log; logArgs added to its line).
// An error writing it fails the call, with a message that says whether
// the change was made.
func (s *Server) recordChange(e AuditEntry, what string, logArgs ...any) error {
	if s.cfg.Audit != nil {
		if aerr := s.cfg.Audit(e); aerr != nil {
			s.log.Error("serve: "+what+" could not be audited", "action", e.Action, "policy", e.Policy, "caller", e.Caller, "outcome", e.Outcome, "err", aerr)
			return protoconv.NewError(connect.CodeInternal, freqcapv1.Reason_REASON_UNSPECIFIED,
				"the "+e.Action+" was "+e.Outcome+" but could not be recorded in the audit log (details are in the server's log)")
		}
	}
	if e.Outcome == "ok" {
		s.log.Info("serve: "+what+" made", append([]any{"action", e.Action, "policy", e.Policy, "caller", e.Caller}, logArgs...)...)
	}
	return nil
}

func (ovs *overrideService) SetOverride(ctx context.Context, req *connect.Request[freqcapv1.SetOverrideRequest]) (*connect.Response[freqcapv1.SetOverrideResponse], error) {
	m := req.Msg
	p, ov, err := ovs.target(ctx, OpAdmin, m.GetPolicy(), m.GetSubject())
	if err != nil {
		return nil, err
	}
	in := m.GetOverride()
	if in == nil {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "override is required")
	}
	if in.GetKind() == freqcapv1.OverrideKind_OVERRIDE_KIND_UNSPECIFIED {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_OVERRIDE, "override.kind is required: exempt, block or limit")
	}
	o := protoconv.FromOverride(in)
	o.ID, o.Created, o.By = 0, time.Time{}, callerOf(ctx).Name
	if ttl := m.GetTtl(); ttl != nil {
		if in.GetUntil() != nil {
			return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "give override.until or ttl, not both")
		}
		if err := ttl.CheckValid(); err != nil || ttl.AsDuration() <= 0 {
			return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "ttl must be positive")
		}
		o.Until = ovs.s.cfg.Now().Add(ttl.AsDuration())
	}
	got, err := ov.Admin().SetOverride(ctx, p, m.GetSubject(), o)
	detail := describe(got)
	if err != nil {
		detail = describe(o)
	}
	if aerr := ovs.audit(ctx, remoteAddr(ctx, req), ActionOverrideSet, p, m.GetSubject(), detail, err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, ovs.failed("set override", p, err)
	}
	return connect.NewResponse(&freqcapv1.SetOverrideResponse{Override: protoconv.Override(got)}), nil
}

func (ovs *overrideService) ListOverrides(ctx context.Context, req *connect.Request[freqcapv1.ListOverridesRequest]) (*connect.Response[freqcapv1.ListOverridesResponse], error) {
	m := req.Msg
	p, ov, err := ovs.target(ctx, OpInspect, m.GetPolicy(), m.GetSubject())
	if err != nil {
		return nil, err
	}
	list, err := ov.Admin().Overrides(ctx, p, m.GetSubject())
	if err != nil {
		return nil, ovs.failed("list overrides", p, err)
	}
	out := &freqcapv1.ListOverridesResponse{}
	for _, o := range list {
		out.Overrides = append(out.Overrides, protoconv.Override(o))
	}
	return connect.NewResponse(out), nil
}

func (ovs *overrideService) DeleteOverride(ctx context.Context, req *connect.Request[freqcapv1.DeleteOverrideRequest]) (*connect.Response[freqcapv1.DeleteOverrideResponse], error) {
	m := req.Msg
	p, ov, err := ovs.target(ctx, OpAdmin, m.GetPolicy(), m.GetSubject())
	if err != nil {
		return nil, err
	}
	if m.GetId() <= 0 {
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "id is required (ListOverrides lists them)")
	}
	err = ov.Admin().DeleteOverride(ctx, p, m.GetSubject(), m.GetId())
	if aerr := ovs.audit(ctx, remoteAddr(ctx, req), ActionOverrideDelete, p, m.GetSubject(), fmt.Sprintf("override #%d", m.GetId()), err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, ovs.failed("delete override", p, err)
	}
	return connect.NewResponse(&freqcapv1.DeleteOverrideResponse{}), nil
}
