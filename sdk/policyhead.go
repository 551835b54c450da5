package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/freqcap/freqcap/sdk/driver"
)

// PolicyHead returns the policy store's current version without its
// document: its number, when, by whom and why it was applied; an error
// wrapping ErrNoPolicyVersion when the store is empty. When the current
// number names a version the store does not hold (deleted by hand), the
// number comes with a zero At. It reads a few bytes where GetPolicies
// reads the document: a follower polls it. The backend must implement
// driver.PolicyHeader (the memory and Redis backends do), else the error
// wraps errors.ErrUnsupported (read GetPolicies instead).
func (l *Limiter) PolicyHead(ctx context.Context) (PolicyVersion, error) {
	const op = "policy head"
	ps, err := l.policyStore(op)
	if err != nil {
		return PolicyVersion{}, err
	}
	h, ok := ps.(driver.PolicyHeader)
	if !ok {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: backend %T reads no head: %w", op, l.b, errors.ErrUnsupported)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	v, err := h.PolicyHead(ctx, policyStoreKey(l.prefix))
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	v.Document = nil
	return v, nil
}
