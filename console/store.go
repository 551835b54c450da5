package console

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freqcap/freqcap/fleet"
	"github.com/freqcap/freqcap/fleet/whatif"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// LiveSource returns the PolicySource of a console following a policy
// store through l (policystore.Store.Watch): every request reads
// l.Current().
func LiveSource(l *policystore.Live) PolicySource { return liveSource{l} }

type liveSource struct{ l *policystore.Live }

func (s liveSource) Policies() (int64, []*sdk.Policy) {
	snap := s.l.Current()
	return snap.Version, snap.Policies
}

// StoreEditor returns the PolicyEditor of st: the console's editor plans,
// applies and rolls back through it.
func StoreEditor(st *policystore.Store) PolicyEditor { return storeEditor{st} }

type storeEditor struct{ st *policystore.Store }

func (e storeEditor) Plan(ctx context.Context, src []byte) (PolicyPlan, error) {
	p, err := e.st.Plan(ctx, src)
	if err != nil {
		return PolicyPlan{}, err
	}
	out := planOf(p)
	if p.Against > 0 {
		// What the plan is against, whatever version this console runs.
		v, err := e.st.Version(ctx, p.Against)
		if err != nil {
			return PolicyPlan{}, err
		}
		if out.Current, err = v.Policies(); err != nil {
			return PolicyPlan{}, err
		}
	}
	return out, nil
}

func planOf(p *policystore.Plan) PolicyPlan {
	out := PolicyPlan{
		Base:      p.Base,
		Policies:  p.Policies,
		Warnings:  p.Warnings,
		Rekey:     len(p.Rekeyed()) > 0,
		Unchanged: !p.Changed(),
		Text:      p.String(),
	}
	for _, d := range p.Diffs {
		if d.Kind == policystore.Unchanged {
			continue
		}
		if len(d.Settings) > 0 || d.Kind != policystore.Modified {
			out.Changes = append(out.Changes, PlanChange{Policy: d.Policy, Kind: "policy " + d.Kind.String(), Detail: strings.Join(d.Settings, "; ")})
		}
		for _, r := range d.Rules {
			if r.Kind == policystore.Unchanged {
				continue
			}
			out.Changes = append(out.Changes, PlanChange{
				Policy: d.Policy, Rule: r.Rule, Kind: r.Kind.String(),
				Carries: strings.TrimPrefix(r.Carry.String(), "carries "),
				Detail:  strings.TrimPrefix(strings.Join(r.Fields, ", ")+"; "+r.Note, "; "),
			})
		}
	}
	return out
}

func (e storeEditor) Apply(ctx context.Context, src []byte, base int64, confirmRekey bool, by, reason string) (StoredPolicy, error) {
	p, err := e.st.Plan(ctx, src)
	if err != nil {
		return StoredPolicy{}, err
	}
	if p.Base != base {
		return StoredPolicy{}, fmt.Errorf("console: apply over version %d, the store is at %d: %w", base, p.Base, driver.ErrVersionConflict)
	}
	p.ConfirmRekey = confirmRekey
	v, err := e.st.Apply(ctx, p, by, reason)
	if errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		return StoredPolicy{}, fmt.Errorf("%w: %w", ErrRekeyUnconfirmed, err)
	}
	if err != nil {
		return StoredPolicy{}, err
	}
	return storedOf(v), nil
}

func storedOf(v policystore.Version) StoredPolicy {
	return StoredPolicy{Version: v.Number, Source: v.Source, At: v.At, By: v.By, Reason: v.Reason}
}

func (e storeEditor) History(ctx context.Context, max int) ([]StoredPolicy, error) {
	hs, err := e.st.History(ctx, max)
	if err != nil {
		return nil, err
	}
	out := make([]StoredPolicy, len(hs))
	for i, h := range hs {
		out[i] = storedOf(h.Version)
	}
	return out, nil
}

func (e storeEditor) Head(ctx context.Context) (StoreHead, error) {
	h, err := e.st.Head(ctx)
	if err != nil {
		return StoreHead{}, err
	}
	return StoreHead{Number: h.Number, Loaded: storedOf(h.Loaded), Problem: h.Problem()}, nil
}

func (e storeEditor) Version(ctx context.Context, n int64) (StoredPolicy, error) {
	v, err := e.st.Version(ctx, n)
	if err != nil {
		return StoredPolicy{}, err
	}
	return storedOf(v), nil
}

// FleetWhatIf returns the WhatIf of the editor's preview: fleet/whatif's
// Estimate over rd's traffic sample, for the last hour and 24 h, in
// words (Report.String: figures with their 95% intervals and what a
// replay cannot know).
func FleetWhatIf(rd *fleet.Reader) WhatIf { return fleetWhatIf{rd} }

type fleetWhatIf struct{ rd *fleet.Reader }

func (w fleetWhatIf) Estimate(ctx context.Context, current, proposed []*sdk.Policy) (string, error) {
	r, err := whatif.Estimate(ctx, w.rd, current, proposed)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}
