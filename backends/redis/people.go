package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis/internal/lua"
	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Linker = (*Backend)(nil)

var peopleScript = goredis.NewScript(lua.People)

// errLinksNoScripting is the error of the Linker's writes where the server
// refuses scripting (bare mode); its reads need no script.
var errLinksNoScripting = fmt.Errorf("%w: identity links and stored zones need scripting", errors.ErrUnsupported)

// The Linker keeps two kinds of hash (people.lua): an identity's at idKey
// (p: the person, l: the link's record) and a person's at personKey (z:
// the zone, "l"+id: each listed identity's record, "e"+n: the audit
// events, n: the latest event's number). Links and zones never expire:
// they stay until unlinked or cleared; a person keeps its newest
// driver.MaxPersonEvents events.
//
// On a standalone or Sentinel server (a *goredis.Client) Link and Unlink
// are one script over both keys, atomic. Elsewhere (a Cluster, where the
// two keys are in different slots) each is two scripts, ordered as
// driver.Linker says: Link lists the identity under personKey first, then
// sets idKey (and, if idKey was linked to another person meanwhile, takes
// the listing back); Unlink deletes idKey first, then the listing. A crash
// between the two leaves a listed link that does not resolve: linking the
// identity to that person again repairs it.

// Link stores l under idKey and lists it under personKey
// (driver.Linker).
func (b *Backend) Link(ctx context.Context, idKey, personKey string, l driver.Link) (driver.Link, error) {
	if l.Person == "" {
		return driver.Link{}, errors.New("redis: link: empty person")
	}
	if err := b.linkerCall(ctx, idKey, personKey, l.ID, l.Person); err != nil {
		return driver.Link{}, fmt.Errorf("redis: link: %w", err)
	}
	rest := encodeFields(l.ID, l.Person, l.By, l.Reason)
	ev := encodeFields("link", l.ID, "", l.By, l.Reason)
	most := []string{strconv.Itoa(driver.MaxLinks), strconv.Itoa(driver.MaxPersonEvents)}
	var v any
	var err error
	if b.onePass() {
		v, err = b.people(ctx, []string{idKey, personKey}, "link", l.ID, rest, ev, most[0], most[1], l.Person)
	} else {
		v, err = b.linkInSteps(ctx, idKey, personKey, l, rest, ev, most)
	}
	if err != nil {
		return driver.Link{}, fmt.Errorf("redis: link: %w", err)
	}
	created, err := linkReply(v)
	if err != nil {
		return driver.Link{}, fmt.Errorf("redis: link: %w", err)
	}
	l.Created = time.UnixMicro(created)
	return l, nil
}

// linkInSteps is Link in two scripts (a Cluster): it checks idKey, lists
// the identity under personKey, then sets idKey, taking the listing back
// if idKey was linked to another person meanwhile. It returns the list
// step's reply, or 0 when idKey links another person.
func (b *Backend) linkInSteps(ctx context.Context, idKey, personKey string, l driver.Link, rest, ev string, most []string) (any, error) {
	p, err := b.c.HGet(ctx, idKey, "p").Result()
	switch {
	case errors.Is(err, goredis.Nil):
	case err != nil:
		return nil, err
	case p != l.Person:
		return int64(0), nil
	}
	v, err := b.people(ctx, []string{personKey}, "list", l.ID, rest, ev, most[0], most[1])
	if err != nil {
		return nil, err
	}
	a, err := replyArray(v)
	if err != nil {
		return v, nil // -1: too many links (linkReply)
	}
	created, n, fresh, err := listReply(a)
	if err != nil {
		return nil, err
	}
	rec := strconv.FormatInt(created, 10) + " " + rest
	set, err := b.people(ctx, []string{idKey}, "set", l.Person, rec)
	if err != nil {
		return nil, err
	}
	if ok, err := replyInt(set); err != nil || ok != 1 {
		if err != nil {
			return nil, err
		}
		if _, err := b.people(ctx, []string{personKey}, "unlist", l.ID, rec, strconv.FormatInt(n, 10), strconv.FormatInt(fresh, 10)); err != nil {
			return nil, fmt.Errorf("identity linked meanwhile, and its listing left: %w", err)
		}
		return int64(0), nil
	}
	return v, nil
}

// listReply reads the reply {created µs, event number, fresh} of the
// list step.
func listReply(a []any) (created, n, fresh int64, err error) {
	if len(a) != 3 {
		return 0, 0, 0, fmt.Errorf("reply: want 3 values, got %d", len(a))
	}
	var errs [3]error
	created, errs[0] = replyInt(a[0])
	n, errs[1] = replyInt(a[1])
	fresh, errs[2] = replyInt(a[2])
	return created, n, fresh, errors.Join(errs[:]...)
}

// linkReply reads the reply of Link's script: 0 linked elsewhere, -1 too
// many links, else the list step's array, whose created it returns.
func linkReply(v any) (int64, error) {
	if a, err := replyArray(v); err == nil {
		created, _, _, err := listReply(a)
		return created, err
	}
	n, err := replyInt(v)
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, driver.ErrIdentityLinked
	case n == -1:
		return 0, fmt.Errorf("%w (%d)", driver.ErrTooManyLinks, driver.MaxLinks)
	}
	return 0, fmt.Errorf("reply: unexpected %d", n)
}

// Unlink removes the link of id under idKey and its listing under
// personKey (driver.Linker).
func (b *Backend) Unlink(ctx context.Context, idKey, personKey, id, by, reason string) error {
	if err := b.linkerCall(ctx, idKey, personKey, id, ""); err != nil {
		return fmt.Errorf("redis: unlink: %w", err)
	}
	ev := encodeFields("unlink", id, "", by, reason)
	most := strconv.Itoa(driver.MaxPersonEvents)
	var v any
	var err error
	if b.onePass() {
		v, err = b.people(ctx, []string{idKey, personKey}, "unlink", id, ev, most)
	} else {
		v, err = b.unlinkInSteps(ctx, idKey, personKey, id, ev, most)
	}
	if err != nil {
		return fmt.Errorf("redis: unlink: %w", err)
	}
	n, err := replyInt(v)
	if err != nil {
		return fmt.Errorf("redis: unlink: %w", err)
	}
	if n != 1 {
		return driver.ErrLinkNotFound
	}
	return nil
}

// unlinkInSteps is Unlink in two scripts (a Cluster): it reads id's
// listing under personKey, deletes idKey if its record is that one, then
// drops the listing (if unchanged) and records the event. It returns 1,
// or 0 when idKey does not link id to the person listing it.
func (b *Backend) unlinkInSteps(ctx context.Context, idKey, personKey, id, ev, most string) (any, error) {
	rec, err := b.c.HGet(ctx, personKey, "l"+id).Result()
	if errors.Is(err, goredis.Nil) {
		return int64(0), nil
	}
	if err != nil {
		return nil, err
	}
	v, err := b.people(ctx, []string{idKey}, "clear", rec)
	if err != nil {
		return nil, err
	}
	if n, err := replyInt(v); err != nil || n != 1 {
		return v, err
	}
	return b.people(ctx, []string{personKey}, "delist", id, ev, most, rec)
}

// LinkOf returns the link stored under idKey (driver.Linker). It reads
// one field with HGET: no script.
func (b *Backend) LinkOf(ctx context.Context, idKey string) (driver.Link, error) {
	if idKey == "" {
		return driver.Link{}, errors.New("redis: link of: empty key")
	}
	rec, err := b.c.HGet(ctx, idKey, "l").Result()
	if errors.Is(err, goredis.Nil) {
		return driver.Link{}, driver.ErrLinkNotFound
	}
	if err != nil {
		return driver.Link{}, fmt.Errorf("redis: link of: %w", err)
	}
	l, err := parseLink(rec)
	if err != nil {
		return driver.Link{}, fmt.Errorf("redis: link of: %w", err)
	}
	return l, nil
}

// Person returns what is kept under personKey (driver.Linker): one
// HGETALL, no script.
func (b *Backend) Person(ctx context.Context, personKey string) (driver.Person, error) {
	if personKey == "" {
		return driver.Person{}, errors.New("redis: person: empty key")
	}
	h, err := b.c.HGetAll(ctx, personKey).Result()
	if err != nil {
		return driver.Person{}, fmt.Errorf("redis: person: %w", err)
	}
	p, err := parsePerson(h)
	if err != nil {
		return driver.Person{}, fmt.Errorf("redis: person: %w", err)
	}
	return p, nil
}

// parsePerson reads a person's hash (see the Linker's layout above).
func parsePerson(h map[string]string) (driver.Person, error) {
	var p driver.Person
	type numbered struct {
		n int64
		e driver.PersonEvent
	}
	var evs []numbered
	for f, v := range h {
		switch {
		case f == "z":
			p.Zone = v
		case f == "n":
		case strings.HasPrefix(f, "l"):
			l, err := parseLink(v)
			if err != nil {
				return driver.Person{}, err
			}
			p.Links = append(p.Links, l)
		case strings.HasPrefix(f, "e"):
			n, err := strconv.ParseInt(f[1:], 10, 64)
			if err != nil {
				return driver.Person{}, fmt.Errorf("event field %q", f)
			}
			e, err := parseEvent(v)
			if err != nil {
				return driver.Person{}, err
			}
			evs = append(evs, numbered{n, e})
		default:
			return driver.Person{}, fmt.Errorf("unknown field %q", f)
		}
	}
	slices.SortFunc(p.Links, func(x, y driver.Link) int {
		if c := x.Created.Compare(y.Created); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	slices.SortFunc(evs, func(x, y numbered) int { return int(min(max(y.n-x.n, -1), 1)) })
	for _, e := range evs {
		p.Audit = append(p.Audit, e.e)
	}
	return p, nil
}

// SetPersonZone stores zone under personKey, "" clearing it, and records
// a "zone" event (driver.Linker).
func (b *Backend) SetPersonZone(ctx context.Context, personKey, zone, by, reason string) error {
	if personKey == "" {
		return errors.New("redis: set person zone: empty key")
	}
	if err := b.linksScripting(ctx); err != nil {
		return fmt.Errorf("redis: set person zone: %w", err)
	}
	ev := encodeFields("zone", "", zone, by, reason)
	if _, err := b.people(ctx, []string{personKey}, "zone", zone, ev, strconv.Itoa(driver.MaxPersonEvents)); err != nil {
		return fmt.Errorf("redis: set person zone: %w", err)
	}
	return nil
}

// linkerCall checks what Link and Unlink need: two distinct keys, an
// identity and (Link's, unless "") a person of 1 to driver.MaxIdentityLen
// bytes, scripting.
func (b *Backend) linkerCall(ctx context.Context, idKey, personKey, id, person string) error {
	switch {
	case idKey == "" || personKey == "":
		return errors.New("empty key")
	case idKey == personKey:
		return errors.New("the identity's key is the person's")
	case id == "" || len(id) > driver.MaxIdentityLen:
		return fmt.Errorf("identity must be 1 to %d bytes, got %d", driver.MaxIdentityLen, len(id))
	case len(person) > driver.MaxIdentityLen:
		return fmt.Errorf("person must be 1 to %d bytes, got %d", driver.MaxIdentityLen, len(person))
	}
	return b.linksScripting(ctx)
}

// linksScripting is scripting with the Linker's error.
func (b *Backend) linksScripting(ctx context.Context) error {
	err := b.scripting(ctx)
	if errors.Is(err, errNoScripting) {
		return errLinksNoScripting
	}
	return err
}

// onePass reports whether Link and Unlink run as one script over both
// keys: on a single server's client (standalone or Sentinel), where every
// key is on the one master.
func (b *Backend) onePass() bool {
	_, ok := b.c.(*goredis.Client)
	return ok
}

// people runs people.lua on keys with op and argv.
func (b *Backend) people(ctx context.Context, keys []string, op string, argv ...string) (any, error) {
	args := keyArgs(keys, 1+len(argv))
	args = append(args, op)
	for _, a := range argv {
		args = append(args, a)
	}
	rep, err := b.report(ctx)
	if err != nil {
		return nil, err
	}
	return b.run(ctx, peopleScript, lua.People, rep.EvalOnly, keys, args)
}

// The stored format of links and events: people.lua writes "<µs> " (the
// server's clock) before rest, this file's encodeFields of the fields,
// each as "<length>:<bytes>", so any byte may appear in any field.

// encodeFields returns fs, each as its length in bytes, ':' and itself.
func encodeFields(fs ...string) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.String()
}

// decodeStamped splits "<µs> <encodeFields of n fields>".
func decodeStamped(s string, n int) (time.Time, []string, error) {
	us, rest, ok := strings.Cut(s, " ")
	at, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil {
		return time.Time{}, nil, errors.New("stored record: no time")
	}
	fs := make([]string, 0, n)
	for len(rest) > 0 {
		ln, tail, ok := strings.Cut(rest, ":")
		k, err := strconv.Atoi(ln)
		if !ok || err != nil || k < 0 || k > len(tail) {
			return time.Time{}, nil, errors.New("stored record: bad field")
		}
		fs = append(fs, tail[:k])
		rest = tail[k:]
	}
	if len(fs) != n {
		return time.Time{}, nil, fmt.Errorf("stored record: %d fields, want %d", len(fs), n)
	}
	return time.UnixMicro(at), fs, nil
}

// parseLink reads a link's record: created, then id, person, by, reason.
func parseLink(s string) (driver.Link, error) {
	at, fs, err := decodeStamped(s, 4)
	if err != nil {
		return driver.Link{}, err
	}
	return driver.Link{ID: fs[0], Person: fs[1], Created: at, By: fs[2], Reason: fs[3]}, nil
}

// parseEvent reads an event: at, then op, id, zone, by, reason.
func parseEvent(s string) (driver.PersonEvent, error) {
	at, fs, err := decodeStamped(s, 5)
	if err != nil {
		return driver.PersonEvent{}, err
	}
	return driver.PersonEvent{At: at, Op: fs[0], ID: fs[1], Zone: fs[2], By: fs[3], Reason: fs[4]}, nil
}
