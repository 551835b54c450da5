package console

import (
	"fmt"
	"sync/atomic"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// PolicySource gives the policies in force when the console follows a
// policy store rather than a fixed list: every page and API call reads the
// current snapshot. A *policystore.Live (policystore.Store.Watch)
// implements it; it must be safe for concurrent use and cheap (it is read
// on every request).
type PolicySource interface {
	// Current returns the version in force (nil or Version 0: not a
	// store version) and its policies, in order, names unique. The
	// console never modifies it.
	Current() *policystore.Snapshot
}

// sourcePolicies is src's version in force and its policies (0 and none
// before it has one).
func sourcePolicies(src PolicySource) (int64, []*sdk.Policy) {
	snap := src.Current()
	if snap == nil {
		return 0, nil
	}
	return snap.Version, snap.Policies
}

// policySet is one snapshot of the console's policies.
type policySet struct {
	version int64
	order   []*sdk.Policy
	byName  map[string]*sdk.Policy
	// src is the slice the set was built from (a source's snapshot).
	src []*sdk.Policy
}

func newPolicySet(version int64, pols []*sdk.Policy) (*policySet, error) {
	ps := &policySet{version: version, byName: make(map[string]*sdk.Policy, len(pols)), src: pols}
	for _, p := range pols {
		if p == nil {
			return nil, fmt.Errorf("console: nil policy")
		}
		if _, dup := ps.byName[p.Name()]; dup {
			return nil, fmt.Errorf("console: policy %q given twice", p.Name())
		}
		ps.byName[p.Name()] = p
		ps.order = append(ps.order, p)
	}
	return ps, nil
}

// policyCache holds the snapshot built from a PolicySource's latest answer.
type policyCache struct {
	set atomic.Pointer[policySet]
}

// snap returns the policies in force: Config.Policies, or the source's
// current snapshot (rebuilt when its version or slice changes; a snapshot
// the console cannot use keeps the previous one, logged).
func (s *Server) snap() *policySet {
	cur := s.pcache.set.Load()
	if s.cfg.Source == nil {
		return cur
	}
	v, pols := sourcePolicies(s.cfg.Source)
	if cur != nil && cur.version == v && sameSlice(cur.src, pols) {
		return cur
	}
	ps, err := newPolicySet(v, pols)
	if err == nil && len(ps.order) == 0 {
		err = fmt.Errorf("console: policy version %d has no policies", v)
	}
	if err != nil {
		s.warn.Error("policy-source", "console: policies from the store cannot be used; keeping the previous ones", "version", v, "err", err)
		if cur == nil {
			return &policySet{byName: map[string]*sdk.Policy{}}
		}
		return cur
	}
	s.pcache.set.Store(ps)
	return ps
}

func sameSlice(a, b []*sdk.Policy) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
