package sdk

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// ReadsOverrides reports whether the policy's decisions read per-person
// overrides (WithOverrides).
func (p *Policy) ReadsOverrides() bool { return p != nil && p.overrides }

// SetOverride stores o for s under p and returns it as stored, with its
// ID (unique in the backend) and Created (the backend's clock) set; o.ID
// and o.Created are ignored. s needs only the policy's shard dimensions
// (ShardBy): an override applies to every decision of those shard values
// under p, from the next decision on (this Limiter's hot-deny cache
// forgets the subject).
//
// Each kind's meaning and their precedence (a block before an exempt
// before limits) are those of driver.Request.OverrideKey. o must have a
// known Kind; Limits only for driver.Limit (at least one), naming rules
// of p, each from 1 to driver.MaxLimit (and giving a GCRA rule an emission
// interval of at least driver.MinInterval); Until zero (no end) or after now; a
// Reason of at most driver.MaxOverrideReasonLen bytes and a By of at most
// driver.MaxOverrideByLen, neither holding a line break. Else the error wraps
// ErrInvalidOverride.
//
// The policy must read overrides (WithOverrides, or `overrides: true` in
// a policy file), else the error wraps ErrInvalidPolicy; the backend must
// keep them (driver.Overrider: the memory and Redis backends do), else
// the error wraps errors.ErrUnsupported.
func (ad *Admin) SetOverride(ctx context.Context, p *Policy, s Subject, o driver.Override) (driver.Override, error) {
	l := ad.lim()
	ov, res, err := l.overrider("set override", p, s)
	if err != nil {
		return driver.Override{}, err
	}
	if err := p.checkOverride(o, l.now()); err != nil {
		return driver.Override{}, fmt.Errorf("sdk: set override: %w", err)
	}
	o.ID, o.Created = 0, time.Time{}
	o.Limits = maps.Clone(o.Limits)
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := ov.SetOverride(ctx, res.overrideKey, o)
	if err != nil {
		return driver.Override{}, fmt.Errorf("sdk: set override: %w", err)
	}
	l.forgetSubject(p, res.base)
	return out, nil
}

// DeleteOverride removes override id of s under p. It returns an error
// wrapping ErrOverrideNotFound when s has no such live override (never
// set, deleted, or ended). Its requirements are SetOverride's.
func (ad *Admin) DeleteOverride(ctx context.Context, p *Policy, s Subject, id int64) error {
	l := ad.lim()
	ov, res, err := l.overrider("delete override", p, s)
	if err != nil {
		return err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	if err := ov.DeleteOverride(ctx, res.overrideKey, id); err != nil {
		return fmt.Errorf("sdk: delete override: %w", err)
	}
	l.forgetSubject(p, res.base)
	return nil
}

// Overrides returns the live overrides of s under p (those not ended), by
// ID. Its requirements are SetOverride's.
func (ad *Admin) Overrides(ctx context.Context, p *Policy, s Subject) ([]driver.Override, error) {
	l := ad.lim()
	ov, res, err := l.overrider("overrides", p, s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := ov.Overrides(ctx, res.overrideKey)
	if err != nil {
		return nil, fmt.Errorf("sdk: overrides: %w", err)
	}
	return out, nil
}

// overrider checks what every override operation needs and resolves s's
// keys (the shard dimensions suffice).
func (l *Limiter) overrider(op string, p *Policy, s Subject) (driver.Overrider, resolved, error) {
	if err := l.hasBackend(op); err != nil {
		return nil, resolved{}, err
	}
	if err := p.valid(); err != nil {
		return nil, resolved{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	if !p.overrides {
		return nil, resolved{}, fmt.Errorf("sdk: %s: %w: policy %q does not read overrides: build it with WithOverrides (`overrides: true` in a policy file)", op, ErrInvalidPolicy, p.name)
	}
	ov, ok := l.b.(driver.Overrider)
	if !ok {
		return nil, resolved{}, fmt.Errorf("sdk: %s: backend %T does not keep overrides: %w", op, l.b, errors.ErrUnsupported)
	}
	res, err := resolve(l.prefix, p, s, true, nil)
	if err != nil {
		return nil, resolved{}, fmt.Errorf("sdk: %s: %w", op, err)
	}
	return ov, res, nil
}

// forgetSubject evicts every hot-deny entry of the shard values of base.
func (l *Limiter) forgetSubject(p *Policy, base string) {
	if h := l.hotCacheOf(p); h != nil {
		h.evictSubject(base)
	}
}

// checkOverride checks o for SetOverride at now. Errors wrap
// ErrInvalidOverride.
func (p *Policy) checkOverride(o driver.Override, now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOverride}, args...)...)
	}
	switch o.Kind {
	case driver.Exempt, driver.Block:
		if len(o.Limits) > 0 {
			return bad("limits are only for kind %v, got kind %v", driver.Limit, o.Kind)
		}
	case driver.Limit:
		if len(o.Limits) == 0 {
			return bad("kind %v needs at least one rule's limit", driver.Limit)
		}
		for name, lim := range o.Limits {
			i := -1
			for k, r := range p.rules {
				if r.Name == name {
					i = k
				}
			}
			if i < 0 {
				return bad("policy %q has no rule %q", p.name, name)
			}
			if lim < 1 || lim > driver.MaxLimit {
				return bad("rule %q: limit must be from 1 to %d (MaxLimit), got %d", name, driver.MaxLimit, lim)
			}
			r := p.rules[i]
			r.Limit = lim
			if _, err := r.normalize(); err != nil {
				return bad("rule %q: limit %d: %v", name, lim, err)
			}
		}
	default:
		return bad("unknown kind %d", o.Kind)
	}
	if !o.Until.IsZero() && !o.Until.After(now) {
		return bad("until %v is not after now (%v)", o.Until.UTC(), now.UTC())
	}
	if s := auditProblem(o.By, o.Reason); s != "" {
		return bad("%s", s)
	}
	return nil
}
