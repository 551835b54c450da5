package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// Keys as the sdk would build them: one per identity, one per person, in
// different hash tags.
func idKey(id string) string         { return "{id:" + id + "}:!link" }
func personKey(person string) string { return "{person:" + person + "}:!person" }

func mustLink(t *testing.T, b *Backend, l driver.Link) driver.Link {
	t.Helper()
	got, err := b.Link(context.Background(), idKey(l.ID), personKey(l.Person), l)
	if err != nil {
		t.Fatalf("Link(%+v) = %v", l, err)
	}
	return got
}

func mustPerson(t *testing.T, b *Backend, person string) driver.Person {
	t.Helper()
	p, err := b.Person(context.Background(), personKey(person))
	if err != nil {
		t.Fatalf("Person(%q) = %v", person, err)
	}
	return p
}

// linkIDs lists the identities of p's links, in order.
func linkIDs(p driver.Person) []string {
	var ids []string
	for _, l := range p.Links {
		ids = append(ids, l.ID)
	}
	return ids
}

// TestLink: a link is stored with the backend's clock, resolves, is
// listed under its person (oldest first) and audited; linked again to
// the same person it keeps Created and takes the new By and Reason.
func TestLink(t *testing.T) {
	b, clock := newMsgBackend()
	ctx := context.Background()
	got := mustLink(t, b, driver.Link{ID: "tok-1", Person: "ann", By: "ops", Reason: "signup", Created: at(-time.Hour)})
	want := driver.Link{ID: "tok-1", Person: "ann", Created: t0, By: "ops", Reason: "signup"}
	if got != want {
		t.Errorf("Link = %+v, want %+v (Created the backend's clock)", got, want)
	}
	if l, err := b.LinkOf(ctx, idKey("tok-1")); err != nil || l != want {
		t.Errorf("LinkOf = %+v, %v, want %+v", l, err, want)
	}
	clock.Set(at(time.Minute))
	mustLink(t, b, driver.Link{ID: "+33600000000", Person: "ann", By: "ops"})
	clock.Set(at(2 * time.Minute))
	again := mustLink(t, b, driver.Link{ID: "tok-1", Person: "ann", By: "support", Reason: "ticket 7"})
	if want := (driver.Link{ID: "tok-1", Person: "ann", Created: t0, By: "support", Reason: "ticket 7"}); again != want {
		t.Errorf("Link again = %+v, want %+v (Created kept, By and Reason updated)", again, want)
	}
	if l, _ := b.LinkOf(ctx, idKey("tok-1")); l != again {
		t.Errorf("LinkOf after linking again = %+v, want %+v", l, again)
	}
	p := mustPerson(t, b, "ann")
	if ids := linkIDs(p); fmt.Sprint(ids) != "[tok-1 +33600000000]" || p.Links[0] != again {
		t.Errorf("Person.Links = %+v, want tok-1 (updated) then +33600000000, oldest first, no duplicate", p.Links)
	}
	wantAudit := []driver.PersonEvent{
		{At: at(2 * time.Minute), Op: "link", ID: "tok-1", By: "support", Reason: "ticket 7"},
		{At: at(time.Minute), Op: "link", ID: "+33600000000", By: "ops"},
		{At: t0, Op: "link", ID: "tok-1", By: "ops", Reason: "signup"},
	}
	if fmt.Sprint(p.Audit) != fmt.Sprint(wantAudit) {
		t.Errorf("Person.Audit = %+v, want %+v (newest first)", p.Audit, wantAudit)
	}
	// What Person returns is the caller's.
	p.Links[0].By, p.Audit[0].Op = "mallory", "x"
	if q := mustPerson(t, b, "ann"); q.Links[0].By != "support" || q.Audit[0].Op != "link" {
		t.Errorf("Person after the caller changed its copy = %+v, want unchanged", q)
	}
}

// TestLinkToAnotherPerson: an identity linked to a person cannot be
// linked to another (ErrIdentityLinked, nothing changes) until unlinked.
func TestLinkToAnotherPerson(t *testing.T) {
	b, _ := newMsgBackend()
	ctx := context.Background()
	first := mustLink(t, b, driver.Link{ID: "mail", Person: "ann", By: "ops"})
	_, err := b.Link(ctx, idKey("mail"), personKey("bob"), driver.Link{ID: "mail", Person: "bob", By: "ops"})
	if !errors.Is(err, driver.ErrIdentityLinked) {
		t.Fatalf("Link(ann's identity, bob) = %v, want ErrIdentityLinked", err)
	}
	if l, _ := b.LinkOf(ctx, idKey("mail")); l != first {
		t.Errorf("LinkOf after the refused link = %+v, want %+v", l, first)
	}
	if p := mustPerson(t, b, "bob"); len(p.Links) != 0 || len(p.Audit) != 0 {
		t.Errorf("Person(bob) after the refused link = %+v, want empty", p)
	}
	if p := mustPerson(t, b, "ann"); len(p.Audit) != 1 {
		t.Errorf("Person(ann).Audit = %+v, want the one link event", p.Audit)
	}
	if err := b.Unlink(ctx, idKey("mail"), personKey("ann"), "mail", "ops", "moved"); err != nil {
		t.Fatalf("Unlink = %v", err)
	}
	if l := mustLink(t, b, driver.Link{ID: "mail", Person: "bob", By: "ops"}); l.Person != "bob" {
		t.Errorf("Link to bob after the unlink = %+v, want bob's", l)
	}
}

// TestUnlink: only a link idKey holds for the listed identity is
// removed; the removal is audited and the identity no longer resolves.
func TestUnlink(t *testing.T) {
	b, clock := newMsgBackend()
	ctx := context.Background()
	mustLink(t, b, driver.Link{ID: "a", Person: "ann", By: "ops"})
	mustLink(t, b, driver.Link{ID: "b", Person: "ann", By: "ops"})
	mustLink(t, b, driver.Link{ID: "c", Person: "cid", By: "ops"})
	// cid's key lists an identity "a" of its own, under another key.
	if _, err := b.Link(ctx, idKey("a-of-cid"), personKey("cid"), driver.Link{ID: "a", Person: "cid"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		idKey, personKey string
		id               string
	}{
		{"never linked", idKey("z"), personKey("ann"), "z"},
		{"another person's key", idKey("b"), personKey("cid"), "b"},
		{"a person without anything", idKey("a"), personKey("nobody"), "a"},
		{"another identity under the key", idKey("a"), personKey("ann"), "b"},
		{"listed for another person", idKey("a"), personKey("cid"), "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := b.Unlink(ctx, tc.idKey, tc.personKey, tc.id, "ops", ""); !errors.Is(err, driver.ErrLinkNotFound) {
				t.Errorf("Unlink(%s) = %v, want ErrLinkNotFound", tc.name, err)
			}
		})
	}
	clock.Set(at(time.Hour))
	if err := b.Unlink(ctx, idKey("a"), personKey("ann"), "a", "support", "lost phone"); err != nil {
		t.Fatalf("Unlink(a) = %v", err)
	}
	if _, err := b.LinkOf(ctx, idKey("a")); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Errorf("LinkOf(unlinked) = %v, want ErrLinkNotFound", err)
	}
	p := mustPerson(t, b, "ann")
	if ids := linkIDs(p); fmt.Sprint(ids) != "[b]" {
		t.Errorf("Person.Links after the unlink = %v, want [b]", ids)
	}
	if want := (driver.PersonEvent{At: at(time.Hour), Op: "unlink", ID: "a", By: "support", Reason: "lost phone"}); len(p.Audit) != 3 || p.Audit[0] != want {
		t.Errorf("Person.Audit = %+v, want 3 events, the newest %+v", p.Audit, want)
	}
	if err := b.Unlink(ctx, idKey("a"), personKey("ann"), "a", "support", ""); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Errorf("Unlink twice = %v, want ErrLinkNotFound", err)
	}
	if p := mustPerson(t, b, "cid"); fmt.Sprint(linkIDs(p)) != "[c a]" || len(p.Audit) != 2 {
		t.Errorf("Person(cid) = %+v, want untouched", p)
	}
}

// TestTooManyLinks: a person holds at most driver.MaxLinks identities;
// at the bound, linking one of them again still works.
func TestTooManyLinks(t *testing.T) {
	b, _ := newMsgBackend()
	ctx := context.Background()
	for i := range driver.MaxLinks {
		mustLink(t, b, driver.Link{ID: fmt.Sprint("id-", i), Person: "ann", By: "bulk"})
	}
	_, err := b.Link(ctx, idKey("one-more"), personKey("ann"), driver.Link{ID: "one-more", Person: "ann"})
	if !errors.Is(err, driver.ErrTooManyLinks) {
		t.Fatalf("Link #%d = %v, want ErrTooManyLinks", driver.MaxLinks+1, err)
	}
	if _, err := b.LinkOf(ctx, idKey("one-more")); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Errorf("LinkOf(refused) = %v, want ErrLinkNotFound", err)
	}
	if l := mustLink(t, b, driver.Link{ID: "id-7", Person: "ann", By: "again"}); l.By != "again" {
		t.Errorf("Link(id-7 again) at the bound = %+v, want By updated", l)
	}
	if err := b.Unlink(ctx, idKey("id-0"), personKey("ann"), "id-0", "ops", ""); err != nil {
		t.Fatal(err)
	}
	mustLink(t, b, driver.Link{ID: "one-more", Person: "ann"})
	if p := mustPerson(t, b, "ann"); len(p.Links) != driver.MaxLinks || p.Links[len(p.Links)-1].ID != "one-more" {
		t.Errorf("Person.Links = %d links ending %+v, want %d ending one-more", len(p.Links), p.Links[len(p.Links)-1], driver.MaxLinks)
	}
}

// TestPersonZone: a stored zone is set and cleared, each change audited;
// the audit keeps the driver.MaxPersonEvents newest, newest first.
func TestPersonZone(t *testing.T) {
	b, clock := newMsgBackend()
	ctx := context.Background()
	if p := mustPerson(t, b, "ann"); p.Zone != "" || p.Links != nil || p.Audit != nil {
		t.Errorf("Person(unknown) = %+v, want the zero Person", p)
	}
	if err := b.SetPersonZone(ctx, personKey("ann"), "Europe/Paris", "ann", "app settings"); err != nil {
		t.Fatal(err)
	}
	p := mustPerson(t, b, "ann")
	if want := (driver.PersonEvent{At: t0, Op: "zone", Zone: "Europe/Paris", By: "ann", Reason: "app settings"}); p.Zone != "Europe/Paris" || len(p.Audit) != 1 || p.Audit[0] != want {
		t.Errorf("Person after SetPersonZone = %+v, want zone Europe/Paris, audit [%+v]", p, want)
	}
	clock.Set(at(time.Second))
	if err := b.SetPersonZone(ctx, personKey("ann"), "", "ops", "gdpr"); err != nil {
		t.Fatal(err)
	}
	if p := mustPerson(t, b, "ann"); p.Zone != "" || len(p.Audit) != 2 || p.Audit[0].Op != "zone" || p.Audit[0].Zone != "" || p.Audit[0].By != "ops" {
		t.Errorf("Person after clearing = %+v, want no zone, a zone event with Zone empty", p)
	}
	// 2 events so far; 150 more, a second apart.
	for i := range 150 {
		clock.Set(at(time.Duration(i+2) * time.Second))
		if err := b.SetPersonZone(ctx, personKey("ann"), fmt.Sprint("Etc/GMT-", i%12), "loop", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	p = mustPerson(t, b, "ann")
	if len(p.Audit) != driver.MaxPersonEvents {
		t.Fatalf("audit holds %d events, want %d", len(p.Audit), driver.MaxPersonEvents)
	}
	for i, ev := range p.Audit {
		// Newest first: the last of the loop (i=149, at +151s) first.
		if want := at(time.Duration(151-i) * time.Second); !ev.At.Equal(want) || ev.Reason != fmt.Sprint(149-i) {
			t.Fatalf("Audit[%d] = %+v, want at %v, reason %d", i, ev, want, 149-i)
		}
	}
	if p.Zone != "Etc/GMT-5" { // 149 % 12
		t.Errorf("Zone = %q, want the last set, Etc/GMT-5", p.Zone)
	}
}

// TestLinkerInput: bad input and a done context are errors that are not
// the Linker's sentinels, and change nothing.
func TestLinkerInput(t *testing.T) {
	b, _ := newMsgBackend()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	long := strings.Repeat("x", driver.MaxIdentityLen+1)
	tests := []struct {
		name string
		call func() error
	}{
		{"empty identity", func() error {
			_, err := b.Link(ctx, idKey(""), personKey("ann"), driver.Link{Person: "ann"})
			return err
		}},
		{"empty person", func() error { _, err := b.Link(ctx, idKey("a"), personKey(""), driver.Link{ID: "a"}); return err }},
		{"long identity", func() error {
			_, err := b.Link(ctx, idKey("l"), personKey("ann"), driver.Link{ID: long, Person: "ann"})
			return err
		}},
		{"long person", func() error {
			_, err := b.Link(ctx, idKey("a"), personKey("ann"), driver.Link{ID: "a", Person: long})
			return err
		}},
		{"empty id key", func() error {
			_, err := b.Link(ctx, "", personKey("ann"), driver.Link{ID: "a", Person: "ann"})
			return err
		}},
		{"empty person key", func() error { return b.SetPersonZone(ctx, "", "UTC", "", "") }},
		{"done link", func() error {
			_, err := b.Link(done, idKey("a"), personKey("ann"), driver.Link{ID: "a", Person: "ann"})
			return err
		}},
		{"done unlink", func() error { return b.Unlink(done, idKey("a"), personKey("ann"), "a", "", "") }},
		{"done link of", func() error { _, err := b.LinkOf(done, idKey("a")); return err }},
		{"done person", func() error { _, err := b.Person(done, personKey("ann")); return err }},
		{"done zone", func() error { return b.SetPersonZone(done, personKey("ann"), "UTC", "", "") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || errors.Is(err, driver.ErrIdentityLinked) || errors.Is(err, driver.ErrLinkNotFound) || errors.Is(err, driver.ErrTooManyLinks) {
				t.Errorf("%s = %v, want an error of its own", tc.name, err)
			}
		})
	}
	if n := b.Len(); n != 0 {
		t.Errorf("Len after refused calls = %d, want 0", n)
	}
	// At the bound is fine.
	edge := strings.Repeat("y", driver.MaxIdentityLen)
	mustLink(t, b, driver.Link{ID: edge, Person: edge})
	if n := b.Len(); n != 2 {
		t.Errorf("Len after one link = %d, want 2 (the identity's key, the person's)", n)
	}
}
