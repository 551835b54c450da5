package serve

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/freqcap/freqcap/ratelimitheaders"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// policySet is a snapshot (a version of the policy store, or the
// policies of a file: version 0) indexed for the calls, with its own
// RateLimit-Policy cache (dropped with the version).
type policySet struct {
	version int64
	at      time.Time
	byName  map[string]*sdk.Policy
	order   []*sdk.Policy
	headers ratelimitheaders.Cache
}

func newPolicySet(snap *policystore.Snapshot) (*policySet, error) {
	if snap == nil {
		snap = &policystore.Snapshot{}
	}
	ps := &policySet{version: snap.Version, at: snap.At, byName: make(map[string]*sdk.Policy, len(snap.Policies))}
	for _, p := range snap.Policies {
		if p == nil {
			return nil, errors.New("serve: a nil policy")
		}
		if ps.byName[p.Name()] != nil {
			return nil, fmt.Errorf("serve: two policies are named %q", p.Name())
		}
		ps.byName[p.Name()] = p
		ps.order = append(ps.order, p)
	}
	return ps, nil
}

// policies serves the static set, or follows Config.Live: the set is
// rebuilt when the version changes, and each call reads it once.
type policies struct {
	live func() *policystore.Snapshot
	cur  atomic.Pointer[policySet]
}

// empty is the set served before a live snapshot could be indexed.
var empty = &policySet{byName: map[string]*sdk.Policy{}}

// current returns the policies a call decides with. A live snapshot that
// cannot be indexed (two policies of one name: the store refuses such a
// document) keeps the previous set (none before the first).
func (ps *policies) current() *policySet {
	cur := ps.cur.Load()
	if ps.live == nil {
		return cur
	}
	snap := ps.live()
	if cur != nil && snap != nil && snap.Version == cur.version {
		return cur
	}
	next, err := newPolicySet(snap)
	if err != nil {
		if cur == nil {
			return empty
		}
		return cur
	}
	// Another call may have installed it (or a later one) meanwhile: keep
	// the newest.
	for {
		old := ps.cur.Load()
		if old != nil && old.version >= next.version {
			return old
		}
		if ps.cur.CompareAndSwap(old, next) {
			return next
		}
	}
}
