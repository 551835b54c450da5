package sdk

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/sdk/driver"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// fakeLinker is a driver.Linker kept in maps by key, counting its reads:
// the sdk's side of the contract (keys, checks, the cache) is what these
// tests look at; the backends' Linkers have their own tests.
type fakeLinker struct {
	driver.Backend // never called
	mu             sync.Mutex
	links          map[string]driver.Link   // idKey ->
	persons        map[string]driver.Person // personKey ->
	reads          int
}

func newFakeLinker() *fakeLinker {
	return &fakeLinker{links: map[string]driver.Link{}, persons: map[string]driver.Person{}}
}

func (f *fakeLinker) Link(_ context.Context, idKey, personKey string, l driver.Link) (driver.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.links[idKey]; ok && cur.Person != l.Person {
		return driver.Link{}, driver.ErrIdentityLinked
	}
	l.Created = time.Unix(1, 0)
	f.links[idKey] = l
	p := f.persons[personKey]
	p.Links = append(p.Links, l)
	p.Audit = append([]driver.PersonEvent{{Op: "link", ID: l.ID, By: l.By, Reason: l.Reason}}, p.Audit...)
	f.persons[personKey] = p
	return l, nil
}

func (f *fakeLinker) Unlink(_ context.Context, idKey, personKey, id, by, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.links[idKey]; !ok || cur.ID != id {
		return driver.ErrLinkNotFound
	}
	delete(f.links, idKey)
	p := f.persons[personKey]
	p.Links = nil
	p.Audit = append([]driver.PersonEvent{{Op: "unlink", ID: id, By: by, Reason: reason}}, p.Audit...)
	f.persons[personKey] = p
	return nil
}

func (f *fakeLinker) LinkOf(_ context.Context, idKey string) (driver.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	l, ok := f.links[idKey]
	if !ok {
		return driver.Link{}, driver.ErrLinkNotFound
	}
	return l, nil
}

func (f *fakeLinker) Person(_ context.Context, personKey string) (driver.Person, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.persons[personKey], nil
}

func (f *fakeLinker) SetPersonZone(_ context.Context, personKey, zone, by, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.persons[personKey]
	p.Zone = zone
	p.Audit = append([]driver.PersonEvent{{Op: "zone", Zone: zone, By: by, Reason: reason}}, p.Audit...)
	f.persons[personKey] = p
	return nil
}

func (f *fakeLinker) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// noLinker is a backend that keeps no links.
type noLinker struct{ driver.Backend }

// TestPeopleKeys: an identity's and a person's keys hold their value
// escaped in their own hash tag, differ from each other and from every
// key of a subject of the same value, and a person's key shares its hash
// tag with the keys of a subject whose shard value is the person.
func TestPeopleKeys(t *testing.T) {
	if got, want := idKey("fc", "a:{b}\n"), "fc:{a%3A%7Bb%7D%0A}:!id"; got != want {
		t.Errorf("idKey = %q, want %q", got, want)
	}
	if got, want := personKey("app", "ann"), "app:{ann}:!person"; got != want {
		t.Errorf("personKey = %q, want %q", got, want)
	}
	p, err := NewPolicy("people", []Rule{FixedWindow("day", 3, 24*time.Hour).By("user")}, WithOverrides())
	if err != nil {
		t.Fatal(err)
	}
	ad := New(noLinker{}).Admin()
	seen := map[string]string{}
	for _, v := range []string{"ann", "!id", "!person", "ann}:!id", "x:y"} {
		kl := ad.KeyLayout(p, Subject{"user": v})
		keys := map[string]string{"id": idKey("fc", v), "person": personKey("fc", v), "trail": kl.Trail, "overrides": kl.Overrides, "reservations": kl.Reservations}
		for _, s := range kl.Sets {
			keys["set"] = s.Key
			for _, r := range s.Rules {
				keys["rule "+r.Rule] = r.Key
			}
		}
		for what, k := range keys {
			if prev, dup := seen[k]; dup {
				t.Errorf("key %q is both %s and %s", k, prev, what)
			}
			seen[k] = what + " of " + strconv.Quote(v)
		}
		if tag := hashTag(keys["person"]); tag != hashTag(kl.Trail) || tag != hashTag(keys["id"]) {
			t.Errorf("hash tags: person %q, id %q, subject %q; want one", tag, hashTag(keys["id"]), hashTag(kl.Trail))
		}
	}
}

// hashTag returns the part of k a Redis Cluster hashes.
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return k
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return k
	}
	return k[i+1 : i+1+j]
}

// TestAdminPeople: the Admin's link operations reach the backend with the
// sdk's keys and check their input first.
func TestAdminPeople(t *testing.T) {
	ctx := context.Background()
	f := newFakeLinker()
	ad := New(f, WithPrefix("app")).Admin()
	l, err := ad.Link(ctx, "+33 6 12 34 56 78", "ann", "ops", "same phone")
	if err != nil || l.Person != "ann" || l.Created.IsZero() {
		t.Fatalf("Link = %+v, %v, want ann's, created", l, err)
	}
	if _, ok := f.links[idKey("app", "+33 6 12 34 56 78")]; !ok {
		t.Fatalf("Link stored under %v, want the identity's key", f.links)
	}
	if got, err := ad.LinkOf(ctx, "+33 6 12 34 56 78"); err != nil || got != l {
		t.Fatalf("LinkOf = %+v, %v, want %+v", got, err, l)
	}
	if _, err := ad.Link(ctx, "+33 6 12 34 56 78", "bob", "ops", ""); !errors.Is(err, driver.ErrIdentityLinked) {
		t.Fatalf("Link to bob = %v, want ErrIdentityLinked", err)
	}
	if err := ad.SetPersonZone(ctx, "ann", "Europe/Paris", "ops", "moved"); err != nil {
		t.Fatal(err)
	}
	p, err := ad.Person(ctx, "ann")
	if err != nil || p.Zone != "Europe/Paris" || len(p.Links) != 1 || len(p.Audit) != 2 {
		t.Fatalf("Person = %+v, %v, want one link, the zone, two events", p, err)
	}
	if err := ad.Unlink(ctx, "+33 6 12 34 56 78", "ops", "sold"); err != nil {
		t.Fatal(err)
	}
	if p, _ := ad.Person(ctx, "ann"); p.Audit[0].Op != "unlink" || p.Audit[0].Reason != "sold" {
		t.Fatalf("Person after Unlink = %+v, want the unlink audited under ann", p)
	}
	if err := ad.Unlink(ctx, "+33 6 12 34 56 78", "ops", "again"); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Fatalf("Unlink again = %v, want ErrLinkNotFound", err)
	}
	if _, err := ad.LinkOf(ctx, "+33 6 12 34 56 78"); !errors.Is(err, driver.ErrLinkNotFound) {
		t.Fatalf("LinkOf after Unlink = %v, want ErrLinkNotFound", err)
	}
}

// TestAdminPeopleInvalid: every bad input is refused before the backend
// is called, with an error naming the field and never the value.
func TestAdminPeopleInvalid(t *testing.T) {
	ctx := context.Background()
	secret := "secret-ID"
	long := secret + strings.Repeat("x", driver.MaxIdentityLen)
	cases := []struct {
		name     string
		id, pers string
		zone     string
		by, why  string
		want     error
	}{
		{"empty identity", "", "ann", "", "", "", ErrInvalidIdentity},
		{"long identity", long, "ann", "", "", "", ErrInvalidIdentity},
		{"identity not UTF-8", secret + "\xff", "ann", "", "", "", ErrInvalidIdentity},
		{"identity with a line break", secret + "\n", "ann", "", "", "", ErrInvalidIdentity},
		{"empty person", "tok", "", "", "", "", ErrInvalidIdentity},
		{"long person", "tok", long, "", "", "", ErrInvalidIdentity},
		{"person with a tab", "tok", secret + "\t", "", "", "", ErrInvalidIdentity},
		{"long by", "tok", "ann", "", strings.Repeat("b", driver.MaxOverrideByLen+1), "", ErrInvalidIdentity},
		{"long reason", "tok", "ann", "", "", strings.Repeat("r", driver.MaxOverrideReasonLen+1), ErrInvalidIdentity},
		{"reason with a line break", "tok", "ann", "", "", "a\nb", ErrInvalidIdentity},
		{"zone Local", "tok", "ann", "Local", "", "", ErrInvalidZone},
		{"unknown zone", "tok", "ann", "Mars/Olympus", "", "", ErrInvalidZone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeLinker()
			ad := New(f).Admin()
			var err error
			if tc.zone != "" {
				err = ad.SetPersonZone(ctx, tc.pers, tc.zone, tc.by, tc.why)
			} else {
				_, err = ad.Link(ctx, tc.id, tc.pers, tc.by, tc.why)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q holds the value", err)
			}
			if len(f.links)+len(f.persons) != 0 {
				t.Fatalf("backend written: %v %v", f.links, f.persons)
			}
		})
	}
}

// TestAdminPeopleUnsupported: a backend without driver.Linker, and no
// backend at all, are errors, the first wrapping errors.ErrUnsupported.
func TestAdminPeopleUnsupported(t *testing.T) {
	ctx := context.Background()
	ad := New(noLinker{}).Admin()
	l := New(noLinker{})
	for name, err := range map[string]error{
		"Link":          func() error { _, err := ad.Link(ctx, "a", "b", "", ""); return err }(),
		"Unlink":        ad.Unlink(ctx, "a", "", ""),
		"LinkOf":        func() error { _, err := ad.LinkOf(ctx, "a"); return err }(),
		"Person":        func() error { _, err := ad.Person(ctx, "a"); return err }(),
		"SetPersonZone": ad.SetPersonZone(ctx, "a", "UTC", "", ""),
		"personOf":      func() error { _, _, err := l.personOf(ctx, "a"); return err }(),
	} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s = %v, want errors.ErrUnsupported", name, err)
		}
	}
	if _, err := (&Admin{}).Link(ctx, "a", "b", "", ""); !errors.Is(err, errNilBackend) {
		t.Errorf("Link without a backend = %v, want errNilBackend", err)
	}
}

// TestPersonOf: an identity resolves to its person and the person's
// stored zone, read at most once per PeopleCacheTTL; this Limiter's Admin
// changes are seen at once, another Limiter's within the TTL.
func TestPersonOf(t *testing.T) {
	ctx := context.Background()
	f := newFakeLinker()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l := New(f, WithClock(clk))
	other := New(f, WithClock(clk)).Admin()
	paris, err := LoadZone("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		person string
		zone   *time.Location
		reads  int // the backend's reads so far
	}
	check := func(step, identity string, w want) {
		t.Helper()
		p, z, err := l.personOf(ctx, identity)
		if err != nil || p != w.person || z != w.zone || f.readCount() != w.reads {
			t.Fatalf("%s: personOf(%q) = %q, %v, %v after %d reads; want %q, %v after %d", step, identity, p, z, err, f.readCount(), w.person, w.zone, w.reads)
		}
	}
	check("unlinked", "tok", want{"tok", nil, 2})
	check("cached", "tok", want{"tok", nil, 2})
	if _, err := other.Link(ctx, "tok", "ann", "ops", ""); err != nil {
		t.Fatal(err)
	}
	if err := other.SetPersonZone(ctx, "ann", "Europe/Paris", "ops", ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(PeopleCacheTTL - time.Millisecond)
	check("another Limiter's link, within the TTL", "tok", want{"tok", nil, 2})
	clk.Advance(time.Millisecond)
	check("another Limiter's link, at the TTL", "tok", want{"ann", paris, 4})

	ad := l.Admin()
	if err := ad.SetPersonZone(ctx, "ann", "", "ops", ""); err != nil {
		t.Fatal(err)
	}
	check("this Limiter's zone change", "tok", want{"ann", nil, 6})
	if err := ad.Unlink(ctx, "tok", "ops", ""); err != nil {
		t.Fatal(err)
	}
	check("this Limiter's unlink", "tok", want{"tok", nil, 9}) // Unlink read the link once
	if _, err := ad.Link(ctx, "tok", "bob", "ops", ""); err != nil {
		t.Fatal(err)
	}
	check("this Limiter's link", "tok", want{"bob", nil, 11})
	check("an identity no link accepts", "bad\n", want{"bad\n", nil, 11})
}

// TestPeopleCacheBound: the cache holds at most PeopleCacheSize
// identities (PeopleCacheSize/peopleShards per shard), expired ones
// leaving first.
func TestPeopleCacheBound(t *testing.T) {
	var c people
	now := time.Unix(100, 0)
	s := c.shard("fresh")
	for i := 0; len(s.m) < PeopleCacheSize/peopleShards; i++ {
		c.put("id"+strconv.Itoa(i), personEntry{person: "p", until: now.Add(PeopleCacheTTL)}, now)
	}
	c.put("one more", personEntry{person: "p", until: now.Add(PeopleCacheTTL)}, now)
	for i := range c.shards {
		if n := len(c.shards[i].m); n > PeopleCacheSize/peopleShards {
			t.Fatalf("shard %d holds %d, want <= %d", i, n, PeopleCacheSize/peopleShards)
		}
	}
	later := now.Add(PeopleCacheTTL)
	c.put("fresh", personEntry{person: "q", until: later.Add(PeopleCacheTTL)}, later)
	if len(s.m) != 1 {
		t.Fatalf("full shard after a put past the TTL holds %d, want the fresh one alone", len(s.m))
	}
	if e, ok := c.get("fresh", later); !ok || e.person != "q" {
		t.Fatalf("get(fresh) = %+v, %v", e, ok)
	}
}

// TestPersonOfMemory: the same resolution on the memory backend's Linker
// (sdk's keys, the backend's clock for Created).
func TestPersonOfMemory(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
	l := New(memory.New(&memory.Options{Clock: clk}))
	ad := l.Admin()
	lk, err := ad.Link(ctx, "ann@example.com", "ann", "ops", "verified")
	if err != nil || !lk.Created.Equal(clk.Now()) {
		t.Fatalf("Link = %+v, %v, want Created at the backend's clock", lk, err)
	}
	if err := ad.SetPersonZone(ctx, "ann", "Europe/Lisbon", "ops", "lives there"); err != nil {
		t.Fatal(err)
	}
	lisbon, _ := LoadZone("Europe/Lisbon")
	for _, tc := range []struct {
		identity, person string
		zone             *time.Location
	}{
		{"ann@example.com", "ann", lisbon},
		{"ann", "ann", lisbon},
		{"bob@example.com", "bob@example.com", nil},
	} {
		p, z, err := l.personOf(ctx, tc.identity)
		if err != nil || p != tc.person || z != tc.zone {
			t.Errorf("personOf(%q) = %q, %v, %v; want %q, %v", tc.identity, p, z, err, tc.person, tc.zone)
		}
	}
	p, err := ad.Person(ctx, "ann")
	if err != nil || len(p.Links) != 1 || p.Zone != "Europe/Lisbon" || len(p.Audit) != 2 || p.Audit[0].Op != "zone" {
		t.Fatalf("Person(ann) = %+v, %v", p, err)
	}
}
