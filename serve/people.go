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
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// personService implements PersonService over the Limiter's Admin (Link,
// Unlink, LinkOf, Person, SetPersonZone; a backend that keeps no links
// answers Unimplemented, reason UNSUPPORTED, through the sdk's
// errors.ErrUnsupported). A link reaches every policy with a person
// dimension, so the caller needs the operation on every policy.
type personService struct{ s *Server }

// failed turns an sdk error into the call's error. Backend failures are
// logged (they name servers) and answered with a message that does not;
// change says whether the call was a change (which may then have been
// made).
func (pes *personService) failed(op string, change bool, err error) error {
	code, reason := protoconv.Classify(err)
	msg := err.Error() // the sdk's own errors: no identity or person
	maybe := ""
	if change {
		maybe = "; the change may have been made (GetPerson says)"
	}
	switch reason {
	case freqcapv1.Reason_REASON_LINK_NOT_FOUND:
		msg = "this identity has no link: it is its own person"
	case freqcapv1.Reason_REASON_IDENTITY_LINKED:
		msg = "this identity is linked to another person: unlink it first"
	case freqcapv1.Reason_REASON_TOO_MANY_LINKS:
		msg = fmt.Sprintf("this person has %d identities, the most one may have: unlink one first", driver.MaxLinks)
	case freqcapv1.Reason_REASON_BACKEND_UNAVAILABLE:
		pes.s.logRate.Log(pes.s.log, slog.LevelWarn, "backend-"+op, "serve: backend failed (one line per operation every 10 s)", "op", op, "err", err)
		msg = "the backend is unavailable (details are in the server's log)" + maybe
	case freqcapv1.Reason_REASON_BACKEND_REFUSED:
		pes.s.logRate.Log(pes.s.log, slog.LevelWarn, "refused-"+op, "serve: the backend refuses (one line per operation every 10 s)", "op", op, "err", err)
		msg = "the backend refuses to write (a master's maxmemory-policy may evict freqcap's keys: /readyz says which, the server's log why)"
	case freqcapv1.Reason_REASON_DEADLINE_EXCEEDED:
		msg = "the call's deadline passed before an answer" + maybe
	}
	return protoconv.NewError(code, reason, msg)
}

// reasonOf checks a change's reason: required, as the CLI and the console
// require it (the sdk checks its length and line breaks).
func reasonOf(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "reason is required: say why, it is kept with the person and in the audit log")
	}
	return nil
}

// audit records a change of links or zones (subject: the identity and
// person it names); an error recording it fails the call.
func (pes *personService) audit(ctx context.Context, peer, action string, subj sdk.Subject, detail string, err error) error {
	caller := callerOf(ctx)
	e := AuditEntry{At: time.Now(), Action: action, Caller: caller.Name, Remote: peer, Subject: subj, Outcome: "ok", Detail: detail}
	if err != nil {
		code, _ := protoconv.Classify(err)
		e.Outcome = "failed: " + code.String()
	}
	return pes.s.recordChange(e, "a change of identity links")
}

func (pes *personService) LinkIdentity(ctx context.Context, req *connect.Request[freqcapv1.LinkIdentityRequest]) (*connect.Response[freqcapv1.LinkIdentityResponse], error) {
	if err := onEveryPolicy(ctx, OpAdmin, "identity links"); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := reasonOf(m.GetReason()); err != nil {
		return nil, err
	}
	l, err := pes.s.cfg.Limiter.Admin().Link(ctx, m.GetIdentity(), m.GetPerson(), callerOf(ctx).Name, m.GetReason())
	subj := sdk.Subject{"identity": m.GetIdentity(), "person": m.GetPerson()}
	if aerr := pes.audit(ctx, remoteAddr(ctx, req), ActionPersonLink, subj, "link: "+m.GetReason(), err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, pes.failed("link", true, err)
	}
	return connect.NewResponse(&freqcapv1.LinkIdentityResponse{Link: protoconv.Link(&l)}), nil
}

func (pes *personService) UnlinkIdentity(ctx context.Context, req *connect.Request[freqcapv1.UnlinkIdentityRequest]) (*connect.Response[freqcapv1.UnlinkIdentityResponse], error) {
	if err := onEveryPolicy(ctx, OpAdmin, "identity links"); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := reasonOf(m.GetReason()); err != nil {
		return nil, err
	}
	err := pes.s.cfg.Limiter.Admin().Unlink(ctx, m.GetIdentity(), callerOf(ctx).Name, m.GetReason())
	if aerr := pes.audit(ctx, remoteAddr(ctx, req), ActionPersonUnlink, sdk.Subject{"identity": m.GetIdentity()}, "unlink: "+m.GetReason(), err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, pes.failed("unlink", true, err)
	}
	return connect.NewResponse(&freqcapv1.UnlinkIdentityResponse{}), nil
}

func (pes *personService) GetPerson(ctx context.Context, req *connect.Request[freqcapv1.GetPersonRequest]) (*connect.Response[freqcapv1.GetPersonResponse], error) {
	if err := onEveryPolicy(ctx, OpInspect, "identity links"); err != nil {
		return nil, err
	}
	id, person := req.Msg.GetIdentity(), req.Msg.GetPerson()
	switch {
	case id != "" && person != "":
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_ARGUMENT, "give identity or person, not both")
	case id == "" && person == "":
		return nil, invalid(freqcapv1.Reason_REASON_INVALID_IDENTITY, "give identity (its person is found) or person: both are empty")
	}
	ad := pes.s.cfg.Limiter.Admin()
	var link *driver.Link
	if id != "" {
		l, err := ad.LinkOf(ctx, id)
		switch {
		case err == nil:
			person, link = l.Person, &l
		case errors.Is(err, driver.ErrLinkNotFound):
			person = id // its own person
		default:
			return nil, pes.failed("get person", false, err)
		}
	}
	p, err := ad.Person(ctx, person)
	if err != nil {
		return nil, pes.failed("get person", false, err)
	}
	return connect.NewResponse(protoconv.Person(person, link, p)), nil
}

func (pes *personService) SetPersonZone(ctx context.Context, req *connect.Request[freqcapv1.SetPersonZoneRequest]) (*connect.Response[freqcapv1.SetPersonZoneResponse], error) {
	if err := onEveryPolicy(ctx, OpAdmin, "identity links"); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := reasonOf(m.GetReason()); err != nil {
		return nil, err
	}
	err := pes.s.cfg.Limiter.Admin().SetPersonZone(ctx, m.GetPerson(), m.GetZone(), callerOf(ctx).Name, m.GetReason())
	detail := "zone " + m.GetZone() + ": " + m.GetReason()
	if m.GetZone() == "" {
		detail = "zone cleared: " + m.GetReason()
	}
	if aerr := pes.audit(ctx, remoteAddr(ctx, req), ActionPersonZone, sdk.Subject{"person": m.GetPerson()}, detail, err); aerr != nil {
		return nil, aerr
	}
	if err != nil {
		return nil, pes.failed("set person zone", true, err)
	}
	return connect.NewResponse(&freqcapv1.SetPersonZoneResponse{}), nil
}
