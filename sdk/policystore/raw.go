package policystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// This file owns the store's raw versions: documents as the backend keeps
// them (driver.PolicyStore), under the store's key, with the store's
// timeout. The rest of the package reads and writes versions only here.

// PolicyVersion is one version of the store's document as the backend
// keeps it: its number (from 1), the document (this package's format),
// when it was applied (the backend's clock), by whom and why.
type PolicyVersion = driver.PolicyVersion

// Errors of the backend's policy store, matched with errors.Is.
var (
	// ErrVersionConflict is returned by PutPolicies (and Apply) when the
	// store's current version is not the one given: someone applied in
	// between. Read the current version, merge, and put (plan) again.
	ErrVersionConflict = driver.ErrVersionConflict
	// ErrNoPolicyVersion is returned by GetPolicies and Version for a
	// version the store does not hold (or any version of an empty store).
	ErrNoPolicyVersion = driver.ErrNoPolicyVersion
	// ErrPolicyTooLarge is returned by PutPolicies for a document larger
	// than MaxPolicyDocument, and by GetPolicies for one stored by hand.
	ErrPolicyTooLarge = driver.ErrPolicyTooLarge
)

// MaxPolicyDocument is the largest document PutPolicies stores: 1 MiB.
const MaxPolicyDocument = driver.MaxPolicyDocument

// A Store keeps policy files as versions in a backend's policy store:
// applied whole (compare and set on the version planned against), each
// with who applied it, when and why, and the lineage that keeps counts
// across rule changes (see ChangeKind). Plan, then Apply; Watch to run
// from it. A Store is safe for concurrent use.
//
// The store belongs to a prefix (WithPrefix, the limiters' sdk.WithPrefix):
// every Store with the same prefix on the same backend shares one store,
// under the key "<prefix>:{!policies}" (and keys starting with it). The
// backend must keep policies (driver.PolicyStore: the memory and Redis
// backends do), else every call's error wraps errors.ErrUnsupported.
type Store struct {
	b       driver.Backend
	key     string
	timeout time.Duration
	now     func() time.Time
}

// An Option configures New.
type Option func(*Store)

// WithPrefix sets the prefix whose store a Store keeps: the limiters'
// (sdk.WithPrefix; default "fc"), escaped as they escape it.
func WithPrefix(p string) Option {
	return func(s *Store) { s.key = storeKey(p) }
}

// WithTimeout bounds each backend call but Watch's (0, the default, means
// only the caller's context bounds it), as sdk.WithTimeout does a
// limiter's.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) { s.timeout = max(d, 0) }
}

// WithClock sets the clock a Store plans by (default: the system clock):
// it decides which recorded rule changes are past their reach and are
// left out of the next version. Give it the limiters' clock. Versions are
// stamped by the backend's clock.
func WithClock(c driver.Clock) Option {
	return func(s *Store) {
		if c != nil {
			s.now = c.Now
		}
	}
}

// New returns the Store of backend b (memory.New, redis.New: the
// limiters'), for the default prefix unless WithPrefix says otherwise.
func New(b driver.Backend, opts ...Option) *Store {
	s := &Store{b: b, key: storeKey(keyname.DefaultPrefix), now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// storeKey is the storage key of the policy store of prefix: one store
// per prefix.
func storeKey(prefix string) string {
	return keyname.Prefix(prefix, keyname.DefaultPrefix) + ":{!policies}"
}

// backend returns the backend as a driver.PolicyStore, or an error
// naming op (wrapping errors.ErrUnsupported when it keeps no policies).
func (s *Store) backend(op string) (driver.PolicyStore, error) {
	if s == nil || s.b == nil {
		return nil, fmt.Errorf("policystore: %s: no backend (use New)", op)
	}
	ps, ok := s.b.(driver.PolicyStore)
	if !ok {
		return nil, fmt.Errorf("policystore: %s: backend %T does not keep policies: %w", op, s.b, errors.ErrUnsupported)
	}
	return ps, nil
}

func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return ctx, func() {}
}

// PutPolicies stores v as the next raw version of the store, atomically,
// if its current version is prev (0: the store is empty); otherwise it
// stores nothing and returns an error wrapping ErrVersionConflict. The
// store sets v.Version (prev+1) and v.At (the backend's clock) and returns
// the version as stored; then every WatchPolicies of the store hears of
// it. A Document larger than MaxPolicyDocument is refused. Apply writes
// through it; write a document by hand only to test what readers do with
// one they cannot load.
func (s *Store) PutPolicies(ctx context.Context, prev int64, v PolicyVersion) (PolicyVersion, error) {
	const op = "put policies"
	ps, err := s.backend(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	if prev < 0 {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: previous version %d is negative", op, prev)
	}
	if err := driver.CheckPolicyDocument(int64(len(v.Document))); err != nil {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: %w", op, err)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	out, err := ps.PutPolicies(ctx, s.key, prev, v)
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: %w", op, err)
	}
	return out, nil
}

// GetPolicies returns raw version n of the store (0: the current one), or
// an error wrapping ErrNoPolicyVersion when the store does not hold it,
// ErrPolicyTooLarge when its document is larger than MaxPolicyDocument
// (written by hand: it is not read). Version decodes it.
func (s *Store) GetPolicies(ctx context.Context, n int64) (PolicyVersion, error) {
	const op = "get policies"
	ps, err := s.backend(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	v, err := ps.GetPolicies(ctx, s.key, n)
	if err == nil {
		// A backend that does not check it itself still hands no
		// oversize document on.
		err = driver.CheckPolicyDocument(int64(len(v.Document)))
	}
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: %w", op, err)
	}
	return v, nil
}

// PolicyHistory returns up to max raw versions of the store, newest first
// (max <= 0: all); none for an empty store. History decodes them.
func (s *Store) PolicyHistory(ctx context.Context, max int) ([]PolicyVersion, error) {
	const op = "policy history"
	ps, err := s.backend(op)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	h, err := ps.PolicyHistory(ctx, s.key, max)
	if err != nil {
		return nil, fmt.Errorf("policystore: %s: %w", op, err)
	}
	return h, nil
}

// PolicyHead returns the store's current raw version without its
// document: its number, when, by whom and why it was applied; an error
// wrapping ErrNoPolicyVersion when the store is empty. When the current
// number names a version the store does not hold (deleted by hand), the
// number comes with a zero At. It reads a few bytes where GetPolicies
// reads the document: a follower (Live) polls it. The backend must
// implement driver.PolicyHeader (the memory and Redis backends do), else
// the error wraps errors.ErrUnsupported (read GetPolicies instead).
func (s *Store) PolicyHead(ctx context.Context) (PolicyVersion, error) {
	const op = "policy head"
	ps, err := s.backend(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	h, ok := ps.(driver.PolicyHeader)
	if !ok {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: backend %T reads no head: %w", op, s.b, errors.ErrUnsupported)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	v, err := h.PolicyHead(ctx, s.key)
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("policystore: %s: %w", op, err)
	}
	v.Document = nil
	return v, nil
}

// WatchPolicies returns a channel that receives the store's current
// version number soon after every PutPolicies by any process sharing the
// backend and prefix (and, on the memory and Redis backends, the current
// one at once when the store holds a version). The channel holds the
// latest number only: a slow reader sees versions coalesced, never a
// stale one last. It is closed when ctx is done; cancel ctx to release
// the watch (on Redis: a goroutine and a connection). Notifications can
// be missed while a backend is unreachable (the Redis backend catches up
// when it reconnects), so a follower also polls (Watch does both). The
// Store's timeout (WithTimeout) does not apply to the watch itself.
func (s *Store) WatchPolicies(ctx context.Context) (<-chan int64, error) {
	const op = "watch policies"
	ps, err := s.backend(op)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ch, err := ps.WatchPolicies(ctx, s.key)
	if err != nil {
		return nil, fmt.Errorf("policystore: %s: %w", op, err)
	}
	return ch, nil
}
