package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Overrider = (*Backend)(nil)

// forever is the expiry of an override set holding an override without
// end: later than any instant a rule can reach.
var forever = time.Unix(1<<62, 0)

// liveOverrides returns the overrides of e not ended at now, by ID.
func liveOverrides(e *entry, now time.Time) []driver.Override {
	if e == nil {
		return nil
	}
	var out []driver.Override
	for _, o := range e.overrides {
		if o.Until.IsZero() || o.Until.After(now) {
			out = append(out, o)
		}
	}
	return out
}

// overrideSet returns the live override entry under key, if any.
func (x *txn) overrideSet(key string) (*shard, *entry) {
	s := x.shard(key)
	e := s.get(key, x.now)
	if e == nil || e.kind != kindOverrides {
		return s, nil
	}
	return s, e
}

// saveOverrides keeps only e's live overrides and stores e until the
// latest end among them (forever while one has none), or deletes it.
func (x *txn) saveOverrides(s *shard, e *entry) {
	e.overrides = liveOverrides(e, x.now)
	if len(e.overrides) == 0 {
		s.remove(e)
		return
	}
	var exp time.Time
	for _, o := range e.overrides {
		if o.Until.IsZero() {
			exp = forever
			break
		}
		exp = later(exp, o.Until)
	}
	s.put(e, exp, x.now)
}

// SetOverride stores o under key with the next ID of the backend's one
// counter and Created set to the backend's clock (driver.Overrider).
func (b *Backend) SetOverride(ctx context.Context, key string, o driver.Override) (driver.Override, error) {
	if err := ctx.Err(); err != nil {
		return driver.Override{}, fmt.Errorf("memory: set override: %w", err)
	}
	if key == "" {
		return driver.Override{}, fmt.Errorf("memory: set override: empty key")
	}
	switch o.Kind {
	case driver.Exempt, driver.Block, driver.Limit:
	default:
		return driver.Override{}, fmt.Errorf("memory: set override: unknown kind %d", o.Kind)
	}
	x := b.begin([]string{key})
	defer x.end()
	if !o.Until.IsZero() && !o.Until.After(x.now) {
		return driver.Override{}, fmt.Errorf("memory: set override: until %v is not after now", o.Until.UTC())
	}
	o.ID = b.overrideSeq.Add(1)
	o.Created = x.now
	o.Limits = maps.Clone(o.Limits)
	s, e := x.overrideSet(key)
	if e == nil {
		e = &entry{key: strings.Clone(key), kind: kindOverrides}
	}
	e.overrides = append(e.overrides, o)
	x.saveOverrides(s, e)
	return cloneOverride(o), nil
}

// DeleteOverride removes override id from key (driver.Overrider).
func (b *Backend) DeleteOverride(ctx context.Context, key string, id int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: delete override: %w", err)
	}
	x := b.begin([]string{key})
	defer x.end()
	s, e := x.overrideSet(key)
	live := liveOverrides(e, x.now)
	k := slices.IndexFunc(live, func(o driver.Override) bool { return o.ID == id })
	if k < 0 {
		return driver.ErrOverrideNotFound
	}
	e.overrides = slices.Delete(live, k, k+1)
	x.saveOverrides(s, e)
	return nil
}

// Overrides returns the live overrides under key, by ID
// (driver.Overrider).
func (b *Backend) Overrides(ctx context.Context, key string) ([]driver.Override, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: overrides: %w", err)
	}
	x := b.begin([]string{key})
	defer x.end()
	_, e := x.overrideSet(key)
	live := liveOverrides(e, x.now)
	for i := range live {
		live[i] = cloneOverride(live[i])
	}
	return live, nil
}

func cloneOverride(o driver.Override) driver.Override {
	o.Limits = maps.Clone(o.Limits)
	return o
}

// applied is what a request's live overrides decide: the block that
// denies, else the exempt that admits, else the limits per rule name.
type applied struct {
	block, exempt *driver.Override
	limits        map[string]*driver.Override // rule name -> the latest Limit override naming it
}

// overridesOf reads the live overrides under key: the block with the
// latest end (one without end first; ties: the latest ID), the latest
// exempt, and per rule name the latest Limit override.
func (x *txn) overridesOf(key string) applied {
	var a applied
	_, e := x.overrideSet(key)
	live := liveOverrides(e, x.now) // by ID
	for i := range live {
		o := &live[i]
		switch o.Kind {
		case driver.Block:
			if a.block == nil || endsLater(*o, *a.block) {
				a.block = o
			}
		case driver.Exempt:
			a.exempt = o
		case driver.Limit:
			for name := range o.Limits {
				if a.limits == nil {
					a.limits = map[string]*driver.Override{}
				}
				a.limits[name] = o
			}
		}
	}
	return a
}

// endsLater reports whether block a ends at or after b (no end: last),
// a having the later ID.
func endsLater(a, b driver.Override) bool {
	switch {
	case b.Until.IsZero():
		return a.Until.IsZero()
	case a.Until.IsZero():
		return true
	}
	return !a.Until.Before(b.Until)
}
