package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Overrider = (*Backend)(nil)

var overridesScript = goredis.NewScript(lua.Overrides)

// errNoScripting is the error of the override operations where the
// server refuses scripting (bare mode).
var errNoScripting = fmt.Errorf("%w: overrides need scripting", errors.ErrUnsupported)

// SetOverride stores o under key (a driver.Request.OverrideKey, a hash
// whose every decision reads it: take.lua) with a new ID, from INCR of
// one counter per key prefix (the key's part before its hash tag, then
// ":!override-id"), and Created from the server's clock, in one script on
// key's server that also refuses an Until already past and sets the key's
// expiry to its overrides' latest Until (none while one has none)
// (driver.Overrider).
func (b *Backend) SetOverride(ctx context.Context, key string, o driver.Override) (driver.Override, error) {
	if err := validOverride(key, &o); err != nil {
		return driver.Override{}, fmt.Errorf("redis: set override: %w", err)
	}
	if err := b.scripting(ctx); err != nil {
		return driver.Override{}, fmt.Errorf("redis: set override: %w", err)
	}
	id, err := b.c.Incr(ctx, overrideCounter(key)).Result()
	if err != nil {
		return driver.Override{}, fmt.Errorf("redis: set override: %w", err)
	}
	var until int64
	if !o.Until.IsZero() {
		until = o.Until.UnixMicro()
	}
	head, tail := formatOverride(o)
	v, err := b.overrides(ctx, key, "s", strconv.FormatInt(id, 10), strconv.FormatInt(until, 10), head, tail)
	if err != nil {
		return driver.Override{}, fmt.Errorf("redis: set override: %w", err)
	}
	created, err := replyInt(v)
	if err != nil {
		return driver.Override{}, fmt.Errorf("redis: set override: %w", err)
	}
	if created < 0 {
		return driver.Override{}, errors.New("redis: set override: its end (Until) has passed")
	}
	o.ID, o.Created = id, time.UnixMicro(created)
	return o, nil
}

// DeleteOverride removes override id from key; driver.ErrOverrideNotFound
// when it is not there or has ended (driver.Overrider).
func (b *Backend) DeleteOverride(ctx context.Context, key string, id int64) error {
	if key == "" {
		return errors.New("redis: delete override: empty key")
	}
	if err := b.scripting(ctx); err != nil {
		return fmt.Errorf("redis: delete override: %w", err)
	}
	v, err := b.overrides(ctx, key, "d", strconv.FormatInt(id, 10))
	if err != nil {
		return fmt.Errorf("redis: delete override: %w", err)
	}
	n, err := replyInt(v)
	if err != nil {
		return fmt.Errorf("redis: delete override: %w", err)
	}
	if n != 1 {
		return driver.ErrOverrideNotFound
	}
	return nil
}

// Overrides returns the live overrides under key, by ID, as the server's
// clock sees them (driver.Overrider).
func (b *Backend) Overrides(ctx context.Context, key string) ([]driver.Override, error) {
	if key == "" {
		return nil, errors.New("redis: overrides: empty key")
	}
	if err := b.scripting(ctx); err != nil {
		return nil, fmt.Errorf("redis: overrides: %w", err)
	}
	v, err := b.overrides(ctx, key, "l")
	if err != nil {
		return nil, fmt.Errorf("redis: overrides: %w", err)
	}
	a, err := replyArray(v)
	if err != nil || len(a)%2 != 1 {
		return nil, fmt.Errorf("redis: overrides: reply: want the clock then pairs (%v)", err)
	}
	out := make([]driver.Override, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		f, err1 := replyString(a[i])
		s, err2 := replyString(a[i+1])
		id, err3 := strconv.ParseInt(f, 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("redis: overrides: reply: %w", err)
		}
		o, err := parseOverride(id, s)
		if err != nil {
			return nil, fmt.Errorf("redis: overrides: %w", err)
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y driver.Override) int { return int(min(max(x.ID-y.ID, -1), 1)) })
	return out, nil
}

// scripting returns an error where the server refuses scripting.
func (b *Backend) scripting(ctx context.Context) error {
	e, err := b.engine(ctx)
	if err != nil {
		return err
	}
	if _, ok := e.(bareMode); ok {
		return errNoScripting
	}
	return nil
}

// overrides runs overrides.lua on key with argv.
func (b *Backend) overrides(ctx context.Context, key string, argv ...string) (any, error) {
	keys := []string{key}
	args := keyArgs(keys, len(argv))
	for _, a := range argv {
		args = append(args, a)
	}
	rep, err := b.report(ctx)
	if err != nil {
		return nil, err
	}
	return b.run(ctx, overridesScript, lua.Overrides, rep.EvalOnly, keys, args)
}

// validOverride checks what the stored format and the decision path rely
// on: a key, a known kind, a Limit override's limits (rule names, 1 to
// driver.MaxLimit).
func validOverride(key string, o *driver.Override) error {
	if key == "" {
		return errors.New("empty key")
	}
	switch o.Kind {
	case driver.Exempt, driver.Block:
		if len(o.Limits) > 0 {
			return fmt.Errorf("a %s override has no limits", o.Kind)
		}
	case driver.Limit:
		if len(o.Limits) == 0 {
			return errors.New("a limit override names at least one rule (Limits)")
		}
		for name, l := range o.Limits {
			if !keyname.Valid(name, 64) {
				return fmt.Errorf("limits: rule name must match [A-Za-z0-9_.-]{1,64}")
			}
			if l < 1 || l > driver.MaxLimit {
				return fmt.Errorf("limits: rule %q: limit must be 1 to 2^50, got %d", name, l)
			}
		}
	default:
		return fmt.Errorf("unknown kind %d", o.Kind)
	}
	if !o.Until.IsZero() && o.Until.UnixMicro() <= 0 {
		return errors.New("until must be after 1970")
	}
	return nil
}
