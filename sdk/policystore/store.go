package policystore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// ErrRekeyNotConfirmed is returned by Apply (and Rollback) for a plan
// that re-keys rules (their counts start afresh) without
// Plan.ConfirmRekey: nothing was stored. serve, the console and the client
// return it too (wrapped), for the same refusal.
var ErrRekeyNotConfirmed = errors.New("policystore: the plan re-keys rules (their counts start afresh) and is not confirmed")

// Version is one stored version of the policies.
type Version struct {
	// Number counts versions from 1.
	Number int64
	// At is when it was applied (the backend's clock); By and Reason who
	// applied it and why.
	At     time.Time
	By     string
	Reason string
	// Source is the policy file as applied, verbatim.
	Source []byte
	lin    lineage
}

// Policies returns the version's policies as limiters run them: each
// rule with its epoch, each identity change still recorded
// (sdk.WithChange); an error wrapping ErrUnreadableVersion when they do
// ("" when none is after it).
func (v Version) Policies() ([]*sdk.Policy, error) {
	ps, err := parse(v.Source, fmt.Sprintf("version %d", v.Number))
	var out []*sdk.Policy
	if err == nil {
		out, err = build(ps, v.lin, v.At)
	}
	if err != nil {
		return nil, &versionError{n: v.Number, err: err}
	}
	return out, nil
}

// decodeVersion decodes pv's document; its error is a versionError.
func decodeVersion(pv driver.PolicyVersion) (Version, error) {
	err := driver.CheckPolicyDocument(int64(len(pv.Document)))
	var src []byte
	var lin lineage
	if err == nil {
		src, lin, err = decodeDocument(pv.Document, pv.At)
	}
	if err != nil {
		return Version{}, &versionError{n: pv.Version, err: err}
	}
	return Version{Number: pv.Version, At: pv.At, By: pv.By, Reason: pv.Reason, Source: src, lin: lin}, nil
}

// Plan is a policy file checked and compared with the store's current
// version: what Apply would store. Set ConfirmRekey to apply a plan
// that re-keys rules.
type Plan struct {
	// Base is the store's current version when the plan was made (0: the
	// store was empty); Version the one Apply stores (Base+1).
	Base, Version int64
	// Against is the version the plan compares with: Base, or, when Base
	// does not load (Head), the newest version before it that loads (0:
	// none, or an empty store). Rules the plan does not change keep that
	// version's keys and counts.
	Against int64
	// Source is the policy file, verbatim.
	Source []byte
	// Policies are the planned policies as limiters will run them
	// (identity changes dated at the plan's time until applied).
	Policies []*sdk.Policy
	// Diffs say per policy and rule what changes and what carries.
	Diffs []PolicyDiff
	// Warnings are what to read before applying: re-keyed, removed and
	// renamed rules, removed policies.
	Warnings []string
	// ConfirmRekey lets Apply store a plan that re-keys rules.
	ConfirmRekey bool
	lin          lineage
	// unreadableBase: no version of the store loads, so every rule
	// starts afresh (confirmed as a re-key is).
	unreadableBase bool
}

// Rekeyed lists the rules the plan re-keys, as "policy/rule" (every
// rule, when no version of the store loads).
func (p *Plan) Rekeyed() []string {
	var out []string
	for _, d := range p.Diffs {
		if p.unreadableBase {
			for _, r := range d.Rules {
				out = append(out, d.Policy+"/"+r.Rule)
			}
			continue
		}
		for _, r := range d.Rules {
			if r.Kind == Rekeyed {
				out = append(out, d.Policy+"/"+r.Rule)
			}
		}
	}
	return out
}

// Changed reports whether the plan differs from its base at all (it
// does when the base does not load: applying it replaces the base).
func (p *Plan) Changed() bool {
	if p.Base == 0 || p.Against != p.Base {
		return true
	}
	for _, d := range p.Diffs {
		if d.Kind != Unchanged {
			return true
		}
	}
	return false
}

// String writes the plan for people: the versions, per policy and rule
// what changes and what carries, then the warnings.
func (p *Plan) String() string {
	var b strings.Builder
	switch {
	case p.Base == 0:
		fmt.Fprintf(&b, "plan: version %d (the store is empty)\n", p.Version)
	case p.Against == p.Base:
		fmt.Fprintf(&b, "plan: version %d (against version %d)\n", p.Version, p.Base)
	case p.Against == 0:
		fmt.Fprintf(&b, "plan: version %d (the current version %d does not load, nor does any before it)\n", p.Version, p.Base)
	default:
		fmt.Fprintf(&b, "plan: version %d (against version %d: the current version %d does not load)\n", p.Version, p.Against, p.Base)
	}
	if !p.Changed() {
		b.WriteString("no changes\n")
	}
	for _, d := range p.Diffs {
		fmt.Fprintf(&b, "policy %s: %s\n", d.Policy, d.Kind)
		for _, s := range d.Settings {
			fmt.Fprintf(&b, "  setting %s\n", s)
		}
		for _, r := range d.Rules {
			switch r.Kind {
			case Unchanged:
				fmt.Fprintf(&b, "  rule %s: unchanged%s\n", r.Rule, describeRule(r.After, " (%s)"))
			case Added:
				fmt.Fprintf(&b, "  rule %s: added%s; %s\n", r.Rule, describeRule(r.After, ": %s"), r.Note)
			case Removed:
				fmt.Fprintf(&b, "  rule %s: removed%s; %s\n", r.Rule, describeRule(r.Before, " (%s)"), r.Note)
			default:
				fmt.Fprintf(&b, "  rule %s: %s: %s; %s: %s\n", r.Rule, r.Kind, strings.Join(r.Fields, ", "), r.Carry, r.Note)
			}
		}
	}
	if len(p.Warnings) > 0 {
		b.WriteString("warnings:\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "  - %s\n", w)
		}
	}
	if rk := p.Rekeyed(); len(rk) > 0 && !p.ConfirmRekey {
		fmt.Fprintf(&b, "applying needs confirmation: %d re-keyed rule(s)\n", len(rk))
	}
	return b.String()
}

// Plan checks the policy file src as Load does (errors give the line and
// key at fault) and compares it with the store's current version: per
// policy and rule what changes and what carries (ChangeKind, Carry), and
// warnings. It stores nothing. When the current version does not load
// (or is missing), the plan compares with the newest version before it
// that loads (Plan.Against, Head), the one limiters keep running, and a
// warning says so: rules it does not change keep their counts.
func (s *Store) Plan(ctx context.Context, src []byte) (*Plan, error) {
	next, err := parse(src, "policies")
	if err != nil {
		return nil, err
	}
	h, err := s.Head(ctx)
	if err != nil {
		return nil, fmt.Errorf("policystore: plan: %w", err)
	}
	now := s.now()
	lin, diffs, warns := derive(h.parsed, h.Loaded.lin, next, h.Number+1, now)
	unreadable := h.Number > 0 && h.Loaded.Number == 0
	switch {
	case unreadable:
		warns = append([]string{fmt.Sprintf("%s; nor does any version before it: every rule of this plan starts afresh; confirm with -rekey (Plan.ConfirmRekey)", h.Problem())}, warns...)
	case len(h.Unloadable) > 0:
		warns = append([]string{fmt.Sprintf("%s: this plan is made against version %d, the newest version that loads (the one limiters keep running): the rules it does not change keep their counts", h.Problem(), h.Loaded.Number)}, warns...)
	}
	policies, err := build(next, lin, now)
	if err != nil {
		return nil, fmt.Errorf("policystore: plan: %w", err)
	}
	return &Plan{
		unreadableBase: unreadable,
		Base:           h.Number,
		Against:        h.Loaded.Number,
		Version:        h.Number + 1,
		Source:         append([]byte(nil), src...),
		Policies:       policies,
		Diffs:          diffs,
		Warnings:       warns,
		lin:            lin,
	}, nil
}

// Apply stores plan as the store's next version, applied by by for
// reason, if the store is still at the version the plan was made against;
// otherwise it stores nothing and returns an error wrapping
// ErrVersionConflict (plan again). A plan that re-keys rules needs
// plan.ConfirmRekey (else ErrRekeyNotConfirmed). by is at most
// driver.MaxOverrideByLen bytes and reason driver.MaxOverrideReasonLen, neither
// holding control characters.
func (s *Store) Apply(ctx context.Context, plan *Plan, by, reason string) (Version, error) {
	if plan == nil || plan.Version != plan.Base+1 {
		return Version{}, errors.New("policystore: apply: no plan (use Store.Plan)")
	}
	if err := checkText("by", by, driver.MaxOverrideByLen); err != nil {
		return Version{}, err
	}
	if err := checkText("reason", reason, driver.MaxOverrideReasonLen); err != nil {
		return Version{}, err
	}
	if rk := plan.Rekeyed(); len(rk) > 0 && !plan.ConfirmRekey {
		return Version{}, fmt.Errorf("policystore: apply: %w: %s", ErrRekeyNotConfirmed, strings.Join(rk, ", "))
	}
	doc, err := encodeDocument(plan.Source, plan.lin)
	if err != nil {
		return Version{}, err
	}
	pv, err := s.PutPolicies(ctx, plan.Base, driver.PolicyVersion{Document: doc, By: by, Reason: reason})
	if errors.Is(err, driver.ErrVersionConflict) {
		return Version{}, fmt.Errorf("policystore: apply: the store is past version %d, which the plan was made against (someone applied since): plan again: %w", plan.Base, err)
	}
	if err != nil {
		return Version{}, fmt.Errorf("policystore: apply: %w", err)
	}
	return Version{Number: pv.Version, At: pv.At, By: pv.By, Reason: pv.Reason, Source: plan.Source, lin: plan.lin}, nil
}

// checkText checks an author or reason: at most max bytes, no control
// characters (it is printed in one line of a history).
func checkText(field, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("policystore: apply: %s is %d bytes, more than %d", field, len(v), max)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("policystore: apply: %s holds a control character (a line break or tab)", field)
		}
	}
	return nil
}

// Version returns version n of the store (0: the current one). The error
// wraps ErrNoPolicyVersion when there is none (for n = 0: the store is
// empty), ErrUnreadableVersion when its document does not decode
// (ErrUnknownFormat, too large), ErrMissingVersion too when the current
// version number names a version the store does not hold.
func (s *Store) Version(ctx context.Context, n int64) (Version, error) {
	var pv driver.PolicyVersion
	var err error
	if n == 0 {
		stamp, full, cerr := s.current(ctx)
		switch {
		case errors.Is(cerr, driver.ErrNoPolicyVersion):
			return Version{}, fmt.Errorf("policystore: the policy store is empty (no version applied yet): %w", cerr)
		case cerr != nil:
			return Version{}, fmt.Errorf("policystore: read the current version: %w", cerr)
		case full != nil:
			pv = *full
		default:
			pv, err = s.fetch(ctx, stamp.Version, true)
		}
	} else {
		pv, err = s.fetch(ctx, n, false)
	}
	if err != nil {
		return Version{}, err
	}
	return decodeVersion(pv)
}

// HistoryEntry is one version in a store's history: Err is set (and
// Version holds only its number, time, author and reason) when its
// document does not decode (it wraps ErrUnreadableVersion).
type HistoryEntry struct {
	Version
	Err error
}

// History returns up to max versions, newest first (max <= 0: all).
func (s *Store) History(ctx context.Context, max int) ([]HistoryEntry, error) {
	pvs, err := s.PolicyHistory(ctx, max)
	if err != nil {
		return nil, fmt.Errorf("policystore: history: %w", err)
	}
	out := make([]HistoryEntry, len(pvs))
	for i, pv := range pvs {
		v, err := decodeVersion(pv)
		if err != nil {
			v = Version{Number: pv.Version, At: pv.At, By: pv.By, Reason: pv.Reason}
		}
		out[i] = HistoryEntry{Version: v, Err: err}
	}
	return out, nil
}

// PlanRollback plans applying version n's source again, as a new
// version: through the same lineage, so rules whose identity differs
// from the current version's get a new epoch (no stale state of an
// earlier identity is reused) and carry as any change does. Like Plan, it
// compares with the newest version that loads. Version n must load (else
// an error wrapping ErrUnreadableVersion).
func (s *Store) PlanRollback(ctx context.Context, n int64) (*Plan, error) {
	if n <= 0 {
		return nil, fmt.Errorf("policystore: rollback: version must be >= 1, got %d", n)
	}
	pv, err := s.fetch(ctx, n, false)
	var v Version
	if err == nil {
		v, _, err = loadVersion(pv)
	}
	if err != nil {
		return nil, fmt.Errorf("policystore: rollback: %w", err)
	}
	return s.Plan(ctx, v.Source)
}

// Rollback applies version n's source again as a new version (see
// PlanRollback). It refuses a rollback that re-keys rules
// (ErrRekeyNotConfirmed): use PlanRollback, set ConfirmRekey, and Apply.
func (s *Store) Rollback(ctx context.Context, n int64, by, reason string) (Version, error) {
	plan, err := s.PlanRollback(ctx, n)
	if err != nil {
		return Version{}, err
	}
	if reason == "" {
		reason = fmt.Sprintf("rollback to version %d", n)
	}
	return s.Apply(ctx, plan, by, reason)
}
