package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/policyfile"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// LiveOf returns a Config.Live that serves l's current version.
func LiveOf(l *policystore.Live) func() Snapshot {
	return func() Snapshot {
		s := l.Current()
		return Snapshot{Version: s.Version, At: s.At, Policies: s.Policies}
	}
}

// StoreOf adapts st to the PolicyStore PolicyService calls. A document is
// checked as policyfile.Load checks a file before anything else: its
// fault is reported as one Fault whose message names the line and key.
func StoreOf(st *policystore.Store) PolicyStore { return fileStore{st} }

type fileStore struct{ st *policystore.Store }

// check validates doc without the store: its faults, or none.
func check(doc []byte) []Fault {
	if _, err := policyfile.Load(bytes.NewReader(doc)); err != nil {
		return []Fault{{Message: err.Error()}}
	}
	return nil
}

func (fs fileStore) Plan(ctx context.Context, doc []byte) (Plan, error) {
	if f := check(doc); f != nil {
		return Plan{Faults: f}, nil
	}
	p, err := fs.st.Plan(ctx, doc)
	if err != nil {
		return Plan{}, err
	}
	out := Plan{Base: p.Base, Text: p.String(), Warnings: p.Warnings, Rekey: len(p.Rekeyed()) > 0}
	for _, d := range p.Diffs {
		if d.Kind == policystore.Unchanged {
			continue
		}
		if d.Kind != policystore.Modified {
			out.Changes = append(out.Changes, Change{Policy: d.Policy, Kind: d.Kind.String()})
		}
		for _, s := range d.Settings {
			out.Changes = append(out.Changes, Change{Policy: d.Policy, Kind: "setting", Detail: s})
		}
		for _, r := range d.Rules {
			if r.Kind == policystore.Unchanged {
				continue
			}
			detail := strings.Join(r.Fields, ", ")
			if r.Note != "" {
				if detail != "" {
					detail += ": "
				}
				detail += r.Note
			}
			out.Changes = append(out.Changes, Change{
				Policy: d.Policy, Rule: r.Rule, Kind: r.Kind.String(),
				Carries: strings.TrimPrefix(r.Carry.String(), "carries "), Detail: detail,
			})
		}
	}
	return out, nil
}

// apply stores plan if its base is expected (expected < 0: any).
func (fs fileStore) apply(ctx context.Context, plan *policystore.Plan, expected int64, confirmRekey bool, by, reason string) (Version, error) {
	if expected >= 0 && plan.Base != expected {
		return Version{}, fmt.Errorf("serve: apply: the store is at version %d, not %d: %w", plan.Base, expected, driver.ErrVersionConflict)
	}
	plan.ConfirmRekey = confirmRekey
	v, err := fs.st.Apply(ctx, plan, by, reason)
	if errors.Is(err, policystore.ErrRekeyNotConfirmed) {
		return Version{}, fmt.Errorf("%w: %w", ErrRekeyUnconfirmed, err)
	}
	if err != nil {
		return Version{}, err
	}
	return version1(v), nil
}

func version1(v policystore.Version) Version {
	return Version{Version: v.Number, At: v.At, By: v.By, Reason: v.Reason, Document: v.Source}
}

func (fs fileStore) Apply(ctx context.Context, doc []byte, expected int64, confirmRekey bool, by, reason string) (Version, error) {
	if f := check(doc); f != nil {
		return Version{}, &DocumentError{Faults: f}
	}
	plan, err := fs.st.Plan(ctx, doc)
	if err != nil {
		return Version{}, err
	}
	return fs.apply(ctx, plan, expected, confirmRekey, by, reason)
}

func (fs fileStore) History(ctx context.Context, max int) ([]Version, error) {
	hs, err := fs.st.History(ctx, max)
	if err != nil {
		return nil, err
	}
	out := make([]Version, len(hs))
	for i, h := range hs {
		out[i] = version1(h.Version)
		out[i].Document = nil
	}
	return out, nil
}

func (fs fileStore) Version(ctx context.Context, n int64) (Version, error) {
	v, err := fs.st.Version(ctx, n)
	if err != nil {
		return Version{}, err
	}
	return version1(v), nil
}

func (fs fileStore) Rollback(ctx context.Context, n, expected int64, confirmRekey bool, by, reason string) (Version, error) {
	plan, err := fs.st.PlanRollback(ctx, n)
	if err != nil {
		return Version{}, err
	}
	if expected == 0 {
		expected = -1
	}
	return fs.apply(ctx, plan, expected, confirmRekey, by, reason)
}
