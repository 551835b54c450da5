package policystore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Errors of a stored version that does not load, matched with errors.Is.
var (
	// ErrUnreadableVersion is wrapped by the error of a stored version
	// that does not load: its document is not one this package reads
	// (ErrUnknownFormat: written by hand, or by a newer freqcap), its
	// policy file is not valid, it is larger than MaxPolicyDocument,
	// or its stored fields were changed by hand. Limiters keep running the
	// newest version that loads; plans are made against it (Head).
	ErrUnreadableVersion = errors.New("policystore: the version does not load")
	// ErrMissingVersion is wrapped (with ErrUnreadableVersion) by the
	// error of a version the store's current version number names but the
	// store does not hold (deleted by hand).
	ErrMissingVersion = errors.New("policystore: the version is missing")
)

// versionError is a stored version that does not load: errors.Is matches
// ErrUnreadableVersion (and ErrMissingVersion when missing) and what it
// wraps.
type versionError struct {
	n       int64
	missing bool
	err     error
}

func (e *versionError) Error() string {
	if e.missing {
		return fmt.Sprintf("policystore: version %d is missing: the store's version number names it, but the store does not hold it (deleted by hand?)", e.n)
	}
	return fmt.Sprintf("policystore: version %d does not load: %v", e.n, e.err)
}

func (e *versionError) Unwrap() error { return e.err }

func (e *versionError) Is(target error) bool {
	return target == ErrUnreadableVersion || e.missing && target == ErrMissingVersion
}

// maxWalkBack bounds how many versions Head reads, from the current one
// back, looking for one that loads.
const maxWalkBack = 100

// A Head is the store's current version as plans and followers use it:
// its number, and the newest version that loads.
type Head struct {
	// Number is the store's current version number (0: the store is
	// empty): the version the next Apply must follow.
	Number int64
	// Loaded is the newest version at or before Number that loads
	// (Number 0: none does, of the 100 newest): the one plans are made
	// against and every Live keeps running.
	Loaded Version
	// Unloadable are the versions after Loaded, newest first, each with
	// why it does not load (Err wraps ErrUnreadableVersion, and
	// ErrMissingVersion for one the store does not hold).
	Unloadable []HistoryEntry
	parsed     []parsed
	// stamp is the current version as read (no document).
	stamp driver.PolicyVersion
}

// current reads the store's current version: its stamp (number, At, By,
// Reason, no document) and, when the backend reads no head, the whole
// version (full). An empty store is an error wrapping
// driver.ErrNoPolicyVersion.
func (s *Store) current(ctx context.Context) (stamp driver.PolicyVersion, full *driver.PolicyVersion, err error) {
	defer func() {
		if errors.Is(err, driver.ErrMalformedPolicyVersion) {
			err = fmt.Errorf("%w: the store's current version number was changed by hand: set it to a version the store holds (docs/POLICIES.md): %w", ErrUnreadableVersion, err)
		}
	}()
	stamp, err = s.PolicyHead(ctx)
	if !errors.Is(err, errors.ErrUnsupported) {
		return stamp, nil, err
	}
	pv, err := s.GetPolicies(ctx, 0)
	if err != nil {
		return driver.PolicyVersion{}, nil, err
	}
	stamp = pv
	stamp.Document = nil
	return stamp, &pv, nil
}

// fetch reads version n; a version the store does not hold is an error
// wrapping driver.ErrNoPolicyVersion, or, when missing is set (n is named
// by the store's version number), a versionError. A version the backend
// refuses to read (too large, malformed) is a versionError.
func (s *Store) fetch(ctx context.Context, n int64, missing bool) (driver.PolicyVersion, error) {
	pv, err := s.GetPolicies(ctx, n)
	switch {
	case err == nil:
		return pv, nil
	case missing && errors.Is(err, driver.ErrNoPolicyVersion):
		return driver.PolicyVersion{}, &versionError{n: n, missing: true, err: err}
	case errors.Is(err, driver.ErrPolicyTooLarge), errors.Is(err, driver.ErrMalformedPolicyVersion):
		return driver.PolicyVersion{}, &versionError{n: n, err: err}
	}
	return driver.PolicyVersion{}, fmt.Errorf("policystore: version %d: %w", n, err)
}

// loadVersion decodes, parses and builds pv: the version and its parsed
// policies, or a versionError.
func loadVersion(pv driver.PolicyVersion) (Version, []parsed, error) {
	v, err := decodeVersion(pv)
	if err != nil {
		return Version{}, nil, err
	}
	ps, err := parse(v.Source, fmt.Sprintf("version %d", v.Number))
	if err == nil {
		_, err = build(ps, v.lin, v.At)
	}
	if err != nil {
		return Version{}, nil, &versionError{n: pv.Version, err: err}
	}
	return v, ps, nil
}

// Head reads the store's current version number and walks back from it
// to the newest version that loads (at most 100 versions): what plans
// are made against and what Watch starts from. An empty store is a Head
// with Number 0; only a failure to read the store is an error.
func (s *Store) Head(ctx context.Context) (Head, error) {
	stamp, full, err := s.current(ctx)
	if errors.Is(err, driver.ErrNoPolicyVersion) {
		return Head{}, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("policystore: read the current version: %w", err)
	}
	h := Head{Number: stamp.Version, stamp: stamp}
	for k := h.Number; k >= 1 && h.Number-k < maxWalkBack; k-- {
		var pv driver.PolicyVersion
		if k == h.Number && full != nil {
			pv = *full
		} else if pv, err = s.fetch(ctx, k, true); err != nil {
			if !errors.Is(err, ErrUnreadableVersion) {
				return Head{}, err
			}
			meta := Version{Number: k}
			if k == h.Number {
				meta = Version{Number: k, At: stamp.At, By: stamp.By, Reason: stamp.Reason}
			}
			h.Unloadable = append(h.Unloadable, HistoryEntry{Version: meta, Err: err})
			continue
		}
		v, ps, err := loadVersion(pv)
		if err != nil {
			h.Unloadable = append(h.Unloadable, HistoryEntry{Version: Version{Number: k, At: pv.At, By: pv.By, Reason: pv.Reason}, Err: err})
			continue
		}
		h.Loaded, h.parsed = v, ps
		return h, nil
	}
	return h, nil
}

// Problem says in one line why the versions after Loaded do not load
// ("" when none is after it).
func (h Head) Problem() string {
	const most = 3
	var msgs []string
	for i, u := range h.Unloadable {
		if i == most {
			msgs = append(msgs, fmt.Sprintf("and %d more", len(h.Unloadable)-most))
			break
		}
		msgs = append(msgs, u.Err.Error())
	}
	return strings.Join(msgs, "; ")
}
