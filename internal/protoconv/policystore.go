package protoconv

import (
	"strings"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// This file owns the policy store's plan on the wire: serve writes a
// policystore.Plan as a PlanPoliciesResponse (Plan), the client reads it
// back (FromPlan).

// Plan is p as PlanPolicies answers it: its changes flattened (a policy's
// own change, then its settings, then its rules; unchanged ones left out),
// its text (p.String()), warnings and whether it re-keys.
func Plan(p *policystore.Plan) *freqcapv1.PlanPoliciesResponse {
	out := &freqcapv1.PlanPoliciesResponse{
		Valid: true, BaseVersion: p.Base, Text: p.String(), Warnings: p.Warnings, Rekey: len(p.Rekeyed()) > 0,
	}
	for _, d := range p.Diffs {
		if d.Kind == policystore.Unchanged {
			continue
		}
		if d.Kind != policystore.Modified {
			out.Changes = append(out.Changes, &freqcapv1.PolicyChange{Policy: d.Policy, Kind: d.Kind.String()})
		}
		for _, s := range d.Settings {
			out.Changes = append(out.Changes, &freqcapv1.PolicyChange{Policy: d.Policy, Kind: settingKind, Detail: s})
		}
		for _, r := range d.Rules {
			if r.Kind == policystore.Unchanged {
				continue
			}
			detail := strings.Join(r.Fields, ", ")
			if r.Note != "" {
				if detail != "" {
					detail += fieldsEnd
				}
				detail += r.Note
			}
			out.Changes = append(out.Changes, &freqcapv1.PolicyChange{
				Policy: d.Policy, Rule: r.Rule, Kind: r.Kind.String(),
				Carries: strings.TrimPrefix(r.Carry.String(), carriesWord), Detail: detail,
			})
		}
	}
	return out
}

const (
	// settingKind is the kind of a policy setting's change.
	settingKind = "setting"
	// fieldsEnd ends a rule's changed fields in a change's detail, before
	// the note.
	fieldsEnd = ": "
	// carriesWord starts every Carry's String, left out on the wire.
	carriesWord = "carries "
)

// FromPlan is the plan of doc a PlanPolicies answer m describes, as far as
// the wire carries it: its versions (against Base), warnings and changed
// rules, without rule definitions (Before and After are nil), policies or
// lineage. It needs m valid (no faults).
func FromPlan(m *freqcapv1.PlanPoliciesResponse, doc []byte) *policystore.Plan {
	p := &policystore.Plan{
		Base: m.GetBaseVersion(), Version: m.GetBaseVersion() + 1, Against: m.GetBaseVersion(),
		Source: doc, Warnings: m.GetWarnings(),
	}
	for _, c := range m.GetChanges() {
		if n := len(p.Diffs); n == 0 || p.Diffs[n-1].Policy != c.GetPolicy() {
			p.Diffs = append(p.Diffs, policystore.PolicyDiff{Policy: c.GetPolicy(), Kind: policystore.Modified})
		}
		d := &p.Diffs[len(p.Diffs)-1]
		switch {
		case c.GetRule() == "" && c.GetKind() == settingKind:
			d.Settings = append(d.Settings, c.GetDetail())
		case c.GetRule() == "":
			d.Kind = changeKind(c.GetKind())
		default:
			r := policystore.RuleDiff{Rule: c.GetRule(), Kind: changeKind(c.GetKind()), Carry: carry(c.GetCarries()), Note: c.GetDetail()}
			switch r.Kind {
			case policystore.Modified, policystore.Reidentified, policystore.Rekeyed:
				fields, note, _ := strings.Cut(c.GetDetail(), fieldsEnd)
				r.Fields, r.Note = strings.Split(fields, ", "), note
			}
			d.Rules = append(d.Rules, r)
		}
	}
	return p
}

// changeKind is the ChangeKind whose String is s (Modified when none is).
func changeKind(s string) policystore.ChangeKind {
	for k := policystore.Unchanged; k <= policystore.Rekeyed; k++ {
		if k.String() == s {
			return k
		}
	}
	return policystore.Modified
}

// carry is the Carry whose String is "carries "+s (CarriesNothing when
// none is).
func carry(s string) policystore.Carry {
	for c := policystore.CarriesExactly; c <= policystore.CarriesNothing; c++ {
		if c.String() == carriesWord+s {
			return c
		}
	}
	return policystore.CarriesNothing
}
