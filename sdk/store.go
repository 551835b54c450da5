package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/freqcap/freqcap/sdk/driver"
)

// PolicyVersion is one version of a policy store's document: its number
// (from 1), the document as stored (sdk/policyfile's format), when it was
// applied (the backend's clock), by whom and why.
type PolicyVersion = driver.PolicyVersion

// Errors of the policy store, matched with errors.Is.
var (
	// ErrVersionConflict is returned by PutPolicies when the store's
	// current version is not the one given: someone applied in between.
	// Read the current version, merge, and put again.
	ErrVersionConflict = driver.ErrVersionConflict
	// ErrNoPolicyVersion is returned by GetPolicies for a version the
	// store does not hold (or any version of an empty store).
	ErrNoPolicyVersion = driver.ErrNoPolicyVersion
	// ErrPolicyTooLarge is returned by PutPolicies for a document larger
	// than MaxPolicyDocument, and by GetPolicies for one stored by hand.
	ErrPolicyTooLarge = driver.ErrPolicyTooLarge
)

// MaxPolicyDocument is the largest document PutPolicies stores: 1 MiB.
const MaxPolicyDocument = driver.MaxPolicyDocument

// policyStoreKey is the storage key of the policy store of a Limiter with
// prefix: one store per prefix.
func policyStoreKey(prefix string) string { return prefix + ":{!policies}" }

// policyStore returns the Limiter's backend as a driver.PolicyStore, or an
// error naming op and wrapping errors.ErrUnsupported.
func (l *Limiter) policyStore(op string) (driver.PolicyStore, error) {
	if err := l.hasBackend(op); err != nil {
		return nil, err
	}
	ps, ok := l.b.(driver.PolicyStore)
	if !ok {
		return nil, fmt.Errorf("sdk: %s: backend %T does not keep policies: %w", op, l.b, errors.ErrUnsupported)
	}
	return ps, nil
}

// PutPolicies stores v as the next version of the policy store, atomically,
// if its current version is prev (0: the store is empty); otherwise it
// stores nothing and returns an error wrapping ErrVersionConflict. The
// store sets v.Version (prev+1) and v.At (the backend's clock) and returns
// the version as stored; then every WatchPolicies of the store hears of
// it. A Document larger than MaxPolicyDocument is refused.
//
// The store belongs to the Limiter's prefix (WithPrefix): every Limiter
// with the same prefix on the same backend shares one store, under the
// key "<prefix>:{!policies}" (and keys starting with it). The backend
// must keep policies (the memory and Redis backends do), else the error
// wraps errors.ErrUnsupported.
func (l *Limiter) PutPolicies(ctx context.Context, prev int64, v PolicyVersion) (PolicyVersion, error) {
	const op = "put policies"
	ps, err := l.policyStore(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	if prev < 0 {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: previous version %d is negative", op, prev)
	}
	if err := driver.CheckPolicyDocument(int64(len(v.Document))); err != nil {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := ps.PutPolicies(ctx, policyStoreKey(l.prefix), prev, v)
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	return out, nil
}

// GetPolicies returns version n of the policy store (0: the current one),
// or an error wrapping ErrNoPolicyVersion when the store does not hold it,
// ErrPolicyTooLarge when its document is larger than MaxPolicyDocument
// (written by hand: it is not read).
// The store is the Limiter's prefix's (see PutPolicies).
func (l *Limiter) GetPolicies(ctx context.Context, n int64) (PolicyVersion, error) {
	const op = "get policies"
	ps, err := l.policyStore(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	v, err := ps.GetPolicies(ctx, policyStoreKey(l.prefix), n)
	if err == nil {
		// A backend that does not check it itself still hands no
		// oversize document on.
		err = driver.CheckPolicyDocument(int64(len(v.Document)))
	}
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	return v, nil
}

// PolicyHistory returns up to max versions of the policy store, newest
// first (max <= 0: all); none for an empty store. The store is the
// Limiter's prefix's (see PutPolicies).
func (l *Limiter) PolicyHistory(ctx context.Context, max int) ([]PolicyVersion, error) {
	const op = "policy history"
	ps, err := l.policyStore(op)
	if err != nil {
		return nil, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	h, err := ps.PolicyHistory(ctx, policyStoreKey(l.prefix), max)
	if err != nil {
		return nil, fmt.Errorf("sdk: %s: %w", op, err)
	}
	return h, nil
}

// WatchPolicies returns a channel that receives the policy store's current
// version number soon after every PutPolicies by any process sharing the
// backend and prefix (and, on the memory and Redis backends, the current
// one at once when the store holds a version). The channel holds the
// latest number only: a slow reader sees versions coalesced, never a
// stale one last. It is closed when ctx is done; cancel ctx to release
// the watch (on Redis: a goroutine and a connection). Notifications can
// be missed while a backend is unreachable (the Redis backend catches up
// when it reconnects), so a follower also polls GetPolicies. The
// Limiter's timeout (WithTimeout) does not apply to the watch itself.
func (l *Limiter) WatchPolicies(ctx context.Context) (<-chan int64, error) {
	const op = "watch policies"
	ps, err := l.policyStore(op)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ch, err := ps.WatchPolicies(ctx, policyStoreKey(l.prefix))
	if err != nil {
		return nil, fmt.Errorf("sdk: %s: %w", op, err)
	}
	return ch, nil
}
