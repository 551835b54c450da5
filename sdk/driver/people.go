package driver

import (
	"context"
	"errors"
	"time"
)

// Link ties an identity (a device token, a phone number, an e-mail
// address…) to the person whose caps it shares (sdk's Admin.Link): an
// attempt sent to the identity is decided for the person.
type Link struct {
	// ID is the identity, Person the person it belongs to.
	ID     string
	Person string
	// Created is when the link was made (the backend's clock); By and
	// Reason who made it and why.
	Created time.Time
	By      string
	Reason  string
}

// PersonEvent is one entry of a person's audit: a link made or removed, a
// stored zone set or cleared.
type PersonEvent struct {
	At time.Time
	// Op is "link", "unlink" or "zone".
	Op string
	// ID is the identity (Op "link" and "unlink"); Zone the zone set (Op
	// "zone"; "" when cleared).
	ID   string
	Zone string
	By   string
	// Reason says why.
	Reason string
}

// Person is what a backend keeps of one person (Linker.Person).
type Person struct {
	// Links are the person's identities, oldest first.
	Links []Link
	// Zone is the person's stored IANA time zone name ("" when none).
	Zone string
	// Audit is the person's newest events, newest first (at most
	// MaxPersonEvents).
	Audit []PersonEvent
}

// Bounds of what a Linker keeps.
const (
	// MaxIdentityLen is the longest Link.ID and Link.Person, in bytes.
	MaxIdentityLen = 256
	// MaxLinks is the most identities one person has.
	MaxLinks = 100
	// MaxPersonEvents is the most audit events kept per person.
	MaxPersonEvents = 100
)

// Linker is implemented by backends that keep identity links and persons'
// stored zones (sdk's Admin.Link, Unlink, Person, SetPersonZone). The sdk
// builds the keys: idKey is the identity's (one per identity), personKey
// the person's (one per person); on a Redis Cluster they are in different
// slots, so an operation touching both is two steps, ordered so that a
// crash between them leaves at worst a listed link that does not resolve
// (never a resolving link that is not listed).
type Linker interface {
	// Link stores l (l.Created is set to the backend's clock) under idKey,
	// lists it under personKey and records a "link" event there. It
	// returns an error wrapping ErrIdentityLinked when idKey links the
	// identity to another person (nothing changes), ErrTooManyLinks when
	// the person has MaxLinks others; linking an identity again to the
	// same person updates By and Reason.
	Link(ctx context.Context, idKey, personKey string, l Link) (Link, error)
	// Unlink removes the link of identity id (under idKey, listed under
	// personKey) and records an "unlink" event by by for reason; an error
	// wrapping ErrLinkNotFound when idKey does not link id to that person.
	Unlink(ctx context.Context, idKey, personKey, id, by, reason string) error
	// LinkOf returns the link stored under idKey; ErrLinkNotFound when none.
	LinkOf(ctx context.Context, idKey string) (Link, error)
	// Person returns what is kept under personKey (empty when nothing).
	Person(ctx context.Context, personKey string) (Person, error)
	// SetPersonZone stores zone (an IANA name the sdk checked; "" clears
	// it) under personKey and records a "zone" event.
	SetPersonZone(ctx context.Context, personKey, zone, by, reason string) error
}

// Errors of a Linker.
var (
	ErrIdentityLinked = errors.New("freqcap: identity is linked to another person")
	ErrLinkNotFound   = errors.New("freqcap: link not found")
	ErrTooManyLinks   = errors.New("freqcap: person has too many identities")
)
