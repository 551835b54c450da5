package redis

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// seedRules are the seed policy's shape on subject s for content x: two
// logs over the subject alone (the root set, key s.base+"="), two over
// the subject and a content (a set nested in the root's value).
func seedRules(s subject, content string) []driver.Rule {
	rs := []driver.Rule{
		s.log("recv-1m", 15, time.Minute), s.log("recv-24h", 50, 24*time.Hour),
		s.log("content-59s", 2, 59*time.Second), s.log("content-59m", 5, 59*time.Minute),
	}
	for i := range rs {
		rs[i].Group = s.base + "="
		if i >= 2 {
			rs[i].Key, rs[i].Group = s.key(rs[i].Name, content), s.base+"=content:"+content
		}
	}
	return rs
}

// subjectKeys returns the keys under s.base.
func subjectKeys(t *testing.T, b *Backend, s subject) []string {
	t.Helper()
	keys, err := b.c.Keys(context.Background(), strings.ReplaceAll(strings.ReplaceAll(s.base, "{", `\{`), "}", `\}`)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// sections returns the ids of the sections in the root value of s.
func sections(t *testing.T, b *Backend, s subject) []string {
	t.Helper()
	var ids []string
	for _, e := range packedAt(t, b.c, s.base+"=") {
		if e.Section != nil {
			ids = append(ids, e.Tag)
		}
	}
	return ids
}

// TestNestedOneKey: the seed policy keeps a subject's state in one key,
// whatever the contents: the user's, holding each content's state as a
// section (sectionID of the content set's key, as the scripts compute
// it), through the fast script and through take.lua alike; the content
// sets' own keys are never written.
func TestNestedOneKey(t *testing.T) {
	for _, slow := range []bool{false, true} {
		b, _ := plainStandalone(t)
		b.noFast = slow
		s := newSubject(t, "u")
		for _, c := range []string{"x", "y", "x"} {
			req := s.request(opTake, 1, seedRules(s, c)...)
			req.TrailKey = ""
			if fast := decidingScript(t, b, req) != takeScript.Hash(); fast == slow {
				t.Fatalf("slow=%v: the fast script decides: %v", slow, fast)
			}
			if res := take(t, b, req); !res.Allowed {
				t.Fatalf("take %s: %+v", c, res)
			}
		}
		if keys := subjectKeys(t, b, s); !slices.Equal(keys, []string{s.base + "="}) {
			t.Fatalf("slow=%v: keys %q, want the root's alone", slow, keys)
		}
		want := []string{sectionID(s.base + "=content:x"), sectionID(s.base + "=content:y")}
		if got := sections(t, b, s); !slices.Equal(got, want) && !slices.Equal(got, []string{want[1], want[0]}) {
			t.Errorf("slow=%v: sections %q, want %q", slow, got, want)
		}
		res := take(t, b, s.request(opPeek, 1, seedRules(s, "x")...))
		for i, want := range []int64{3, 3, 2, 2} {
			if res.Rules[i].Used != want {
				t.Errorf("slow=%v: rule %d used %d, want %d", slow, i, res.Rules[i].Used, want)
			}
		}
		if e, ok := logOf(t, b.c, seedRules(s, "y")[2]); !ok || len(e.Ints) != 3 {
			t.Errorf("slow=%v: content y's log %+v (%v), want one record", slow, e, ok)
		}
	}
}

// TestNestedRootless: a policy with rules on nested sets alone keeps them
// in the root's key all the same, so rules over the shard dimensions
// added to it later (or removed) leave the nested sets' counts where they
// are: a policy change moves no state.
func TestNestedRootless(t *testing.T) {
	for _, slow := range []bool{false, true} {
		b, _ := plainStandalone(t)
		b.noFast = slow
		s := newSubject(t, "u")
		rules := seedRules(s, "x")
		take(t, b, s.request(opTake, 1, rules[2:]...))
		if keys := subjectKeys(t, b, s); !slices.Equal(keys, []string{s.base + "="}) {
			t.Fatalf("slow=%v: keys %q, want the root's alone", slow, keys)
		}
		res := take(t, b, s.request(opTake, 1, rules...))
		for i, want := range []int64{1, 1, 2, 2} {
			if res.Rules[i].Used != want {
				t.Errorf("slow=%v: root rules added: rule %d used %d, want %d", slow, i, res.Rules[i].Used, want)
			}
		}
		res = take(t, b, s.request(opPeek, 1, rules[2:]...))
		for i, want := range []int64{2, 2} {
			if res.Rules[i].Used != want {
				t.Errorf("slow=%v: root rules removed: rule %d used %d, want %d", slow, i+2, res.Rules[i].Used, want)
			}
		}
	}
}

// TestNestedReset: a reset of the subject alone keeps its contents'
// counts (the sections), a reset of one content keeps the subject's and
// the other contents', as the memory backend keeps them per rule; a root
// holding nothing more is deleted.
func TestNestedReset(t *testing.T) {
	b, _ := plainStandalone(t)
	s := newSubject(t, "u")
	ctx := context.Background()
	for _, c := range []string{"x", "y"} {
		take(t, b, s.request(opTake, 1, seedRules(s, c)...))
	}
	used := func(c string) []int64 {
		res := take(t, b, s.request(opPeek, 1, seedRules(s, c)...))
		var out []int64
		for _, r := range res.Rules {
			out = append(out, r.Used)
		}
		return out
	}
	if err := b.Reset(ctx, driver.Request{Rules: seedRules(s, "x")[:2]}); err != nil {
		t.Fatal(err)
	}
	if got := used("x"); !slices.Equal(got, []int64{0, 0, 1, 1}) {
		t.Errorf("after a reset of the subject: used %v, want [0 0 1 1]", got)
	}
	take(t, b, s.request(opTake, 1, seedRules(s, "x")...))
	if err := b.Reset(ctx, driver.Request{Rules: seedRules(s, "x")[2:]}); err != nil {
		t.Fatal(err)
	}
	if got := used("x"); !slices.Equal(got, []int64{1, 1, 0, 0}) {
		t.Errorf("after a reset of content x: used %v, want [1 1 0 0]", got)
	}
	if got := used("y"); !slices.Equal(got, []int64{1, 1, 1, 1}) {
		t.Errorf("content y after a reset of content x: used %v, want [1 1 1 1]", got)
	}
	if err := b.Reset(ctx, driver.Request{Rules: seedRules(s, "y"), ReservationKey: s.reservations()}); err != nil {
		t.Fatal(err)
	}
	if keys := subjectKeys(t, b, s); len(keys) > 1 || len(keys) == 1 && keys[0] != s.trail() {
		t.Errorf("after resetting everything: keys %q", keys)
	}
}

// TestNestedReservation: a reservation's units in a nested set are given
// back into its section by a cancel and by a lapse.
func TestNestedReservation(t *testing.T) {
	b, _ := plainStandalone(t)
	s := newSubject(t, "u")
	ctx := context.Background()
	take(t, b, s.request(opTake, 1, seedRules(s, "y")...))
	hold := s.request(opReserve, 2, seedRules(s, "x")...)
	hold.ReservationID, hold.ReservationTTL = "h1", 5*time.Second // lapses before the entries expire
	if res := take(t, b, hold); !res.Allowed {
		t.Fatalf("reserve: %+v", res)
	}
	if err := b.Cancel(ctx, s.reservations(), "h1"); err != nil {
		t.Fatal(err)
	}
	// The section outlives its entries (seen: a refund gave it the hold
	// marker's expiry, and the next write dropped it with its counts).
	for _, e := range packedAt(t, b.c, s.base+"=") {
		for _, se := range e.Section {
			if se.Expiry > e.Expiry {
				t.Errorf("after the cancel: section %q expires at %d, before its entry %q (%d)", e.Tag, e.Expiry, se.Tag, se.Expiry)
			}
		}
	}
	res := take(t, b, s.request(opPeek, 1, seedRules(s, "x")...))
	for i, want := range []int64{1, 1, 0, 0} {
		if res.Rules[i].Used != want {
			t.Errorf("after the cancel: rule %d used %d, want %d", i, res.Rules[i].Used, want)
		}
	}
	hold.ReservationID, hold.ReservationTTL = "h2", 30*time.Millisecond
	if res := take(t, b, hold); !res.Allowed {
		t.Fatalf("reserve: %+v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res = take(t, b, s.request(opPeek, 1, seedRules(s, "x")...))
		if res.Rules[2].Used == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the server's clock must pass the lapse
	}
	for i, want := range []int64{1, 1, 0, 0} {
		if res.Rules[i].Used != want {
			t.Errorf("after the lapse: rule %d used %d, want %d", i, res.Rules[i].Used, want)
		}
	}
	if got := take(t, b, s.request(opPeek, 1, seedRules(s, "y")...)); got.Rules[2].Used != 1 {
		t.Errorf("content y: used %d, want 1", got.Rules[2].Used)
	}
}

// TestNestedUpgrade: under Options.Upgrade a nested set without its
// section yet is read from its own key (the layout before nesting), which
// goes once the section is written; without it, the set starts afresh.
func TestNestedUpgrade(t *testing.T) {
	for _, upgrade := range []bool{false, true} {
		b, _ := plainStandalone(t)
		b.opts.Upgrade = upgrade
		s := newSubject(t, "u")
		rules := seedRules(s, "x")
		// The layout before nesting: the content set's value at its own
		// key (taken nested, moved there).
		take(t, b, s.request(opTake, 1, rules[2:]...))
		es := packedOf(t, b.c, rules[2].Group)
		if len(es) != 2 || packedAt(t, b.c, rules[2].Group) != nil {
			t.Fatalf("the content set's section: %+v", es)
		}
		putPacked(t, b.c, rules[2].Group, es...)
		if err := b.c.Del(context.Background(), s.base+"=").Err(); err != nil {
			t.Fatal(err)
		}
		res := take(t, b, s.request(opTake, 1, rules...))
		want := int64(1)
		if upgrade {
			want = 2
		}
		if res.Rules[2].Used != want || res.Rules[3].Used != want {
			t.Errorf("upgrade=%v: used %d, %d, want %d", upgrade, res.Rules[2].Used, res.Rules[3].Used, want)
		}
		if n, _ := b.c.Exists(context.Background(), rules[2].Group).Result(); upgrade && n != 0 {
			t.Errorf("upgrade: the content set's own key is still there")
		}
	}
}

// TestNestedSectionExpires: a section whose entries expired goes when the
// root's value is next written; the others stay.
func TestNestedSectionExpires(t *testing.T) {
	b, _ := plainStandalone(t)
	s := newSubject(t, "u")
	short := func(c string) []driver.Rule {
		rs := seedRules(s, c)
		rs[2].Window, rs[3].Window = 50*time.Millisecond, 60*time.Millisecond
		return rs
	}
	take(t, b, s.request(opTake, 1, short("x")...))
	deadline := time.Now().Add(10 * time.Second)
	for {
		take(t, b, s.request(opTake, 1, short("y")...))
		if len(sections(t, b, s)) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the server's clock must pass x's expiry
	}
	if got := sections(t, b, s); !slices.Equal(got, []string{sectionID(s.base + "=content:y")}) {
		t.Errorf("sections %q, want content y's alone", got)
	}
}
