package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Admin administers and diagnoses what a Limiter decides, apart from the
// decisions themselves: per-person overrides (SetOverride,
// DeleteOverride, Overrides), forgetting a subject (Reset, ResetRules),
// reading its state (Inspect), and diagnostics (Describe, KeyLayout,
// HotDenyStats). A service that only decides never needs one; an
// operator's tool, a console or an admin endpoint does.
//
// An Admin comes from the Limiter whose decisions it administers
// (Limiter.Admin), not from a backend of its own, because the two share
// one state in the process: a change an Admin makes (a reset, an
// override set or deleted) evicts the subject from that Limiter's
// hot-deny cache at once, and HotDenyStats reads that cache. The Admin
// uses the Limiter's backend and options (prefix, clock, timeout,
// observers). Like a Limiter it is safe for concurrent use.
//
// The zero Admin, like the Admin of a zero Limiter, has no backend: every
// method that returns an error returns one saying so (use sdk.New).
type Admin struct{ l *Limiter }

// Admin returns the administration of l's decisions (see Admin). It
// allocates nothing the Limiter does not already hold: call it where
// needed or keep the result.
func (l *Limiter) Admin() *Admin {
	if l == nil {
		return &Admin{}
	}
	return &Admin{l: l}
}

// lim returns the Limiter a administers (a zero one for the zero Admin).
func (ad *Admin) lim() *Limiter {
	if ad == nil || ad.l == nil {
		return &Limiter{}
	}
	return ad.l
}

// Reset forgets s under p: it deletes the state of every rule whose
// dimensions s gives (a changed rule's former selves too, WithChange),
// and the subject's open reservations; the denial trail and the
// subject's overrides are kept. s must give the shard dimensions (ShardBy); rules needing
// other dimensions s lacks are left alone. The backend must support
// resets (the memory and Redis backends do), else the error wraps
// errors.ErrUnsupported.
func (ad *Admin) Reset(ctx context.Context, p *Policy, s Subject) error {
	l := ad.lim()
	if err := l.hasBackend("reset"); err != nil {
		return err
	}
	rs, ok := l.b.(driver.Resetter)
	if !ok {
		return fmt.Errorf("sdk: reset: backend %T does not support reset: %w", l.b, errors.ErrUnsupported)
	}
	res, err := resolve(l.prefix, p, s, true, nil)
	if err != nil {
		return fmt.Errorf("sdk: reset: %w", err)
	}
	if h := l.hotCacheOf(p); h != nil {
		h.evictSubject(res.base)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	req := l.request(p, res, 1)
	if err := rs.Reset(ctx, req); err != nil {
		return fmt.Errorf("sdk: reset: %w", err)
	}
	return nil
}

// ResetRules is Reset limited to the named rules of p: it deletes the
// state of s under those rules and nothing else. Every other rule's
// counts, the subject's open reservations and its denial trail are kept
// (a reservation made before and cancelled or lapsed after still gives its
// units back to every rule it took from, the ones reset included, never
// below zero). s must give the shard dimensions and every dimension of the
// named rules, else the error wraps ErrInvalidSubject.
//
// Rules keyed by the same dimensions share their state on some backends
// (the Redis backend keeps a set of dimensions in one value and one
// sorted set), so they are reset together: the names must include every
// rule of p keyed by exactly the dimensions of a rule named. An unknown
// name, no name at all, or a set of dimensions named in part is an error
// wrapping ErrInvalidRule, and nothing is reset. The backend must support
// resets, as for Reset.
func (ad *Admin) ResetRules(ctx context.Context, p *Policy, s Subject, rules ...string) error {
	l := ad.lim()
	if err := l.hasBackend("reset rules"); err != nil {
		return err
	}
	rs, ok := l.b.(driver.Resetter)
	if !ok {
		return fmt.Errorf("sdk: reset rules: backend %T does not support reset: %w", l.b, errors.ErrUnsupported)
	}
	if err := p.valid(); err != nil {
		return fmt.Errorf("sdk: reset rules: %w", err)
	}
	if err := p.checkResetSet(rules); err != nil {
		return fmt.Errorf("sdk: reset rules: %w", err)
	}
	res, err := resolve(l.prefix, p, s, true, nil)
	if err != nil {
		return fmt.Errorf("sdk: reset rules: %w", err)
	}
	chosen := make([]driver.Rule, 0, len(rules))
	for _, r := range res.rules {
		if slices.Contains(rules, r.Name) {
			chosen = append(chosen, r)
		}
	}
	for _, name := range res.skipped {
		if slices.Contains(rules, name) {
			return fmt.Errorf("sdk: reset rules: %w: rule %q needs dimensions the subject does not give", ErrInvalidSubject, name)
		}
	}
	if h := l.hotCacheOf(p); h != nil {
		h.evictSubject(res.base)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	req := l.request(p, res, 1)
	req.Rules, req.ReservationKey = chosen, ""
	if err := rs.Reset(ctx, req); err != nil {
		return fmt.Errorf("sdk: reset rules: %w", err)
	}
	return nil
}

// Inspect reports the state of s under p without consuming anything: each
// rule as a cost-1 peek, and the recent denials (each with the values it
// blocked, Denial.Values) with how far back they go (TrailFull,
// TrailSince). s must give the shard dimensions (ShardBy); rules needing
// other dimensions s lacks are listed in Skipped: a denial in the trail by
// one of them, with its Values, says which values may still be blocked. A
// backend failure is always returned as an error. The backend must
// support inspection (the memory and Redis backends do), else the error
// wraps errors.ErrUnsupported.
func (ad *Admin) Inspect(ctx context.Context, p *Policy, s Subject) (Inspection, error) {
	l := ad.lim()
	if err := l.supports("inspect", opInspect); err != nil {
		return Inspection{}, err
	}
	res, err := resolve(l.prefix, p, s, true, l.now)
	if err != nil {
		return Inspection{}, fmt.Errorf("sdk: inspect: %w", err)
	}
	req := l.request(p, res, 1)
	a := l.send(ctx, opInspect, req)
	r, lat, err := a.r, a.lat, a.err
	if err != nil {
		err = fmt.Errorf("sdk: inspect: %w", err)
		l.emit(Event{Policy: p.name, PolicyRef: p, Op: "inspect", Err: err, Latency: lat})
		return Inspection{}, err
	}
	d := decide(p.name, res.rules, res.before, r)
	l.emit(Event{Policy: p.name, PolicyRef: p, Op: "inspect", Decision: d, Latency: lat})
	in := Inspection{
		Policy:   p.name,
		At:       r.Now,
		Rules:    d.Rules,
		Skipped:  res.skipped,
		Denials:  denials(r.Trail),
		TrailMax: p.trailMax,
		TrailTTL: p.trailTTL,
	}
	in.TrailFull = p.trailMax > 0 && len(in.Denials) >= p.trailMax
	return in, nil
}

// Describe returns the backend's account of itself. Not every backend can
// describe itself (the memory and Redis backends can); one that cannot
// returns an error wrapping errors.ErrUnsupported.
func (ad *Admin) Describe(ctx context.Context) (driver.Description, error) {
	l := ad.lim()
	if err := l.hasBackend("describe"); err != nil {
		return driver.Description{}, err
	}
	ds, ok := l.b.(driver.Describer)
	if !ok {
		return driver.Description{}, fmt.Errorf("sdk: describe: backend %T cannot describe itself: %w", l.b, errors.ErrUnsupported)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	desc, err := ds.Describe(ctx)
	if err != nil {
		return driver.Description{}, fmt.Errorf("sdk: describe: %w", err)
	}
	return desc, nil
}
