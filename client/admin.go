package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// Administrator is what *sdk.Admin and *Admin have in common: code that
// inspects, resets, sets overrides or links identities runs in-process or
// remote alike.
type Administrator interface {
	Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error)
	Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error
	ResetRules(ctx context.Context, p *sdk.Policy, s sdk.Subject, rules ...string) error
	SetOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, o driver.Override) (driver.Override, error)
	DeleteOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, id int64) error
	Overrides(ctx context.Context, p *sdk.Policy, s sdk.Subject) ([]driver.Override, error)
	Link(ctx context.Context, identity, person string, by, reason string) (driver.Link, error)
	Unlink(ctx context.Context, identity, by, reason string) error
	LinkOf(ctx context.Context, identity string) (driver.Link, error)
	Person(ctx context.Context, person string) (driver.Person, error)
	SetPersonZone(ctx context.Context, person string, zone string, by, reason string) error
}

var (
	_ Administrator = (*sdk.Admin)(nil)
	_ Administrator = (*Admin)(nil)
)

// Admin is sdk.Admin through the server: the administrative calls of a
// Client (Client.Admin), audited there with the caller's name. They are
// never re-sent (Retry), but for Inspect, which consumes nothing.
type Admin struct{ c *Client }

// Admin returns c's administrative calls, as sdk.Limiter.Admin does.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// Inspect is sdk.Admin.Inspect through the server (re-sent as Retry
// says).
func (a *Admin) Inspect(ctx context.Context, p *sdk.Policy, s sdk.Subject) (sdk.Inspection, error) {
	c := a.c
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	msg := &freqcapv1.InspectRequest{Policy: name(p), Subject: s}
	var res *connect.Response[freqcapv1.InspectResponse]
	err := c.send(ctx, func(ctx context.Context) (err error) {
		res, err = c.rpc().Inspect(ctx, connect.NewRequest(msg))
		return err
	})
	if err != nil {
		return sdk.Inspection{}, wrap("inspect", err)
	}
	return protoconv.FromInspection(res.Msg), nil
}

// Reset is sdk.Admin.Reset through the server.
func (a *Admin) Reset(ctx context.Context, p *sdk.Policy, s sdk.Subject) error {
	return a.reset(ctx, "reset", p, s, nil)
}

// ResetRules is sdk.Admin.ResetRules through the server: only the named
// rules' state of s is deleted. No name at all is an error wrapping
// sdk.ErrInvalidRule, as in the sdk, and nothing is sent; the server
// checks the names as the sdk does.
func (a *Admin) ResetRules(ctx context.Context, p *sdk.Policy, s sdk.Subject, rules ...string) error {
	if len(rules) == 0 {
		return fmt.Errorf("client: reset rules: %w: name at least one rule", sdk.ErrInvalidRule)
	}
	return a.reset(ctx, "reset rules", p, s, rules)
}

func (a *Admin) reset(ctx context.Context, op string, p *sdk.Policy, s sdk.Subject, rules []string) error {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	_, err := a.c.rpc().Reset(ctx, connect.NewRequest(&freqcapv1.ResetRequest{Policy: name(p), Subject: s, Rules: rules}))
	if err != nil {
		return wrap(op, err)
	}
	return nil
}

// SetOverride is sdk.Admin.SetOverride through the server (its
// OverrideService; the credential needs admin on the policy): it stores o
// for s under p with a new ID and returns it as stored. The server records
// its caller's name as By, whatever o.By says.
func (a *Admin) SetOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, o driver.Override) (driver.Override, error) {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	res, err := a.c.overrides.SetOverride(ctx, connect.NewRequest(&freqcapv1.SetOverrideRequest{
		Policy: name(p), Subject: s, Override: protoconv.Override(o),
	}))
	if err != nil {
		return driver.Override{}, wrap("set override", err)
	}
	return protoconv.FromOverride(res.Msg.GetOverride()), nil
}

// DeleteOverride is sdk.Admin.DeleteOverride through the server: an
// unknown, deleted or ended override is an error wrapping
// sdk.ErrOverrideNotFound.
func (a *Admin) DeleteOverride(ctx context.Context, p *sdk.Policy, s sdk.Subject, id int64) error {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	_, err := a.c.overrides.DeleteOverride(ctx, connect.NewRequest(&freqcapv1.DeleteOverrideRequest{Policy: name(p), Subject: s, Id: id}))
	if err != nil {
		return wrap("delete override", err)
	}
	return nil
}

// Overrides is sdk.Admin.Overrides through the server: s's live
// overrides under p, by ID.
func (a *Admin) Overrides(ctx context.Context, p *sdk.Policy, s sdk.Subject) ([]driver.Override, error) {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	res, err := a.c.overrides.ListOverrides(ctx, connect.NewRequest(&freqcapv1.ListOverridesRequest{Policy: name(p), Subject: s}))
	if err != nil {
		return nil, wrap("list overrides", err)
	}
	out := make([]driver.Override, 0, len(res.Msg.GetOverrides()))
	for _, o := range res.Msg.GetOverrides() {
		out = append(out, protoconv.FromOverride(o))
	}
	return out, nil
}

// Link is sdk.Admin.Link through the server (its PersonService; the
// credential needs admin on every policy, "admin@*"): it links identity
// to person and returns the link as stored. The server records its
// caller's name as By, whatever by says; reason is required. Errors wrap
// sdk.ErrInvalidIdentity, driver.ErrIdentityLinked and
// driver.ErrTooManyLinks as the sdk's do.
func (a *Admin) Link(ctx context.Context, identity, person string, by, reason string) (driver.Link, error) {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	res, err := a.c.people.LinkIdentity(ctx, connect.NewRequest(&freqcapv1.LinkIdentityRequest{Identity: identity, Person: person, Reason: reason}))
	if err != nil {
		return driver.Link{}, wrap("link", err)
	}
	return protoconv.FromLink(res.Msg.GetLink()), nil
}

// Unlink is sdk.Admin.Unlink through the server, as Link: an identity
// without a link is an error wrapping driver.ErrLinkNotFound.
func (a *Admin) Unlink(ctx context.Context, identity, by, reason string) error {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	_, err := a.c.people.UnlinkIdentity(ctx, connect.NewRequest(&freqcapv1.UnlinkIdentityRequest{Identity: identity, Reason: reason}))
	if err != nil {
		return wrap("unlink", err)
	}
	return nil
}

// LinkOf is sdk.Admin.LinkOf through the server (GetPerson of the
// identity; the credential needs inspect on every policy): identity's
// link, or an error wrapping driver.ErrLinkNotFound when it has none.
func (a *Admin) LinkOf(ctx context.Context, identity string) (driver.Link, error) {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	res, err := a.c.people.GetPerson(ctx, connect.NewRequest(&freqcapv1.GetPersonRequest{Identity: identity}))
	if err != nil {
		return driver.Link{}, wrap("link of", err)
	}
	if res.Msg.GetLink() == nil {
		return driver.Link{}, fmt.Errorf("client: link of: %w", driver.ErrLinkNotFound)
	}
	return protoconv.FromLink(res.Msg.GetLink()), nil
}

// Person is sdk.Admin.Person through the server (GetPerson of the
// person, as LinkOf): its identities (oldest first), its stored zone and
// its audit (newest first); empty for a person never linked nor given a
// zone.
func (a *Admin) Person(ctx context.Context, person string) (driver.Person, error) {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	res, err := a.c.people.GetPerson(ctx, connect.NewRequest(&freqcapv1.GetPersonRequest{Person: person}))
	if err != nil {
		return driver.Person{}, wrap("person", err)
	}
	return protoconv.FromPerson(res.Msg), nil
}

// SetPersonZone is sdk.Admin.SetPersonZone through the server, as Link:
// a zone the server cannot load is an error wrapping sdk.ErrInvalidZone;
// "" clears the stored zone.
func (a *Admin) SetPersonZone(ctx context.Context, person string, zone string, by, reason string) error {
	ctx, cancel := a.c.ctx(ctx)
	defer cancel()
	_, err := a.c.people.SetPersonZone(ctx, connect.NewRequest(&freqcapv1.SetPersonZoneRequest{Person: person, Zone: zone, Reason: reason}))
	if err != nil {
		return wrap("set person zone", err)
	}
	return nil
}

// Fault is one fault of a policy document: line (1-based; 0 unknown),
// key path and message.
type Fault struct {
	Line    int
	Key     string
	Message string
}

// PolicyVersion is one version of the server's policy store; YAML only
// from PolicyVersionOf.
type PolicyVersion struct {
	Version    int64
	At         time.Time
	By, Reason string
	YAML       string
}

// DocumentError is wrapped by PlanPolicies' and ApplyPolicies' errors
// for an invalid document: its faults, as the server reported them.
type DocumentError struct{ Faults []Fault }

// Error lists the faults, each with its line and key when known.
func (e *DocumentError) Error() string {
	parts := make([]string, len(e.Faults))
	for i, f := range e.Faults {
		var where []string
		if f.Line > 0 {
			where = append(where, fmt.Sprintf("line %d", f.Line))
		}
		if f.Key != "" {
			where = append(where, f.Key)
		}
		parts[i] = f.Message
		if len(where) > 0 {
			parts[i] = strings.Join(where, ", ") + ": " + f.Message
		}
	}
	return "invalid policy document: " + strings.Join(parts, "; ")
}

func fromFaults(in []*freqcapv1.DocumentFault) []Fault {
	out := make([]Fault, len(in))
	for i, f := range in {
		out[i] = Fault{Line: int(f.GetLine()), Key: f.GetKey(), Message: f.GetMessage()}
	}
	return out
}

// storeErr wraps a policy-store call's error: policystore's
// ErrVersionConflict, ErrNoPolicyVersion, ErrUnreadableVersion or
// ErrRekeyNotConfirmed, or a *DocumentError, as the server's reason says.
func storeErr(op string, err error) error {
	switch protoconv.ReasonOf(err) {
	case freqcapv1.Reason_REASON_INVALID_POLICY_DOCUMENT:
		return fmt.Errorf("client: %s: %w: %w", op, &DocumentError{Faults: fromFaults(protoconv.Faults(err))}, err)
	}
	return wrap(op, err)
}

func fromVersion(v *freqcapv1.PolicyVersion) PolicyVersion {
	out := PolicyVersion{Version: v.GetVersion(), By: v.GetBy(), Reason: v.GetReason(), YAML: v.GetYaml()}
	if v.GetAt() != nil {
		out.At = v.GetAt().AsTime()
	}
	return out
}

// PlanPolicies asks the server what applying doc (a policy file's YAML)
// would do, storing nothing: policystore.Store.Plan through the server
// (the credential needs inspect on every policy). The plan is what the
// wire carries (internal to the server: its policies and lineage; its
// changes name the rules without their definitions): Base (pass it to
// ApplyPolicies as expected), Diffs, Warnings, Rekeyed and String. A
// document with faults is an error wrapping a *DocumentError, as
// ApplyPolicies'.
func (c *Client) PlanPolicies(ctx context.Context, doc []byte) (*policystore.Plan, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.store.PlanPolicies(ctx, connect.NewRequest(&freqcapv1.PlanPoliciesRequest{Yaml: string(doc)}))
	if err != nil {
		return nil, storeErr("plan policies", err)
	}
	if m := res.Msg; !m.GetValid() {
		return nil, fmt.Errorf("client: plan policies: %w", &DocumentError{Faults: fromFaults(m.GetFaults())})
	}
	return protoconv.FromPlan(res.Msg, doc), nil
}

// ApplyPolicies stores doc as the store's next version if it is still at
// expected (else an error wrapping policystore.ErrVersionConflict,
// nothing stored), re-keying rules only with confirmRekey (else an error
// wrapping policystore.ErrRekeyNotConfirmed). The server records its
// caller's name as who applied it, with reason.
func (c *Client) ApplyPolicies(ctx context.Context, doc []byte, expected int64, confirmRekey bool, reason string) (PolicyVersion, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.store.ApplyPolicies(ctx, connect.NewRequest(&freqcapv1.ApplyPoliciesRequest{
		Yaml: string(doc), ExpectedVersion: expected, ConfirmRekey: confirmRekey, Reason: reason,
	}))
	if err != nil {
		return PolicyVersion{}, storeErr("apply policies", err)
	}
	return fromVersion(res.Msg.GetVersion()), nil
}

// PolicyHistory lists up to max versions of the store (max <= 0: all),
// newest first, without their documents.
func (c *Client) PolicyHistory(ctx context.Context, max int) ([]PolicyVersion, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.store.PolicyHistory(ctx, connect.NewRequest(&freqcapv1.PolicyHistoryRequest{Max: int32(max)}))
	if err != nil {
		return nil, storeErr("policy history", err)
	}
	out := make([]PolicyVersion, 0, len(res.Msg.GetVersions()))
	for _, v := range res.Msg.GetVersions() {
		out = append(out, fromVersion(v))
	}
	return out, nil
}

// PolicyVersionOf returns version n of the store (0: the current one)
// with its YAML; an error wrapping policystore.ErrNoPolicyVersion when there
// is none, policystore.ErrUnreadableVersion when it does not load
// (failed_precondition: apply a document or roll back; retrying does not
// help).
func (c *Client) PolicyVersionOf(ctx context.Context, n int64) (PolicyVersion, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.store.GetPolicyVersion(ctx, connect.NewRequest(&freqcapv1.GetPolicyVersionRequest{Version: n}))
	if err != nil {
		return PolicyVersion{}, storeErr("policy version", err)
	}
	return fromVersion(res.Msg.GetVersion()), nil
}

// RollbackPolicies applies version n's document again as a new version
// (expected 0: whatever version is current), as ApplyPolicies would.
func (c *Client) RollbackPolicies(ctx context.Context, n, expected int64, confirmRekey bool, reason string) (PolicyVersion, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	res, err := c.store.RollbackPolicies(ctx, connect.NewRequest(&freqcapv1.RollbackPoliciesRequest{
		Version: n, ExpectedVersion: expected, ConfirmRekey: confirmRekey, Reason: reason,
	}))
	if err != nil {
		return PolicyVersion{}, storeErr("rollback policies", err)
	}
	return fromVersion(res.Msg.GetVersion()), nil
}
