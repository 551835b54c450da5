package sdk

import (
	"context"
	"fmt"
	"maps"
)

// identify resolves a's identity to its person (Attempt.Identity,
// WithPerson): the subject's value of the policy's person dimension
// becomes the person the identity is linked to (the identity itself when
// it has no link), and the person's stored zone is a's when a gives none.
// An attempt without identity is returned as given.
func (l *Limiter) identify(ctx context.Context, name string, p *Policy, a Attempt) (Attempt, error) {
	if a.Identity == "" || p == nil {
		return a, nil // (a nil policy: prepare says so)
	}
	if p.person == "" {
		return a, fmt.Errorf("sdk: %s: %w: the attempt carries an identity, and policy %q names no person dimension (WithPerson, `person:` in a policy file)", name, ErrInvalidPolicy, p.Name())
	}
	person, zone, err := l.personOf(ctx, a.Identity)
	if err != nil {
		return a, fmt.Errorf("sdk: %s: %w", name, err)
	}
	s := make(Subject, len(a.Subject)+1)
	maps.Copy(s, a.Subject)
	s[p.person] = person
	a.Subject = s
	if a.Zone == nil {
		a.Zone = zone
	}
	return a, nil
}
