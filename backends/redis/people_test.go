package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/driver"
)

// peopleKeys returns an identity's and a person's keys, unique to this
// test run, built as sdk builds them: each in its own hash tag.
func peopleKeys(t *testing.T) (idKey func(id string) string, personKey func(p string) string) {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	run := hex.EncodeToString(r[:])
	return func(id string) string { return "fct:{" + escape(run+id) + "}:!id" },
		func(p string) string { return "fct:{" + escape(run+p) + "}:!person" }
}

// linkerBackends are the Linker's deployments: one script per operation
// on a standalone or Sentinel client, two steps on a Cluster.
func linkerBackends(t *testing.T) []struct {
	name string
	b    *Backend
	c    goredis.UniversalClient
} {
	sb, sc := standalone(t)
	cb, cc := cluster(t)
	zb, zc := sentinelBackend(t, redistest.NewSentinel(t))
	return []struct {
		name string
		b    *Backend
		c    goredis.UniversalClient
	}{{"standalone", sb, sc}, {"cluster", cb, cc}, {"sentinel", zb, zc}}
}

// TestLinker: links made, listed, updated, refused, removed, and zones
// stored, with their audit, on every deployment.
func TestLinker(t *testing.T) {
	ctx := context.Background()
	for _, d := range linkerBackends(t) {
		t.Run(d.name, func(t *testing.T) {
			b := d.b
			idKey, personKey := peopleKeys(t)
			ann, bob := personKey("ann"), personKey("bob")
			// hostile identities: separators, braces, line breaks,
			// length-like prefixes and bytes that are not UTF-8.
			ids := []string{"tok-1", "+33 6 12:34", "{x}\n12:ab", "\xff\xfe", "3:abc"}
			var made []driver.Link
			for i, id := range ids {
				l, err := b.Link(ctx, idKey(id), ann, driver.Link{ID: id, Person: "ann", By: "ops", Reason: "r" + strconv.Itoa(i)})
				if err != nil {
					t.Fatalf("Link(%q) error: %v", id, err)
				}
				if l.Created.IsZero() || l.ID != id || l.Person != "ann" || l.By != "ops" {
					t.Fatalf("Link(%q) = %+v, want it as given with Created set", id, l)
				}
				got, err := b.LinkOf(ctx, idKey(id))
				if err != nil || got != l {
					t.Fatalf("LinkOf(%q) = %+v, %v, want %+v", id, got, err, l)
				}
				made = append(made, l)
			}
			p, err := b.Person(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Links) != len(ids) || len(p.Audit) != len(ids) {
				t.Fatalf("Person = %d links, %d events, want %d of each", len(p.Links), len(p.Audit), len(ids))
			}
			for i := range ids {
				// Links oldest first (ties by ID), events newest first.
				if !containsLink(p.Links, made[i]) {
					t.Errorf("Person's links lack %+v", made[i])
				}
				e := p.Audit[len(ids)-1-i]
				if e.Op != "link" || e.ID != ids[i] || e.By != "ops" || e.Reason != "r"+strconv.Itoa(i) || e.At.IsZero() {
					t.Errorf("Audit[%d] = %+v, want the link of %q", len(ids)-1-i, e, ids[i])
				}
			}
			for i := 1; i < len(p.Links); i++ {
				if p.Links[i].Created.Before(p.Links[i-1].Created) {
					t.Errorf("links not oldest first: %v before %v", p.Links[i-1].Created, p.Links[i].Created)
				}
			}

			// Another person: refused, nothing changes.
			if _, err := b.Link(ctx, idKey("tok-1"), bob, driver.Link{ID: "tok-1", Person: "bob", By: "x"}); !errors.Is(err, driver.ErrIdentityLinked) {
				t.Fatalf("Link to another person = %v, want ErrIdentityLinked", err)
			}
			if pb, _ := b.Person(ctx, bob); len(pb.Links)+len(pb.Audit) != 0 || pb.Zone != "" {
				t.Fatalf("Person(bob) after a refused link = %+v, want empty", pb)
			}
			// The same person again: By and Reason updated, Created kept.
			again, err := b.Link(ctx, idKey("tok-1"), ann, driver.Link{ID: "tok-1", Person: "ann", By: "lead", Reason: "moved"})
			if err != nil || !again.Created.Equal(made[0].Created) || again.By != "lead" {
				t.Fatalf("Link again = %+v, %v, want By lead and Created %v", again, err, made[0].Created)
			}
			if got, _ := b.LinkOf(ctx, idKey("tok-1")); got != again {
				t.Fatalf("LinkOf after Link again = %+v, want %+v", got, again)
			}

			// Unlink: from a person it is not listed under, not found.
			if err := b.Unlink(ctx, idKey("tok-1"), bob, "tok-1", "ops", "wrong"); !errors.Is(err, driver.ErrLinkNotFound) {
				t.Fatalf("Unlink under bob = %v, want ErrLinkNotFound", err)
			}
			if err := b.Unlink(ctx, idKey("tok-1"), ann, "tok-1", "ops", "gone"); err != nil {
				t.Fatalf("Unlink = %v", err)
			}
			if _, err := b.LinkOf(ctx, idKey("tok-1")); !errors.Is(err, driver.ErrLinkNotFound) {
				t.Fatalf("LinkOf after Unlink = %v, want ErrLinkNotFound", err)
			}
			if err := b.Unlink(ctx, idKey("tok-1"), ann, "tok-1", "ops", "twice"); !errors.Is(err, driver.ErrLinkNotFound) {
				t.Fatalf("Unlink twice = %v, want ErrLinkNotFound", err)
			}
			// Free again: bob may have it now.
			if _, err := b.Link(ctx, idKey("tok-1"), bob, driver.Link{ID: "tok-1", Person: "bob"}); err != nil {
				t.Fatalf("Link to bob after Unlink = %v", err)
			}

			// Zones: set, cleared, audited.
			if err := b.SetPersonZone(ctx, ann, "Europe/Paris", "ops", "moved"); err != nil {
				t.Fatal(err)
			}
			p, _ = b.Person(ctx, ann)
			if p.Zone != "Europe/Paris" || p.Audit[0].Op != "zone" || p.Audit[0].Zone != "Europe/Paris" || p.Audit[1].Op != "unlink" || p.Audit[1].ID != "tok-1" {
				t.Fatalf("Person after zone = zone %q, audit %+v", p.Zone, p.Audit[:2])
			}
			if len(p.Links) != len(ids)-1 {
				t.Fatalf("Person after Unlink = %d links, want %d", len(p.Links), len(ids)-1)
			}
			if err := b.SetPersonZone(ctx, ann, "", "ops", "cleared"); err != nil {
				t.Fatal(err)
			}
			if p, _ = b.Person(ctx, ann); p.Zone != "" || p.Audit[0].Zone != "" || p.Audit[0].Reason != "cleared" {
				t.Fatalf("Person after clearing = zone %q, audit %+v", p.Zone, p.Audit[0])
			}
			if p, err := b.Person(ctx, personKey("nobody")); err != nil || len(p.Links)+len(p.Audit) != 0 || p.Zone != "" {
				t.Fatalf("Person(nobody) = %+v, %v, want empty", p, err)
			}
		})
	}
}

func containsLink(ls []driver.Link, l driver.Link) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}

// TestLinkerBounds: a person has at most driver.MaxLinks identities and
// keeps its driver.MaxPersonEvents newest events.
func TestLinkerBounds(t *testing.T) {
	ctx := context.Background()
	b, _ := standalone(t)
	idKey, personKey := peopleKeys(t)
	pk := personKey("many")
	for i := range driver.MaxLinks {
		id := "id" + strconv.Itoa(i)
		if _, err := b.Link(ctx, idKey(id), pk, driver.Link{ID: id, Person: "many"}); err != nil {
			t.Fatalf("Link %d: %v", i, err)
		}
	}
	if _, err := b.Link(ctx, idKey("one-more"), pk, driver.Link{ID: "one-more", Person: "many"}); !errors.Is(err, driver.ErrTooManyLinks) {
		t.Fatalf("Link %d = %v, want ErrTooManyLinks", driver.MaxLinks+1, err)
	}
	if _, err := b.LinkOf(ctx, idKey("one-more")); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Fatalf("LinkOf a refused identity = %v, want ErrLinkNotFound", err)
	}
	// Linking a listed one again is no new identity.
	if _, err := b.Link(ctx, idKey("id0"), pk, driver.Link{ID: "id0", Person: "many", By: "again"}); err != nil {
		t.Fatalf("Link a listed identity at the bound = %v", err)
	}
	for i := range 3 {
		if err := b.SetPersonZone(ctx, pk, "UTC", "ops", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := b.Person(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Links) != driver.MaxLinks || len(p.Audit) != driver.MaxPersonEvents {
		t.Fatalf("Person = %d links, %d events, want %d and %d", len(p.Links), len(p.Audit), driver.MaxLinks, driver.MaxPersonEvents)
	}
	// 100 links, 1 relink, 3 zones: the newest 100 are kept.
	if p.Audit[0].Reason != "2" || p.Audit[3].By != "again" || p.Audit[99].ID != "id4" {
		t.Fatalf("Audit = first %+v, fourth %+v, last %+v; want the zones, the relink, then the link of id4", p.Audit[0], p.Audit[3], p.Audit[99])
	}
}

// TestLinkerClusterSteps: on a Cluster the two keys are in different
// slots, and a Link cut between its steps (the identity listed, idKey not
// yet set) leaves a listed link that does not resolve, which linking
// again repairs; a set step that finds the identity linked meanwhile
// takes its listing and event back.
func TestLinkerClusterSteps(t *testing.T) {
	ctx := context.Background()
	b, c := cluster(t)
	idKey, personKey := peopleKeys(t)
	ik, pk := idKey("dev"), personKey("pat")
	si, err1 := c.ClusterKeySlot(ctx, ik).Result()
	sp, err2 := c.ClusterKeySlot(ctx, pk).Result()
	if err := errors.Join(err1, err2); err != nil || si == sp {
		t.Fatalf("slots %d and %d (%v), want two", si, sp, err)
	}
	rest := encodeFields("dev", "pat", "ops", "cut")
	most := []string{strconv.Itoa(driver.MaxLinks), strconv.Itoa(driver.MaxPersonEvents)}
	if _, err := b.people(ctx, []string{pk}, "list", "dev", rest, encodeFields("link", "dev", "", "ops", "cut"), most[0], most[1]); err != nil {
		t.Fatal(err)
	}
	p, _ := b.Person(ctx, pk)
	if _, err := b.LinkOf(ctx, ik); len(p.Links) != 1 || !errors.Is(err, driver.ErrLinkNotFound) {
		t.Fatalf("after the first step: %d links listed, LinkOf = %v; want 1 listed, not resolving", len(p.Links), err)
	}
	l, err := b.Link(ctx, ik, pk, driver.Link{ID: "dev", Person: "pat", By: "ops", Reason: "repair"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.LinkOf(ctx, ik); err != nil || got != l || !got.Created.Equal(p.Links[0].Created) {
		t.Fatalf("LinkOf after repair = %+v, %v; want %+v created when first listed (%v)", got, err, l, p.Links[0].Created)
	}

	// The set step loses to another person: the listing and its event go.
	ik2 := idKey("dev2")
	rest2 := encodeFields("dev2", "pat", "ops", "lost")
	v, err := b.people(ctx, []string{pk}, "list", "dev2", rest2, encodeFields("link", "dev2", "", "ops", "lost"), most[0], most[1])
	if err != nil {
		t.Fatal(err)
	}
	a, _ := replyArray(v)
	created, n, fresh, err := listReply(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Link(ctx, ik2, personKey("other"), driver.Link{ID: "dev2", Person: "other"}); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf("%d %s", created, rest2)
	if v, err := b.people(ctx, []string{ik2}, "set", "pat", rec); err != nil || v != int64(0) {
		t.Fatalf("set step over another person's link = %v, %v, want 0", v, err)
	}
	if _, err := b.people(ctx, []string{pk}, "unlist", "dev2", rec, strconv.FormatInt(n, 10), strconv.FormatInt(fresh, 10)); err != nil {
		t.Fatal(err)
	}
	p, _ = b.Person(ctx, pk)
	if len(p.Links) != 1 || p.Links[0].ID != "dev" || p.Audit[0].Reason != "repair" {
		t.Fatalf("after the undo: links %+v, newest event %+v; want dev alone, the repair", p.Links, p.Audit[0])
	}
}

// TestLinkerInvalid: calls the stored format or the bounds cannot take
// fail before writing.
func TestLinkerInvalid(t *testing.T) {
	ctx := context.Background()
	b, _ := standalone(t)
	idKey, personKey := peopleKeys(t)
	long := string(make([]byte, driver.MaxIdentityLen+1))
	for _, tc := range []struct {
		name      string
		ik, pk    string
		id, owner string
	}{
		{"empty id key", "", personKey("p"), "i", "p"},
		{"same keys", personKey("p"), personKey("p"), "i", "p"},
		{"empty identity", idKey("i"), personKey("p"), "", "p"},
		{"long identity", idKey("i"), personKey("p"), long, "p"},
		{"empty person", idKey("i"), personKey("p"), "i", ""},
		{"long person", idKey("i"), personKey("p"), "i", long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.Link(ctx, tc.ik, tc.pk, driver.Link{ID: tc.id, Person: tc.owner}); err == nil {
				t.Fatalf("Link = nil error, want one")
			}
		})
	}
	if p, _ := b.Person(ctx, personKey("p")); len(p.Audit) != 0 {
		t.Fatalf("Person after refused links = %+v, want empty", p)
	}
}

// TestStoredFields: encodeFields and decodeStamped round-trip any bytes.
func TestStoredFields(t *testing.T) {
	fs := []string{"", "1:a", "a b\nc", "\xff", "12:"}
	got, err := parseEvent("42 " + encodeFields(fs...))
	if err != nil || got.At.UnixMicro() != 42 || got.Op != fs[0] || got.ID != fs[1] || got.Zone != fs[2] || got.By != fs[3] || got.Reason != fs[4] {
		t.Fatalf("parseEvent = %+v, %v, want %q at 42µs", got, err, fs)
	}
	for _, bad := range []string{"", "x 1:a", "1 9:a", "1 1:a", "1 a:b"} {
		if _, err := parseLink(bad); err == nil {
			t.Errorf("parseLink(%q) = nil error, want one", bad)
		}
	}
}
