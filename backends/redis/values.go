package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.ValueLister = (*Backend)(nil)

// ListValues's bounds on a wide root's hash: the COUNT of each HSCAN it
// sends, and the most fields it reads a call (driver.MaxValuesScan).
// Variables for tests only.
var (
	valuesScanCount int64 = 500
	valuesScanMax         = driver.MaxValuesScan
)

// ListValues lists a person's live values of a nested dimension set
// (driver.ValueLister; docs/DESIGN.md, "Wide subjects"): it reads, on the
// root's node, the root (GET) and the server's clock (TIME), then, when
// the root is wide, the fields of its hash (HSCAN, valuesScanCount a
// round, at most driver.MaxValuesScan fields: past them the page is
// Partial). It writes nothing, and it runs no script.
//
// A wide root's field written by this version carries when it was last
// written and the value's name (lua.WideTrailStamp): such a value is
// listed with its set key (Value.Group) and Written. A narrow root's
// sections, and the fields moved into the hash when the root went wide
// and not written since, carry neither (the root stores a section's id, a
// hash of its key): they are listed by id (Value.ID) after the named ones,
// when one of their entries is tagged as a rule of req.Rules is (a
// section of a removed rule only is not listed). Values whose set keeps
// no state in the root (sliding logs above driver.LogLine, module
// strategies: keys of their own) are not seen; a set all of whose rules
// are such logs is refused (errors.ErrUnsupported), as is a server that
// refuses scripts (bare mode keeps no root).
func (b *Backend) ListValues(ctx context.Context, req driver.ValuesRequest) (driver.ValuesPage, error) {
	fail := func(err error) (driver.ValuesPage, error) {
		return driver.ValuesPage{}, fmt.Errorf("redis: values: %w", err)
	}
	if req.Root == "" || rootOf(req.Root) != req.Root || !nests(req.Set+":", req.Root) || strings.Contains(req.Set[len(req.Root):], ":") {
		return fail(errors.New("Set must extend Root, the key of a subject's root set"))
	}
	eng, err := b.engine(ctx)
	if err != nil {
		return fail(err)
	}
	if _, ok := eng.(scriptMode); !ok {
		return fail(fmt.Errorf("the server refuses scripts: nested sets are kept in no root in bare mode: %w", errors.ErrUnsupported))
	}
	tags, err := sectionTags(req.Rules)
	if err != nil {
		return fail(err)
	}
	v, now, err := b.rootAndTime(ctx, req.Root)
	if err != nil {
		return fail(err)
	}
	l := valueList{req: &req, tags: tags, nowms: now.UnixMilli(), seen: map[string]bool{}}
	switch {
	case v == "":
	case v[0] == lua.WideFormat:
		if err := l.scan(ctx, b.c, wideKey(req.Root)); err != nil {
			return fail(err)
		}
	default:
		es, err := decodePacked(v)
		if err != nil {
			return fail(fmt.Errorf("the root holds a value freqcap did not write: %w", err))
		}
		for _, e := range es {
			if e.Section != nil {
				l.add(e, 0, "")
			}
		}
	}
	page, next, prev, err := driver.PageValues(l.vals, req.Cursor, req.Limit)
	if err != nil {
		return fail(err)
	}
	return driver.ValuesPage{Values: page, Total: len(l.vals), Partial: l.partial, Next: next, Prev: prev, Now: now}, nil
}

// sectionTags returns the tags of the packed entries rules keep in their
// set's section (ruleArgs's, on the plain Lua strategies: a rule on a
// module strategy keeps none, and its tag there is harmless). It refuses
// rules none of which keeps an entry there (sliding logs above
// driver.LogLine only).
func sectionTags(rules []driver.Rule) (map[string]bool, error) {
	tags := map[string]bool{}
	for i := range rules {
		var a [staticArgs]any
		if err := ruleArgs(&rules[i], ruleChoice{}, &a); err != nil {
			return nil, fmt.Errorf("rule %q: %w", rules[i].Name, err)
		}
		if code, _ := a[0].(string); packedCode(code) {
			tags[a[5].(string)] = true
		}
	}
	if len(tags) == 0 {
		return nil, fmt.Errorf("no rule of the set keeps its state in the subject's root (sliding logs above %d keep a sorted set per value): %w", driver.LogLine, errors.ErrUnsupported)
	}
	return tags, nil
}

// rootAndTime reads root's value ("" for none) and the server's clock on
// the node holding root, in one round trip.
func (b *Backend) rootAndTime(ctx context.Context, root string) (string, time.Time, error) {
	var c goredis.Cmdable = b.c
	if cc, ok := b.c.(*goredis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, root)
		if err != nil {
			return "", time.Time{}, err
		}
		c = n
	}
	pipe := c.Pipeline()
	get := pipe.Get(ctx, root)
	tm := pipe.Time(ctx)
	_, _ = pipe.Exec(ctx) // errors are read per command
	if err := tm.Err(); err != nil {
		return "", time.Time{}, err
	}
	v, err := get.Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return "", time.Time{}, err
	}
	return v, tm.Val(), nil
}

// valueList gathers the live values of one ListValues call.
type valueList struct {
	req     *driver.ValuesRequest
	tags    map[string]bool // the set's rules' entry tags (sectionTags)
	nowms   int64
	seen    map[string]bool // the section ids listed (HSCAN may repeat a field)
	vals    []driver.Value
	partial bool
}

// scan reads the fields of the wide hash at hkey, at most valuesScanMax
// (then partial) give or take one HSCAN's.
func (l *valueList) scan(ctx context.Context, c goredis.UniversalClient, hkey string) error {
	var cur uint64
	for n := 0; ; {
		kv, next, err := c.HScan(ctx, hkey, cur, "", valuesScanCount).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n++
			sect, stamp, name, ok := wideField(kv[i+1])
			if !ok {
				continue // not freqcap's: take.lua refuses it when it meets it
			}
			es, err := decodePacked(string(rune(packedFormat)) + sect)
			if err != nil || len(es) != 1 || es[0].Section == nil || es[0].Tag != kv[i] {
				continue
			}
			l.add(es[0], stamp, name)
		}
		cur = next
		if cur == 0 {
			return nil
		}
		if n >= valuesScanMax {
			l.partial = true
			return nil
		}
	}
}

// add lists the section e (its id and entries; stamp and name from its
// wide field's trailer, 0 and "" for none) if it is live and of the set:
// by its name, else by its entries' tags.
func (l *valueList) add(e packedEntry, stamp int64, name string) {
	if e.Expiry <= l.nowms || l.seen[e.Tag] {
		return
	}
	v := driver.Value{ID: hex.EncodeToString([]byte(e.Tag)), Expires: time.UnixMilli(e.Expiry)}
	if stamp > 0 {
		v.Written = time.UnixMilli(stamp)
	}
	if name != "" {
		if !strings.HasPrefix(name, l.req.Set[len(l.req.Root):]+":") {
			return // another set's value
		}
		v.Group = l.req.Root + name
	} else if !l.tagged(e.Section) {
		return
	}
	l.seen[e.Tag] = true
	l.vals = append(l.vals, v)
}

// tagged reports whether a section's entries hold one of the set's rules'.
func (l *valueList) tagged(es []packedEntry) bool {
	for _, e := range es {
		if l.tags[e.Tag] {
			return true
		}
	}
	return false
}

// wideField splits the value of a wide root's hash field (lua.WideSuffix;
// prelude.lua's wide): the section's bytes, then, once a write of this
// version named it, its trailer: when it was last written (Unix ms,
// lua.WideTrailStamp bytes, little-endian) and the value's name (its set
// key past the root's key). ok is false for a value of no such shape.
func wideField(f string) (sect string, stamp int64, name string, ok bool) {
	const lenAt = lua.PackedTag
	if len(f) < packedHeader+4 {
		return "", 0, "", false
	}
	end := packedHeader + int(leUint(f[lenAt:lenAt+lua.PackedLen]))
	switch {
	case end > len(f):
		return "", 0, "", false
	case end == len(f):
		return f, 0, "", true
	case end+lua.WideTrailStamp > len(f):
		return "", 0, "", false
	}
	return f[:end], leUint(f[end : end+lua.WideTrailStamp]), f[end+lua.WideTrailStamp:], true
}
