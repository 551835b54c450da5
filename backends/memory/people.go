package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/freqcap/freqcap/sdk/driver"
)

var _ driver.Linker = (*Backend)(nil)

// person is what the backend keeps under a person's key (driver.Linker):
// never expiring, like an override without end.
type person struct {
	links []driver.Link        // oldest first
	zone  string               // "" when none
	audit []driver.PersonEvent // oldest first, at most driver.MaxPersonEvents
}

// linkAt returns the live link entry under idKey, if any.
func (x *txn) linkAt(idKey string) (*shard, *entry) {
	s := x.shard(idKey)
	e := s.get(idKey, x.now)
	if e == nil || e.kind != kindLink {
		return s, nil
	}
	return s, e
}

// personAt returns the person entry under personKey, a new one (not yet
// stored) when there is none.
func (x *txn) personAt(personKey string) (*shard, *entry) {
	s := x.shard(personKey)
	e := s.get(personKey, x.now)
	if e == nil || e.kind != kindPerson {
		e = &entry{key: strings.Clone(personKey), kind: kindPerson, person: &person{}} // put replaces any other
	}
	return s, e
}

// record appends ev, at the backend's clock, to p's audit, dropping the
// oldest events beyond driver.MaxPersonEvents, and stores p's entry e in
// s.
func (x *txn) record(s *shard, e *entry, ev driver.PersonEvent) {
	p := e.person
	ev.At = x.now
	p.audit = append(p.audit, ev)
	if n := len(p.audit); n > driver.MaxPersonEvents {
		// Re-slicing keeps a growing array; append's growth copies only
		// the live events, so it stays within twice the bound.
		p.audit = p.audit[n-driver.MaxPersonEvents:]
	}
	s.put(e, forever, x.now)
}

// checkIdentity checks an identity or a person's name (driver.Link).
func checkIdentity(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > driver.MaxIdentityLen:
		return fmt.Errorf("%s of %d bytes, at most %d", what, len(s), driver.MaxIdentityLen)
	}
	return nil
}

// Link stores l under idKey with Created at the backend's clock, lists it
// under personKey and records a "link" event there (driver.Linker). An
// identity linked again to the same person keeps its Created and takes
// l's By and Reason (a "link" event records it too).
func (b *Backend) Link(ctx context.Context, idKey, personKey string, l driver.Link) (driver.Link, error) {
	if err := ctx.Err(); err != nil {
		return driver.Link{}, fmt.Errorf("memory: link: %w", err)
	}
	err := errors.Join(checkKey("identity key", idKey), checkKey("person key", personKey),
		checkIdentity("identity", l.ID), checkIdentity("person", l.Person))
	if err != nil {
		return driver.Link{}, fmt.Errorf("memory: link: %w", err)
	}
	x := b.begin([]string{idKey, personKey})
	defer x.end()
	is, ie := x.linkAt(idKey)
	if ie != nil && ie.link.Person != l.Person {
		return driver.Link{}, fmt.Errorf("memory: link: %w", driver.ErrIdentityLinked)
	}
	ps, pe := x.personAt(personKey)
	p := pe.person
	k := slices.IndexFunc(p.links, func(o driver.Link) bool { return o.ID == l.ID })
	if k < 0 && len(p.links) >= driver.MaxLinks {
		return driver.Link{}, fmt.Errorf("memory: link: %w (%d)", driver.ErrTooManyLinks, driver.MaxLinks)
	}
	stored := driver.Link{
		ID: strings.Clone(l.ID), Person: strings.Clone(l.Person), Created: x.now,
		By: strings.Clone(l.By), Reason: strings.Clone(l.Reason),
	}
	if ie != nil {
		stored.Created = ie.link.Created
	} else {
		ie = &entry{key: strings.Clone(idKey), kind: kindLink}
	}
	ie.link = &stored
	is.put(ie, forever, x.now)
	if k >= 0 {
		p.links[k] = stored
	} else {
		p.links = append(p.links, stored)
	}
	x.record(ps, pe, driver.PersonEvent{Op: "link", ID: stored.ID, By: stored.By, Reason: stored.Reason})
	return stored, nil
}

// Unlink removes the link of identity id under idKey and its listing
// under personKey, and records an "unlink" event there (driver.Linker);
// ErrLinkNotFound unless idKey links id to the person whose listing
// under personKey names id.
func (b *Backend) Unlink(ctx context.Context, idKey, personKey, id, by, reason string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: unlink: %w", err)
	}
	if err := errors.Join(checkKey("identity key", idKey), checkKey("person key", personKey)); err != nil {
		return fmt.Errorf("memory: unlink: %w", err)
	}
	x := b.begin([]string{idKey, personKey})
	defer x.end()
	is, ie := x.linkAt(idKey)
	ps, pe := x.personAt(personKey)
	p := pe.person
	k := slices.IndexFunc(p.links, func(o driver.Link) bool { return o.ID == id })
	if ie == nil || ie.link.ID != id || k < 0 || p.links[k].Person != ie.link.Person {
		return fmt.Errorf("memory: unlink: %w", driver.ErrLinkNotFound)
	}
	is.remove(ie)
	p.links = slices.Delete(p.links, k, k+1)
	x.record(ps, pe, driver.PersonEvent{Op: "unlink", ID: strings.Clone(id), By: strings.Clone(by), Reason: strings.Clone(reason)})
	return nil
}

// LinkOf returns the link stored under idKey; an error wrapping
// ErrLinkNotFound when none (driver.Linker).
func (b *Backend) LinkOf(ctx context.Context, idKey string) (driver.Link, error) {
	if err := ctx.Err(); err != nil {
		return driver.Link{}, fmt.Errorf("memory: link of: %w", err)
	}
	x := b.begin([]string{idKey})
	defer x.end()
	_, e := x.linkAt(idKey)
	if e == nil {
		return driver.Link{}, fmt.Errorf("memory: link of: %w", driver.ErrLinkNotFound)
	}
	return *e.link, nil
}

// Person returns the links, zone and audit (newest first) kept under
// personKey; the zero Person when nothing is (driver.Linker).
func (b *Backend) Person(ctx context.Context, personKey string) (driver.Person, error) {
	if err := ctx.Err(); err != nil {
		return driver.Person{}, fmt.Errorf("memory: person: %w", err)
	}
	x := b.begin([]string{personKey})
	defer x.end()
	_, e := x.personAt(personKey)
	p := e.person
	out := driver.Person{Links: slices.Clone(p.links), Zone: p.zone, Audit: slices.Clone(p.audit)}
	slices.Reverse(out.Audit) // kept oldest first, returned newest first
	return out, nil
}

// SetPersonZone stores zone ("" clears it) under personKey and records a
// "zone" event there (driver.Linker).
func (b *Backend) SetPersonZone(ctx context.Context, personKey, zone, by, reason string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: set person zone: %w", err)
	}
	if err := checkKey("person key", personKey); err != nil {
		return fmt.Errorf("memory: set person zone: %w", err)
	}
	x := b.begin([]string{personKey})
	defer x.end()
	s, e := x.personAt(personKey)
	e.person.zone = strings.Clone(zone)
	x.record(s, e, driver.PersonEvent{Op: "zone", Zone: e.person.zone, By: strings.Clone(by), Reason: strings.Clone(reason)})
	return nil
}

func checkKey(what, key string) error {
	if key == "" {
		return fmt.Errorf("empty %s", what)
	}
	return nil
}
