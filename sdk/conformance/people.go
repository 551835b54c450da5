package conformance

import (
	"errors"
	"strconv"

	"github.com/freqcap/freqcap/sdk/driver"
)

// The people cases: identity links (driver.Linker) through sdk.Admin:
// made, listed, refused, updated, removed; a person's stored zone; the
// person's audit and the bounds.

func peopleCases() []testCase {
	return []testCase{
		{name: "LinkAndPerson", needs: linker, run: peopleLink},
		{name: "LinkAgain", needs: linker, run: peopleLinkAgain},
		{name: "Unlink", needs: linker, run: peopleUnlink},
		{name: "Zone", needs: linker, run: peopleZone},
		{name: "Bounds", needs: linker, run: peopleBounds},
	}
}

// person returns a person's id unique to the test.
func (e *env) person(name string) string { return e.tag + "-" + name }

// link links identity to person (by ops, for reason), failing the test on
// error, and checks the link returned.
func (e *env) link(identity, person, reason string) driver.Link {
	e.t.Helper()
	l, err := e.lim.Admin().Link(bg(), identity, person, "ops", reason)
	if err != nil {
		e.t.Fatalf("Link(%q, %q) = %v", identity, person, err)
	}
	if l.ID != identity || l.Person != person || l.By != "ops" || l.Reason != reason || l.Created.IsZero() || (e.fake != nil && !l.Created.Equal(e.fake.Now())) {
		e.t.Fatalf("Link(%q, %q) = %+v, want it as given, Created by the backend's clock", identity, person, l)
	}
	return l
}

func peopleLink(e *env) {
	ann := e.person("ann")
	tok, phone := e.person("tok"), e.person("+33 6 12:34")
	a := e.link(tok, ann, "same device")
	b := e.link(phone, ann, "verified phone")
	ad := e.lim.Admin()
	for _, want := range []driver.Link{a, b} {
		if got, err := ad.LinkOf(bg(), want.ID); err != nil || !sameLink(got, want) {
			e.t.Errorf("LinkOf(%q) = %+v, %v, want %+v", want.ID, got, err, want)
		}
	}
	p, err := ad.Person(bg(), ann)
	if err != nil {
		e.t.Fatalf("Person = %v", err)
	}
	// Oldest first; links made at one instant (a fake clock) in any order.
	if len(p.Links) != 2 || p.Zone != "" || p.Links[1].Created.Before(p.Links[0].Created) ||
		!(sameLink(p.Links[0], a) && sameLink(p.Links[1], b) || sameLink(p.Links[0], b) && sameLink(p.Links[1], a) && a.Created.Equal(b.Created)) {
		e.t.Errorf("Person.Links = %+v, zone %q; want %q then %q (oldest first), no zone", p.Links, p.Zone, tok, phone)
	}
	if len(p.Audit) != 2 || p.Audit[0].Op != "link" || p.Audit[0].ID != phone || p.Audit[1].ID != tok || p.Audit[0].Reason != "verified phone" || p.Audit[0].By != "ops" {
		e.t.Errorf("Person.Audit = %+v, want the two links, newest first", p.Audit)
	}
	if _, err := ad.LinkOf(bg(), e.person("nobody")); !errors.Is(err, driver.ErrLinkNotFound) {
		e.t.Errorf("LinkOf an identity never linked = %v, want ErrLinkNotFound", err)
	}
	if p, err := ad.Person(bg(), e.person("nobody")); err != nil || len(p.Links)+len(p.Audit) != 0 || p.Zone != "" {
		e.t.Errorf("Person never linked = %+v, %v, want empty", p, err)
	}
}

// sameLink compares links, their Created as instants.
func sameLink(x, y driver.Link) bool {
	return x.ID == y.ID && x.Person == y.Person && x.Created.Equal(y.Created) && x.By == y.By && x.Reason == y.Reason
}

func peopleLinkAgain(e *env) {
	ann, bob, tok := e.person("ann"), e.person("bob"), e.person("tok")
	first := e.link(tok, ann, "same device")
	ad := e.lim.Admin()
	if _, err := ad.Link(bg(), tok, bob, "ops", "mistake"); !errors.Is(err, driver.ErrIdentityLinked) {
		e.t.Fatalf("Link to another person = %v, want ErrIdentityLinked", err)
	}
	if p, _ := ad.Person(bg(), bob); len(p.Links)+len(p.Audit) != 0 {
		e.t.Errorf("Person(bob) after a refused link = %+v, want empty", p)
	}
	again, err := ad.Link(bg(), tok, ann, "lead", "checked again")
	if err != nil || !again.Created.Equal(first.Created) || again.By != "lead" || again.Reason != "checked again" {
		e.t.Fatalf("Link again to the same person = %+v, %v, want By and Reason updated, Created kept (%v)", again, err, first.Created)
	}
	p, _ := ad.Person(bg(), ann)
	if len(p.Links) != 1 || !sameLink(p.Links[0], again) || len(p.Audit) != 2 || p.Audit[0].By != "lead" {
		e.t.Errorf("Person after the link again = %+v, want one link as updated, two link events", p)
	}
}

func peopleUnlink(e *env) {
	ann, tok := e.person("ann"), e.person("tok")
	ad := e.lim.Admin()
	if err := ad.Unlink(bg(), tok, "ops", "none"); !errors.Is(err, driver.ErrLinkNotFound) {
		e.t.Fatalf("Unlink never linked = %v, want ErrLinkNotFound", err)
	}
	e.link(tok, ann, "same device")
	if err := ad.Unlink(bg(), tok, "ops", "device sold"); err != nil {
		e.t.Fatalf("Unlink = %v", err)
	}
	if _, err := ad.LinkOf(bg(), tok); !errors.Is(err, driver.ErrLinkNotFound) {
		e.t.Errorf("LinkOf after Unlink = %v, want ErrLinkNotFound", err)
	}
	p, _ := ad.Person(bg(), ann)
	if len(p.Links) != 0 || len(p.Audit) != 2 || p.Audit[0].Op != "unlink" || p.Audit[0].ID != tok || p.Audit[0].Reason != "device sold" {
		e.t.Errorf("Person after Unlink = %+v, want no link, the unlink audited first", p)
	}
	if err := ad.Unlink(bg(), tok, "ops", "again"); !errors.Is(err, driver.ErrLinkNotFound) {
		e.t.Errorf("Unlink again = %v, want ErrLinkNotFound", err)
	}
	// Free again: another person may have it.
	e.link(tok, e.person("bob"), "new owner")
}

func peopleZone(e *env) {
	ann := e.person("ann")
	ad := e.lim.Admin()
	for _, z := range []string{"Europe/Paris", "America/New_York", ""} {
		if err := ad.SetPersonZone(bg(), ann, z, "ops", "zone "+z); err != nil {
			e.t.Fatalf("SetPersonZone(%q) = %v", z, err)
		}
		p, err := ad.Person(bg(), ann)
		if err != nil || p.Zone != z || len(p.Audit) == 0 || p.Audit[0].Op != "zone" || p.Audit[0].Zone != z || p.Audit[0].Reason != "zone "+z {
			e.t.Errorf("Person after SetPersonZone(%q) = %+v, %v, want the zone and its event first", z, p, err)
		}
	}
}

func peopleBounds(e *env) {
	many := e.person("many")
	ad := e.lim.Admin()
	for i := range driver.MaxLinks {
		if _, err := ad.Link(bg(), e.person("id"+strconv.Itoa(i)), many, "ops", ""); err != nil {
			e.t.Fatalf("Link %d = %v", i+1, err)
		}
	}
	if _, err := ad.Link(bg(), e.person("one-more"), many, "ops", ""); !errors.Is(err, driver.ErrTooManyLinks) {
		e.t.Fatalf("Link %d = %v, want ErrTooManyLinks", driver.MaxLinks+1, err)
	}
	if _, err := ad.Link(bg(), e.person("id0"), many, "ops", "again"); err != nil {
		e.t.Fatalf("Link a listed identity at the bound = %v", err)
	}
	for i := range 3 {
		if err := ad.SetPersonZone(bg(), many, "UTC", "ops", strconv.Itoa(i)); err != nil {
			e.t.Fatal(err)
		}
	}
	p, err := ad.Person(bg(), many)
	if err != nil || len(p.Links) != driver.MaxLinks || len(p.Audit) != driver.MaxPersonEvents {
		e.t.Fatalf("Person = %d links, %d events, %v; want %d and %d", len(p.Links), len(p.Audit), err, driver.MaxLinks, driver.MaxPersonEvents)
	}
	// 100 links, 1 again, 3 zones: the newest 100 events are kept.
	if p.Audit[0].Reason != "2" || p.Audit[3].Reason != "again" || p.Audit[99].ID != e.person("id4") {
		e.t.Errorf("Audit: first %+v, fourth %+v, last %+v; want the zones, the link again, then the link of id4", p.Audit[0], p.Audit[3], p.Audit[99])
	}
}
