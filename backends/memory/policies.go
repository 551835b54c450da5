package memory

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/freqcap/freqcap/sdk/driver"
)

var (
	_ driver.PolicyStore  = (*Backend)(nil)
	_ driver.PolicyHeader = (*Backend)(nil)
)

// policyStores is a Backend's policy stores (driver.PolicyStore), by key.
// Every version is kept, in order, for the Backend's life. The zero value
// is empty.
type policyStores struct {
	mu     sync.Mutex
	stores map[string]*policyStore
}

// policyStore is one key's store: versions[i] is version i+1.
type policyStore struct {
	versions []driver.PolicyVersion
	watchers map[*policyWatcher]struct{}
}

// policyWatcher is one WatchPolicies channel. Sends and the close happen
// under policyStores.mu, so a send never meets a closed channel.
type policyWatcher struct {
	ch     chan int64
	closed bool
}

// notify offers v to w without blocking: the channel holds at most one
// number, the latest (an unread older one is replaced).
func (w *policyWatcher) notify(v int64) {
	if w.closed {
		return
	}
	select {
	case w.ch <- v:
		return
	default:
	}
	select {
	case <-w.ch: // drop the stale number the watcher has not read
	default:
	}
	select {
	case w.ch <- v:
	default:
	}
}

// store returns key's store, creating it when create is set (nil
// otherwise). The caller holds mu.
func (p *policyStores) store(key string, create bool) *policyStore {
	s := p.stores[key]
	if s == nil && create {
		if p.stores == nil {
			p.stores = make(map[string]*policyStore)
		}
		s = &policyStore{}
		p.stores[strings.Clone(key)] = s
	}
	return s
}

// clonePolicyVersion copies v's Document, so the store and its callers
// never share a byte slice.
func clonePolicyVersion(v driver.PolicyVersion) driver.PolicyVersion {
	v.Document = bytes.Clone(v.Document)
	if v.Document == nil {
		v.Document = []byte{}
	}
	return v
}

// PutPolicies stores v as version prev+1 of key's store if its current
// version is prev (0: empty), with At from the backend's clock, and offers
// the new version number to every watcher of key; otherwise it returns an
// error wrapping driver.ErrVersionConflict. A Document larger than
// driver.MaxPolicyDocument is refused. The store keeps every version for
// the Backend's life.
func (b *Backend) PutPolicies(ctx context.Context, key string, prev int64, v driver.PolicyVersion) (driver.PolicyVersion, error) {
	if err := ctx.Err(); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("memory: put policies: %w", err)
	}
	if prev < 0 {
		return driver.PolicyVersion{}, fmt.Errorf("memory: put policies: previous version %d is negative", prev)
	}
	if err := driver.CheckPolicyDocument(int64(len(v.Document))); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("memory: put policies: %w", err)
	}
	p := &b.policies
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.store(key, true)
	if cur := int64(len(s.versions)); cur != prev {
		return driver.PolicyVersion{}, fmt.Errorf("memory: put policies: %w: current version is %d, not %d", driver.ErrVersionConflict, cur, prev)
	}
	v = clonePolicyVersion(v)
	v.Version = prev + 1
	v.At = b.clock.Now().Round(0)
	s.versions = append(s.versions, v)
	for w := range s.watchers {
		w.notify(v.Version)
	}
	return clonePolicyVersion(v), nil
}

// GetPolicies returns version n of key's store (0: the current one), or an
// error wrapping driver.ErrNoPolicyVersion when the store does not hold it
// (driver.ErrPolicyTooLarge for a document larger than
// driver.MaxPolicyDocument, which only a test can store).
func (b *Backend) GetPolicies(ctx context.Context, key string, n int64) (driver.PolicyVersion, error) {
	if err := ctx.Err(); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("memory: get policies: %w", err)
	}
	p := &b.policies
	p.mu.Lock()
	defer p.mu.Unlock()
	var vs []driver.PolicyVersion
	if s := p.store(key, false); s != nil {
		vs = s.versions
	}
	if n == 0 {
		n = int64(len(vs))
	}
	if n < 1 || n > int64(len(vs)) {
		return driver.PolicyVersion{}, fmt.Errorf("memory: get policies: version %d: %w", n, driver.ErrNoPolicyVersion)
	}
	if err := driver.CheckPolicyDocument(int64(len(vs[n-1].Document))); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("memory: get policies: version %d: %w", n, err)
	}
	return clonePolicyVersion(vs[n-1]), nil
}

// PolicyHead returns key's current version without its Document, or an
// error wrapping driver.ErrNoPolicyVersion when the store is empty.
func (b *Backend) PolicyHead(ctx context.Context, key string) (driver.PolicyVersion, error) {
	if err := ctx.Err(); err != nil {
		return driver.PolicyVersion{}, fmt.Errorf("memory: policy head: %w", err)
	}
	p := &b.policies
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.store(key, false)
	if s == nil || len(s.versions) == 0 {
		return driver.PolicyVersion{}, fmt.Errorf("memory: policy head: %w", driver.ErrNoPolicyVersion)
	}
	v := s.versions[len(s.versions)-1]
	v.Document = nil
	return v, nil
}

// PolicyHistory returns up to max versions of key's store, newest first
// (max <= 0: all of them); none for an empty store.
func (b *Backend) PolicyHistory(ctx context.Context, key string, max int) ([]driver.PolicyVersion, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: policy history: %w", err)
	}
	p := &b.policies
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.store(key, false)
	if s == nil {
		return nil, nil
	}
	n := len(s.versions)
	if max > 0 && max < n {
		n = max
	}
	out := make([]driver.PolicyVersion, 0, n)
	for i := len(s.versions) - 1; len(out) < n; i-- {
		out = append(out, clonePolicyVersion(s.versions[i]))
	}
	return out, nil
}

// WatchPolicies returns a channel that receives key's current version
// number at once (when the store holds one) and after every PutPolicies
// on key. Sends never block: the channel holds one number, the latest, so
// a slow reader sees coalesced versions but never misses the newest. The
// channel is closed when ctx is done. No goroutine runs while ctx is live.
func (b *Backend) WatchPolicies(ctx context.Context, key string) (<-chan int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: watch policies: %w", err)
	}
	p := &b.policies
	w := &policyWatcher{ch: make(chan int64, 1)}
	p.mu.Lock()
	s := p.store(key, true)
	if s.watchers == nil {
		s.watchers = make(map[*policyWatcher]struct{})
	}
	s.watchers[w] = struct{}{}
	if cur := int64(len(s.versions)); cur > 0 {
		w.notify(cur)
	}
	p.mu.Unlock()
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(s.watchers, w)
		w.closed = true
		close(w.ch)
	})
	return w.ch, nil
}
