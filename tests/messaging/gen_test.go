package messaging_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The simulated span: the 14 days from Monday 2026-03-23 00:00 UTC, the
// 14-day window of 2026 holding the most DST changes of both directions
// among the zones below (TestWindow shows it).
var (
	simStart = time.Date(2026, 3, 23, 0, 0, 0, 0, time.UTC)
	simDays  = 14
	simEnd   = simStart.AddDate(0, 0, simDays)
)

// zoneNames are the recipients' zones: eight that spring forward in the
// span (one by two hours, Troll; one at midnight, Beirut; Nuuk's day
// losing its last hour), seven that fall back (Lord Howe by 30 minutes,
// Chatham at :45, Santiago from 24:00 to 23:00), and five without a change
// in it (New York changed on March 8; Kolkata and Kathmandu at :30 and :45).
var zoneNames = [20]string{
	"Europe/London", "Europe/Berlin", "Europe/Athens", "Asia/Jerusalem",
	"Asia/Beirut", "America/Nuuk", "Antarctica/Troll", "Atlantic/Azores",
	"America/Santiago", "Pacific/Easter", "Australia/Sydney", "Australia/Adelaide",
	"Australia/Lord_Howe", "Pacific/Auckland", "Pacific/Chatham",
	"UTC", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo",
}

// Message classes and campaigns of the simulated sender.
const (
	classOTP      = "otp"      // exempt from every rule, counted; passes quiet hours
	classSecurity = "security" // exempt from every rule, not counted
	classAlert    = "alert"    // passes quiet hours
)

// recipient is one person: their zone and identities (device tokens, a
// phone number, an e-mail address), each linked to the person
// (Admin.Link), whether the zone is stored with the person
// (Admin.SetPersonZone) instead of given with each attempt, and whether
// they get heavy traffic.
type recipient struct {
	person string
	zone   *time.Location
	ids    []string
	stored bool
	heavy  bool
}

// attempt is one send the simulated sender makes.
type attempt struct {
	at       time.Time // whole milliseconds
	r        int       // recipient index
	id       int       // identity index
	class    string
	priority int
	campaign string
	content  string
	// defer is how many times the sender defers the attempt to its
	// NextEligible when denied.
	defers int
}

// world is the generated recipients and attempts, in time order.
type world struct {
	recipients []recipient
	attempts   []attempt
}

// generate builds the world of seed: deterministic for a seed and the
// zone database.
func generate(seed uint64, recipients int) (world, error) {
	rng := rand.New(rand.NewPCG(seed, 37))
	var w world
	for i := range recipients {
		loc, err := time.LoadLocation(zoneNames[i%len(zoneNames)])
		if err != nil {
			return world{}, err
		}
		rc := recipient{person: fmt.Sprintf("p%03d", i), zone: loc, stored: i%4 == 1, heavy: i%7 == 0}
		n := 1
		if i%3 == 0 {
			n = 2 + rng.IntN(2) // a third have 2 or 3 identities
		}
		for k := range n {
			rc.ids = append(rc.ids, fmt.Sprintf("token-%d-%d", i, k))
		}
		w.recipients = append(w.recipients, rc)
	}
	for ri, rc := range w.recipients {
		w.attempts = append(w.attempts, recipientAttempts(rng, ri, rc)...)
	}
	slices.SortStableFunc(w.attempts, func(a, b attempt) int { return a.at.Compare(b.at) })
	return w, nil
}

// recipientAttempts is one recipient's traffic over the span.
func recipientAttempts(rng *rand.Rand, ri int, rc recipient) []attempt {
	var out []attempt
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
	add := func(at time.Time, class string, pri int, campaign, content string, defers int) {
		if at.Before(simStart) || !at.Before(simEnd) {
			return
		}
		out = append(out, attempt{at: ms(at), r: ri, id: rng.IntN(len(rc.ids)), class: class,
			priority: pri, campaign: campaign, content: content, defers: defers})
	}
	anytime := func(day time.Time) time.Time {
		return day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
	}
	for d := range simDays {
		day := simStart.AddDate(0, 0, d)
		// Promotions: priority 0 mostly, some at 1; a fifth deferred once.
		promos := rng.IntN(3)
		if rc.heavy {
			promos = 5 + rng.IntN(6)
		}
		for range promos {
			camp := fmt.Sprintf("c%d", rng.IntN(4))
			content := fmt.Sprintf("%s-v%d", camp, rng.IntN(2))
			pri := 0
			if rng.IntN(5) == 0 {
				pri = 1
			}
			at := anytime(day)
			add(at, "", pri, camp, content, b2i(rng.IntN(5) == 0))
			if rng.IntN(3) == 0 { // the same content again soon
				add(at.Add(time.Duration(rng.Int64N(int64(80*time.Second)))), "", pri, camp, content, 0)
			}
		}
		// Bursts: a heavy recipient's fan-outs of 10 to 30 sends of many
		// campaigns in 40 s.
		for range rng.IntN(2) * b2i(rc.heavy) {
			at := anytime(day)
			for range 10 + rng.IntN(21) {
				camp := fmt.Sprintf("b%d", rng.IntN(40))
				add(at.Add(time.Duration(rng.Int64N(int64(40*time.Second)))), "", rng.IntN(2), camp, camp+"-burst", 0)
			}
			if rng.IntN(3) == 0 { // a security notice in the thick of it
				add(at.Add(40*time.Second), classSecurity, 3, "security", "security", 0)
			}
		}
		// Alerts: priority 2, passing quiet hours; deferred twice.
		if rng.IntN(3) == 0 {
			add(anytime(day), classAlert, 2, "alerts", fmt.Sprintf("alert-%d", rng.IntN(3)), 2)
		}
		// One-time passwords: a user asking again and again.
		if rng.IntN(4) == 0 {
			at := anytime(day)
			for k := range 1 + rng.IntN(4) {
				add(at.Add(time.Duration(k)*time.Duration(20+rng.IntN(40))*time.Second), classOTP, 2, "otp", fmt.Sprintf("otp-%d", rng.IntN(1e6)), 0)
			}
		}
		// Security notices: rare, priority 3.
		if rng.IntN(10) == 0 {
			add(anytime(day), classSecurity, 3, "security", "security", 1)
		}
	}
	// Edges in the recipient's local time, on one day of the span (by
	// recipient: all kinds of days): the ends of quiet hours and of the
	// local day, a millisecond apart, and the instants of the zone's DST
	// change in the span.
	{
		// The days of the changes (Mar 27 to 29, Apr 4 and 5) and two
		// others.
		d := [...]int{4, 5, 6, 12, 13, 9}[ri%6]
		y, m, dd := simStart.AddDate(0, 0, d).Date()
		for _, hm := range [][2]int{{8, 0}, {21, 0}, {0, 0}} {
			edge := time.Date(y, m, dd, hm[0], hm[1], 0, 0, rc.zone)
			for _, off := range []time.Duration{-time.Millisecond, 0} {
				add(edge.Add(off), "", rng.IntN(2), "edges", fmt.Sprintf("edge-%d", rng.IntN(2)), 1)
			}
		}
	}
	if _, end := simStart.In(rc.zone).ZoneBounds(); !end.IsZero() && end.Before(simEnd) {
		for _, off := range []time.Duration{-time.Millisecond, 0, time.Hour - time.Millisecond, time.Hour} {
			add(end.Add(off), "", 1, "dst", "dst", 1)
			add(end.Add(off), classAlert, 2, "alerts", "dst-alert", 0)
		}
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// changes returns the DST (offset) changes of loc in [from, to): +1 for
// each that moves the clock forward, -1 for each back.
func changes(loc *time.Location, from, to time.Time) []int {
	var out []int
	for u := from; ; {
		_, end := u.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			return out
		}
		_, before := end.Add(-time.Second).In(loc).Zone()
		_, after := end.In(loc).Zone()
		if after > before {
			out = append(out, 1)
		} else if after < before {
			out = append(out, -1)
		}
		u = end
	}
}

// TestWindow checks what the package doc says of the span: the first eight
// zones spring forward once in it, the next seven fall back once, the last
// five do not change, and no other 14-day window of 2026 (from a UTC
// midnight) holds more changes of these zones.
func TestWindow(t *testing.T) {
	count := func(from time.Time) (n int) {
		for _, name := range zoneNames {
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Fatal(err)
			}
			n += len(changes(loc, from, from.AddDate(0, 0, simDays)))
		}
		return n
	}
	for i, name := range zoneNames {
		loc, _ := time.LoadLocation(name)
		want := []int{1}
		switch {
		case i >= 15:
			want = nil
		case i >= 8:
			want = []int{-1}
		}
		if got := changes(loc, simStart, simEnd); !slices.Equal(got, want) {
			t.Errorf("%s: changes in the span %v, want %v", name, got, want)
		}
	}
	n := count(simStart)
	for d := range 365 {
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, d)
		if m := count(from); m > n {
			t.Errorf("the 14 days from %s hold %d changes, the span's %d", from.Format(time.DateOnly), m, n)
		}
	}
}
