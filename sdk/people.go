package sdk

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/freqcap/freqcap/sdk/driver"
)

// One person, several identities.
//
// A person's caps are shared by its identities (device tokens, phone
// numbers, e-mail addresses…) through stored links, identity -> person,
// set, listed and removed with Admin.Link, Unlink, LinkOf and Person (the
// backend's driver.Linker), each change audited with who made it and why.
// An attempt sent to an identity is decided for its person: the Limiter
// resolves the identity to its person before the decision (one read of
// the link and one of the person, cached for PeopleCacheTTL), then
// decides on the person's keys in one atomic round trip, as for any
// subject, so on a Redis Cluster too (all of a person's counters share
// the person's hash tag). An identity without a link is its own person.
//
// Links are stored rather than given with each attempt so that a sender
// that knows only the address it sends to (a token, a number) still
// counts for the person, and so that the link is one fact, kept in one
// place, that staff can read and change (the CLI's `freqcap person`, the
// console's subject page).
//
// A person may have a stored time zone (SetPersonZone): the zone of its
// calendar rules and quiet hours when the attempt gives none. The
// attempt's zone (Attempt.Zone) wins over the person's stored zone, which
// wins over the rule's own zone.

// ErrInvalidIdentity: an identity or person given to Admin.Link, Unlink,
// LinkOf, Person or SetPersonZone is empty, longer than
// driver.MaxIdentityLen bytes, not UTF-8 or holds a control character;
// or a By or Reason is too long or holds a line break.
var ErrInvalidIdentity = errors.New("invalid identity")

// PeopleCacheTTL is how long a Limiter keeps an identity's person and
// the person's stored zone once read for a decision: a link or zone
// changed elsewhere reaches this Limiter's decisions within it. The
// Admin of this Limiter (Link, Unlink, SetPersonZone) forgets the entries
// it changes at once.
const PeopleCacheTTL = time.Second

// PeopleCacheSize is the most identities a Limiter keeps in that cache;
// past it, expired entries go first, then arbitrary ones.
const PeopleCacheSize = 1 << 16

// Link links identity to person (their caps are then shared: see "One
// person, several identities" at the top of this file, and
// docs/POLICIES.md), by who for reason (audited with the person), and
// returns the link as stored, with Created set by the
// backend's clock. Linking an identity again to the same person updates
// By and Reason. The error wraps ErrInvalidIdentity for a bad identity,
// person, by or reason (see ErrInvalidIdentity; By at most
// driver.MaxOverrideByLen bytes, Reason at most
// driver.MaxOverrideReasonLen), driver.ErrIdentityLinked when identity is
// linked to another person (unlink it first), driver.ErrTooManyLinks when
// person has driver.MaxLinks identities, and errors.ErrUnsupported when
// the backend keeps no links (driver.Linker: the memory and Redis
// backends do).
func (ad *Admin) Link(ctx context.Context, identity, person string, by, reason string) (driver.Link, error) {
	l := ad.lim()
	lk, err := l.linker("link")
	if err != nil {
		return driver.Link{}, err
	}
	if err := errors.Join(checkIdentity("identity", identity), checkIdentity("person", person), checkAudit(by, reason)); err != nil {
		return driver.Link{}, fmt.Errorf("sdk: link: %w", err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := lk.Link(ctx, idKey(l.prefix, identity), personKey(l.prefix, person),
		driver.Link{ID: identity, Person: person, By: by, Reason: reason})
	l.people.forget(identity)
	if err != nil {
		return driver.Link{}, fmt.Errorf("sdk: link: %w", err)
	}
	return out, nil
}

// Unlink removes identity's link, by who for reason (audited with the
// person it was linked to): the identity is its own person again. The
// error wraps driver.ErrLinkNotFound when identity has no link, and
// otherwise as Link's.
func (ad *Admin) Unlink(ctx context.Context, identity, by, reason string) error {
	l := ad.lim()
	lk, err := l.linker("unlink")
	if err != nil {
		return err
	}
	if err := errors.Join(checkIdentity("identity", identity), checkAudit(by, reason)); err != nil {
		return fmt.Errorf("sdk: unlink: %w", err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	ik := idKey(l.prefix, identity)
	cur, err := lk.LinkOf(ctx, ik)
	if err == nil {
		err = lk.Unlink(ctx, ik, personKey(l.prefix, cur.Person), identity, by, reason)
	}
	l.people.forget(identity)
	if err != nil {
		return fmt.Errorf("sdk: unlink: %w", err)
	}
	return nil
}

// LinkOf returns identity's link; an error wrapping driver.ErrLinkNotFound
// when it has none (it is its own person). Other errors as Link's.
func (ad *Admin) LinkOf(ctx context.Context, identity string) (driver.Link, error) {
	l := ad.lim()
	lk, err := l.linker("link of")
	if err != nil {
		return driver.Link{}, err
	}
	if err := checkIdentity("identity", identity); err != nil {
		return driver.Link{}, fmt.Errorf("sdk: link of: %w", err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := lk.LinkOf(ctx, idKey(l.prefix, identity))
	if err != nil {
		return driver.Link{}, fmt.Errorf("sdk: link of: %w", err)
	}
	return out, nil
}

// Person returns what is kept of person: its identities (oldest first),
// its stored zone and its audit (newest first); empty, without error,
// for a person never linked nor given a zone. Errors as Link's.
func (ad *Admin) Person(ctx context.Context, person string) (driver.Person, error) {
	l := ad.lim()
	lk, err := l.linker("person")
	if err != nil {
		return driver.Person{}, err
	}
	if err := checkIdentity("person", person); err != nil {
		return driver.Person{}, fmt.Errorf("sdk: person: %w", err)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	out, err := lk.Person(ctx, personKey(l.prefix, person))
	if err != nil {
		return driver.Person{}, fmt.Errorf("sdk: person: %w", err)
	}
	return out, nil
}

// SetPersonZone stores zone, an IANA time zone name (see LoadZone), as
// person's, by who for reason (audited); "" clears it. The zone applies
// to the person's calendar rules and quiet hours where the attempt gives
// none: the attempt's zone wins over the person's stored zone, which wins
// over the rule's own zone. The error wraps
// ErrInvalidZone for a zone LoadZone refuses ("Local" included), and
// otherwise as Link's.
func (ad *Admin) SetPersonZone(ctx context.Context, person string, zone string, by, reason string) error {
	l := ad.lim()
	lk, err := l.linker("set person zone")
	if err != nil {
		return err
	}
	if err := errors.Join(checkIdentity("person", person), checkAudit(by, reason)); err != nil {
		return fmt.Errorf("sdk: set person zone: %w", err)
	}
	if zone != "" {
		if _, err := LoadZone(zone); err != nil {
			return fmt.Errorf("sdk: set person zone: %w", err)
		}
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	err = lk.SetPersonZone(ctx, personKey(l.prefix, person), zone, by, reason)
	l.people.forgetPerson(person)
	if err != nil {
		return fmt.Errorf("sdk: set person zone: %w", err)
	}
	return nil
}

// personOf returns the person identity is decided for, and the person's
// stored zone (nil: none): identity itself when it has no link. It reads
// the backend (LinkOf, then Person) at most once per PeopleCacheTTL per
// identity; an identity no Link accepts (see ErrInvalidIdentity) is its
// own person, with no zone, without a read. The error wraps
// errors.ErrUnsupported when the backend keeps no links, ErrInvalidZone
// when the stored zone does not load here (LoadZone), or the backend's.
func (l *Limiter) personOf(ctx context.Context, identity string) (person string, zone *time.Location, err error) {
	lk, err := l.linker("person of")
	if err != nil {
		return "", nil, err
	}
	if checkIdentity("identity", identity) != nil {
		return identity, nil, nil
	}
	now := l.now()
	if e, ok := l.people.get(identity, now); ok {
		return e.person, e.zone, nil
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	person = identity
	lnk, err := lk.LinkOf(ctx, idKey(l.prefix, identity))
	switch {
	case err == nil:
		person = lnk.Person
	case !errors.Is(err, driver.ErrLinkNotFound):
		return "", nil, fmt.Errorf("sdk: person of: %w", err)
	}
	p, err := lk.Person(ctx, personKey(l.prefix, person))
	if err != nil {
		return "", nil, fmt.Errorf("sdk: person of: %w", err)
	}
	if p.Zone != "" {
		if zone, err = LoadZone(p.Zone); err != nil {
			return "", nil, fmt.Errorf("sdk: person of: stored %w", err)
		}
	}
	l.people.put(identity, personEntry{person: person, zone: zone, until: now.Add(PeopleCacheTTL)}, now)
	return person, zone, nil
}

// linker returns the backend as a driver.Linker, or an error naming op.
func (l *Limiter) linker(op string) (driver.Linker, error) {
	if err := l.hasBackend(op); err != nil {
		return nil, err
	}
	lk, ok := l.b.(driver.Linker)
	if !ok {
		return nil, fmt.Errorf("sdk: %s: backend %T keeps no identity links: %w", op, l.b, errors.ErrUnsupported)
	}
	return lk, nil
}

// idKey is the key of identity's link: "<prefix>:{<identity>}:!id", and
// personKey the key of what is kept of person:
// "<prefix>:{<person>}:!person" (identity and person escaped as subject
// values are, escapeValue). Neither is any other key of freqcap's: a
// decision's keys continue their hash tag with ":<policy>:", a policy
// name never holds '!', and the other keys (statistics, the policy store)
// never end so. A person's key shares its hash tag with the keys of a
// subject whose one shard value is the person.
func idKey(prefix, identity string) string {
	return prefix + ":{" + escapeValue(identity) + "}:!id"
}

func personKey(prefix, person string) string {
	return prefix + ":{" + escapeValue(person) + "}:!person"
}

// checkIdentity checks an identity or person (what names it); the error
// wraps ErrInvalidIdentity and never holds the value.
func checkIdentity(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidIdentity, what)
	case len(v) > driver.MaxIdentityLen:
		return fmt.Errorf("%w: %s of %d bytes, want <= %d (MaxIdentityLen)", ErrInvalidIdentity, what, len(v), driver.MaxIdentityLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalidIdentity, what)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s holds a control character", ErrInvalidIdentity, what)
	}
	return nil
}

// checkAudit checks the author and reason of a change to a link or a
// person (ErrInvalidIdentity), as overrides' are checked.
func checkAudit(by, reason string) error {
	if s := auditProblem(by, reason); s != "" {
		return fmt.Errorf("%w: %s", ErrInvalidIdentity, s)
	}
	return nil
}

// auditProblem returns what is wrong with the author and reason of an
// audited change (an override's, a link's or a person's), "" when
// nothing: a By of at most driver.MaxOverrideByLen bytes and a Reason of
// at most driver.MaxOverrideReasonLen, neither holding a line break.
func auditProblem(by, reason string) string {
	switch {
	case len(reason) > driver.MaxOverrideReasonLen:
		return fmt.Sprintf("reason is %d bytes, want <= %d", len(reason), driver.MaxOverrideReasonLen)
	case len(by) > driver.MaxOverrideByLen:
		return fmt.Sprintf("by is %d bytes, want <= %d", len(by), driver.MaxOverrideByLen)
	case strings.ContainsAny(reason, "\r\n"):
		return "reason holds a line break"
	case strings.ContainsAny(by, "\r\n"):
		return "by holds a line break"
	}
	return ""
}

// people is a Limiter's cache of identities' persons and zones
// (personOf), bounded by PeopleCacheSize, split into shards each under
// its own lock. The zero value is ready for use.
type people struct {
	once   sync.Once
	seed   maphash.Seed
	shards [peopleShards]peopleShard
}

const peopleShards = 16

type peopleShard struct {
	mu sync.Mutex
	m  map[string]personEntry
}

// personEntry is an identity's person and zone, read for decisions until
// until.
type personEntry struct {
	person string
	zone   *time.Location
	until  time.Time
}

func (c *people) shard(identity string) *peopleShard {
	c.once.Do(func() { c.seed = maphash.MakeSeed() })
	return &c.shards[maphash.String(c.seed, identity)%peopleShards]
}

// get returns identity's entry if it is still fresh at now.
func (c *people) get(identity string, now time.Time) (personEntry, bool) {
	s := c.shard(identity)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[identity]
	if !ok || !now.Before(e.until) {
		return personEntry{}, false
	}
	return e, true
}

// put stores identity's entry, making room first when the shard is full
// (at now).
func (c *people) put(identity string, e personEntry, now time.Time) {
	s := c.shard(identity)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]personEntry)
	}
	if _, ok := s.m[identity]; !ok && len(s.m) >= PeopleCacheSize/peopleShards {
		s.makeRoom(now)
	}
	s.m[identity] = e
}

// makeRoom drops the entries expired at now, else one entry.
func (s *peopleShard) makeRoom(now time.Time) {
	n := len(s.m)
	for id, e := range s.m {
		if !now.Before(e.until) {
			delete(s.m, id)
		}
	}
	if len(s.m) < n {
		return
	}
	for id := range s.m {
		delete(s.m, id)
		return
	}
}

// forget drops identity's entry.
func (c *people) forget(identity string) {
	s := c.shard(identity)
	s.mu.Lock()
	delete(s.m, identity)
	s.mu.Unlock()
}

// forgetPerson drops the entries of every identity of person (its zone
// changed).
func (c *people) forgetPerson(person string) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for id, e := range s.m {
			if e.person == person {
				delete(s.m, id)
			}
		}
		s.mu.Unlock()
	}
}
