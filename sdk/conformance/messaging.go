package conformance

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/driver"
)

// The messaging cases (issue 37): message classes exempt counted or not,
// from every rule or some, priority headroom on every counting
// algorithm, quiet hours in the attempt's zone, their precedence with
// overrides, replays and batches, and the next eligible time.

// msg decides a for the test's subject under p (op: take or peek).
func (e *env) msg(label string, p *sdk.Policy, a sdk.Attempt, o op) sdk.Decision {
	e.t.Helper()
	if a.Subject == nil {
		a.Subject = e.subject()
	}
	var d sdk.Decision
	var err error
	if o == peek {
		d, err = e.lim.Peek(bg(), p, a)
	} else {
		d, err = e.lim.Take(bg(), p, a)
	}
	if err != nil {
		e.t.Fatalf("%s = error %v, want a decision", label, err)
	}
	if len(d.Rules) != len(p.Rules()) {
		e.t.Fatalf("%s = %d rule decisions, want %d", label, len(d.Rules), len(p.Rules()))
	}
	return d
}

// classes are the classes of the messaging cases, over rules a and b.
var classes = []sdk.Class{
	{Name: "otp", AllRules: true, Counted: true, QuietHours: true},
	{Name: "security", AllRules: true},
	{Name: "receipt", Rules: []string{"a"}, Counted: true},
	{Name: "alert", QuietHours: true},
}

func exemptCounted(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	a, b := e.fixed("a", 2, w), e.log("b", 3, w)
	p := e.policyWith([]sdk.PolicyOption{sdk.WithClass(classes...)}, a, b)
	for i := 1; i <= 2; i++ {
		e.msg(fmt.Sprintf("Take #%d", i), p, sdk.Attempt{}, take)
	}
	if d := e.msg("Take #3", p, sdk.Attempt{}, take); d.Allowed || !slices.Equal(d.Denied, []string{"a"}) {
		e.t.Fatalf("Take #3 = allowed %t, denied %v, want denied by a", d.Allowed, d.Denied)
	}
	d := e.msg("Take otp", p, sdk.Attempt{Class: "otp"}, take)
	if !d.Allowed || d.Class != "otp" || !slices.Equal(d.Exempted, []string{"a"}) || len(d.Denied) != 0 ||
		d.Rules[0].Used != 3 || d.Rules[1].Used != 3 || d.Rules[0].Exempt != driver.ExemptCounted || d.Rules[0].Allowed || !d.NextEligible.IsZero() {
		e.t.Errorf("Take otp = allowed %t, class %q, exempted %v, denied %v, rules %s (exempt %v), next %v, want allowed past a (counted: a 3/2, b 3/3), a named exempted",
			d.Allowed, d.Class, d.Exempted, d.Denied, fmtRules(d.Rules), d.Rules[0].Exempt, d.NextEligible)
	}
	d = e.msg("Take after the otp", p, sdk.Attempt{}, take)
	if d.Allowed || !slices.Equal(d.Denied, []string{"a", "b"}) {
		e.t.Errorf("Take after the otp = allowed %t, denied %v, want denied by a and b: the otp counted", d.Allowed, d.Denied)
	}
	if !e.has(inspector) {
		return
	}
	_, tr := e.inspect(a, b)
	var ex int
	for _, x := range tr {
		if x.Exempt {
			ex++
			if x.Rule != "a" || x.Class != "otp" || x.Shadow || x.Quiet {
				e.t.Errorf("exempt trail entry %+v, want rule a, class otp", x)
			}
		}
	}
	if ex != 1 {
		e.t.Errorf("trail = %+v, want one entry marked Exempt (the otp past a)", tr)
	}
}

func exemptUncounted(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	a, b := e.fixed("a", 2, w), e.cells("b", 3, w, 4)
	p := e.policyWith([]sdk.PolicyOption{sdk.WithClass(classes...)}, a, b)
	e.msg("Take", p, sdk.Attempt{Cost: 2}, take)
	d := e.msg("Take security", p, sdk.Attempt{Class: "security"}, take)
	if !d.Allowed || !slices.Equal(d.Exempted, []string{"a"}) || d.Rules[0].Used != 2 || d.Rules[1].Used != 2 || d.Rules[1].Exempt != driver.ExemptUncounted {
		e.t.Errorf("Take security = allowed %t, exempted %v, rules %s, want allowed, not counted (a 2, b 2)", d.Allowed, d.Exempted, fmtRules(d.Rules))
	}
	// receipt: exempt from a only, counted; b still decides.
	d = e.msg("Take receipt", p, sdk.Attempt{Class: "receipt", Cost: cellScale}, take)
	if !d.Allowed || d.Rules[0].Used != 2+cellScale || d.Rules[1].Used != 2+cellScale || d.Rules[1].Exempt != driver.NotExempt {
		e.t.Errorf("Take receipt = allowed %t, rules %s, want allowed past a, counted by a and b", d.Allowed, fmtRules(d.Rules))
	}
	d = e.msg("Take receipt past b", p, sdk.Attempt{Class: "receipt", Cost: 3 * cellScale}, take)
	if d.Allowed || !slices.Equal(d.Denied, []string{"b"}) || !slices.Equal(d.Exempted, []string{"a"}) {
		e.t.Errorf("Take receipt past b = allowed %t, denied %v, exempted %v, want denied by b, a exempted", d.Allowed, d.Denied, d.Exempted)
	}
	if _, err := e.lim.Take(bg(), p, sdk.Attempt{Subject: e.subject(), Class: "nope"}); !errors.Is(err, sdk.ErrInvalidClass) {
		e.t.Errorf("Take of an undeclared class = %v, want ErrInvalidClass", err)
	}
}

// headroomOn: limit 5 keeping 2 for priority 1 and 1 more for priority 3
// (tiers {1 2} {3 1}), on one rule of an algorithm: priority 0 stops at
// 3, priority 1 and 2 at 4, priority 3 at 5. scale multiplies limits and
// costs (cells).
func headroomOn(mk func(e *env, limit int64) sdk.Rule, scale int64) func(e *env) {
	return func(e *env) {
		w := time.Hour
		e.ensureRoom(w, 10*time.Second)
		r := mk(e, 5*scale).WithHeadroom(2*scale, 1).WithHeadroom(scale, 3)
		p := e.policyWith(nil, r)
		for i := int64(1); i <= 3; i++ {
			if d := e.msg(fmt.Sprintf("Take p0 #%d", i), p, sdk.Attempt{Cost: scale}, take); !d.Allowed {
				e.t.Fatalf("Take p0 #%d = denied %v, rules %s, want allowed", i, d.Denied, fmtRules(d.Rules))
			}
		}
		d := e.msg("Take p0 #4", p, sdk.Attempt{Cost: scale}, take)
		want := []sdk.Room{{Rule: r.Name, Priority: 0, Remaining: 0}, {Rule: r.Name, Priority: 1, Remaining: scale}, {Rule: r.Name, Priority: 3, Remaining: 2 * scale}}
		if d.Allowed || !d.Headroom || !d.Rules[0].Headroom || d.Rules[0].Keep != 2*scale || d.Rules[0].Used != 3*scale ||
			d.Rules[0].Limit != 5*scale || d.Rules[0].Remaining != 0 || d.Rules[0].RetryAfter <= 0 || !slices.Equal(d.Rooms, want) ||
			!near(d.NextEligible, d.At.Add(d.RetryAfter), e.tol) {
			e.t.Errorf("Take p0 #4 = allowed %t, headroom %t, rules %s (keep %d), rooms %v, next %v, want denied for headroom (3/5, keep 2), rooms %v, next at+retry",
				d.Allowed, d.Headroom, fmtRules(d.Rules), d.Rules[0].Keep, d.Rooms, d.NextEligible, want)
		}
		if d := e.msg("Take p2", p, sdk.Attempt{Cost: scale, Priority: 2}, take); !d.Allowed || d.Rules[0].Remaining != 0 {
			e.t.Errorf("Take p2 = allowed %t, rules %s, want allowed to 4/5, none left for priority 2", d.Allowed, fmtRules(d.Rules))
		}
		if d := e.msg("Take p1", p, sdk.Attempt{Cost: scale, Priority: 1}, peek); d.Allowed || !d.Headroom {
			e.t.Errorf("Peek p1 = allowed %t, headroom %t, want denied for headroom", d.Allowed, d.Headroom)
		}
		if d := e.msg("Take p3", p, sdk.Attempt{Cost: scale, Priority: 3}, take); !d.Allowed || d.Rules[0].Used != 5*scale {
			e.t.Errorf("Take p3 = allowed %t, rules %s, want allowed to 5/5", d.Allowed, fmtRules(d.Rules))
		}
		if d := e.msg("Take p9", p, sdk.Attempt{Cost: scale, Priority: 9}, take); d.Allowed || d.Headroom || d.Rules[0].Headroom {
			e.t.Errorf("Take p9 = allowed %t, headroom %t, want denied by the limit itself", d.Allowed, d.Headroom)
		}
		if d := e.msg("Take p0 cost 4", p, sdk.Attempt{Cost: 4 * scale}, peek); !d.CostTooHigh || !d.NextEligible.IsZero() {
			e.t.Errorf("Peek p0 cost 4 = cost too high %t, next %v, want cost too high (4 > 5-2), no next eligible time", d.CostTooHigh, d.NextEligible)
		}
		if _, err := e.lim.Take(bg(), p, sdk.Attempt{Subject: e.subject(), Priority: sdk.MaxPriority + 1}); !errors.Is(err, sdk.ErrInvalidPriority) {
			e.t.Errorf("Take of priority %d = %v, want ErrInvalidPriority", sdk.MaxPriority+1, err)
		}
	}
}

// quietAround returns a quiet period of loc's local time holding now with
// at least a minute on each side, and its end as an instant.
func quietAround(now time.Time, loc *time.Location) (sdk.QuietPeriod, time.Time) {
	lt := now.In(loc)
	mid := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc)
	from := lt.Sub(mid).Truncate(time.Minute) - time.Minute
	if from < 0 {
		from += 24 * time.Hour
	}
	to := (from + 3*time.Minute) % (24 * time.Hour)
	end := lt.Truncate(time.Minute).Add(2 * time.Minute)
	return sdk.QuietPeriod{From: from, To: to}, end
}

func quietHours(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	r := e.fixed("a", 5, w)
	kolkata, err := sdk.LoadZone("Asia/Kolkata")
	if err != nil {
		e.t.Fatalf("LoadZone(Asia/Kolkata) = %v", err)
	}
	now := e.now()
	q, end := quietAround(now, kolkata)
	opts := []sdk.PolicyOption{sdk.WithQuietHours(time.UTC, q), sdk.WithClass(classes...)}
	if e.has(overrider) {
		opts = append(opts, sdk.WithOverrides())
	}
	p := e.policyWith(opts, r)
	// The policy's zone, UTC, is not in the period (Kolkata is 5:30 ahead).
	if d := e.msg("Take in UTC", p, sdk.Attempt{}, take); !d.Allowed || !d.Quiet.IsZero() {
		e.t.Fatalf("Take in UTC = allowed %t, quiet %v, want allowed: quiet hours are Kolkata's local times", d.Allowed, d.Quiet)
	}
	d := e.msg("Take in Kolkata", p, sdk.Attempt{Zone: kolkata}, take)
	e.before(d, end.Add(-time.Minute), "Take in Kolkata")
	if d.Allowed || !d.Quiet.Equal(end) || len(d.Denied) != 0 || d.Rules[0].Used != 1 || !d.NextEligible.Equal(end) ||
		!nearDur(d.RetryAfter, end.Sub(d.At), e.tol) {
		e.t.Errorf("Take in Kolkata = allowed %t, quiet %v, denied %v, rules %s, next %v, retry %v, want denied for quiet hours until %v, nothing consumed",
			d.Allowed, d.Quiet, d.Denied, fmtRules(d.Rules), d.NextEligible, d.RetryAfter, end)
	}
	d = e.msg("Take alert in Kolkata", p, sdk.Attempt{Zone: kolkata, Class: "alert"}, take)
	if !d.Allowed || !d.Quiet.Equal(end) || d.Rules[0].Used != 2 {
		e.t.Errorf("Take alert in Kolkata = allowed %t, quiet %v, rules %s, want allowed through quiet hours (Quiet says when they end), counted", d.Allowed, d.Quiet, fmtRules(d.Rules))
	}
	if e.has(idempotent) {
		a := sdk.Attempt{Zone: kolkata, IdempotencyKey: "q"}
		first := e.msg("Take keyed in Kolkata", p, a, take)
		again := e.msg("Take keyed in Kolkata again", p, a, take)
		if first.Allowed || !again.Replayed || again.Allowed || !again.Quiet.Equal(end) {
			e.t.Errorf("replay of a quiet denial = replayed %t, allowed %t, quiet %v, want the denial replayed with its quiet end %v", again.Replayed, again.Allowed, again.Quiet, end)
		}
	}
	if e.has(inspector) {
		_, tr := e.inspect(r)
		var n int
		for _, x := range tr {
			if x.Quiet {
				n++
				if x.Rule != "" || !near(x.Until(), end, e.tol) {
					e.t.Errorf("quiet trail entry %+v, want no rule, until %v", x, end)
				}
			}
		}
		if n == 0 {
			e.t.Errorf("trail = %+v, want an entry marked Quiet", tr)
		}
	}
	if e.has(overrider) {
		e.setOverride(p, driver.Override{Kind: driver.Exempt, Reason: "vip", By: "ops"})
		if d := e.msg("Take exempt override in Kolkata", p, sdk.Attempt{Zone: kolkata}, take); d.Allowed || !d.Quiet.Equal(end) {
			e.t.Errorf("Take under an exempt override in quiet hours = allowed %t, quiet %v, want denied: quiet hours come first", d.Allowed, d.Quiet)
		}
		b := e.setOverride(p, driver.Override{Kind: driver.Block, Reason: "abuse", By: "ops"})
		if d := e.msg("Take blocked in Kolkata", p, sdk.Attempt{Zone: kolkata}, take); d.Allowed || d.Override.ID != b.ID || !d.NextEligible.IsZero() {
			e.t.Errorf("Take under a block in quiet hours = allowed %t, override #%d, next %v, want denied by the block #%d (no end: no next eligible time)", d.Allowed, d.Override.ID, d.NextEligible, b.ID)
		}
	}
	// A batch: the same decisions, in order.
	as := []sdk.Attempt{{Subject: e.subject(), Zone: kolkata}, {Subject: e.subject(), Zone: kolkata, Class: "otp"}, {Subject: e.subject()}}
	if e.has(overrider) {
		return // the block above denies every attempt
	}
	br := e.lim.TakeBatch(bg(), p, as)
	if len(br) != 3 {
		e.t.Fatalf("TakeBatch = %v, want 3 results", br)
	}
	if br[0].Err != nil || br[0].Decision.Allowed || !br[0].Decision.Quiet.Equal(end) || br[1].Err != nil || !br[1].Decision.Allowed || br[2].Err != nil || !br[2].Decision.Allowed {
		e.t.Errorf("TakeBatch(quiet, otp, UTC) = %+v, want denied for quiet hours, allowed, allowed", br)
	}
}

// nextEligible: a rule's next window begins inside quiet hours; the next
// eligible time is their end, and holds to the millisecond.
func nextEligible(e *env) {
	w := time.Hour
	e.alignTo(w, 0)
	r := e.fixed("a", 1, w)
	start := e.now()
	next := start.Add(w)
	lt := next.In(time.UTC)
	from := time.Duration(lt.Hour())*time.Hour + time.Duration(lt.Minute())*time.Minute - 10*time.Minute
	if from < 0 {
		from += 24 * time.Hour
	}
	to := (from + 30*time.Minute) % (24 * time.Hour)
	end := next.Add(20 * time.Minute)
	p := e.policyWith([]sdk.PolicyOption{sdk.WithQuietHours(time.UTC, sdk.QuietPeriod{From: from, To: to})}, r)
	e.msg("Take", p, sdk.Attempt{}, take)
	d := e.msg("Take over the limit", p, sdk.Attempt{}, take)
	if d.Allowed || !d.NextEligible.Equal(end) || !d.Quiet.IsZero() {
		e.t.Fatalf("Take over the limit = allowed %t, next %v, quiet %v, want denied by a, next eligible at the quiet hours' end %v", d.Allowed, d.NextEligible, d.Quiet, end)
	}
	e.advanceTo(end.Add(-time.Millisecond))
	if d := e.msg("Take 1 ms before", p, sdk.Attempt{}, take); d.Allowed || !d.NextEligible.Equal(end) {
		e.t.Errorf("Take 1 ms before the next eligible time = allowed %t, quiet %v, next %v, want denied for quiet hours", d.Allowed, d.Quiet, d.NextEligible)
	}
	e.advanceTo(end)
	if d := e.msg("Take at the next eligible time", p, sdk.Attempt{}, take); !d.Allowed {
		e.t.Errorf("Take at the next eligible time = denied %v, quiet %v, want allowed", d.Denied, d.Quiet)
	}
}

func messagingCases() []testCase {
	return []testCase{
		{name: "ExemptCounted", run: exemptCounted},
		{name: "ExemptUncountedAndSomeRules", run: exemptUncounted},
		{name: "HeadroomFixed", needs: peeker, run: headroomOn(func(e *env, l int64) sdk.Rule { return e.fixed("a", l, time.Hour) }, 1)},
		{name: "HeadroomCalendarDay", needs: peeker, run: headroomOn(func(e *env, l int64) sdk.Rule { return e.calendar("a", l, driver.Day, time.UTC) }, 1)},
		{name: "HeadroomSlidingLog", needs: peeker, run: headroomOn(func(e *env, l int64) sdk.Rule { return e.log("a", l, time.Hour) }, 1)},
		{name: "HeadroomSlidingCells", needs: peeker, run: headroomOn(func(e *env, l int64) sdk.Rule { return e.sliding("a", l, time.Hour, 4) }, cellScale)},
		{name: "HeadroomLargeLog", needs: peeker, run: headroomOn(func(e *env, l int64) sdk.Rule { return e.log("a", l, time.Hour) }, cellScale)},
		{name: "QuietHoursInTheAttemptsZone", run: quietHours},
		{name: "NextEligibleExact", fakeOnly: true, run: nextEligible},
		{name: "IdentitiesShareAPersonsCaps", needs: linker, run: identities},
	}
}

// identities: a person's identities share their caps (WithPerson,
// Attempt.Identity, Admin.Link); an identity without a link is its own
// person; the person's stored zone serves attempts without one, the
// attempt's own zone wins; trail entries record the identity.
func identities(e *env) {
	w := time.Hour
	e.ensureRoom(w, 10*time.Second)
	person := e.subject()[dim]
	dev, mail := "dev-"+e.tag, "mail-"+e.tag
	ad := e.lim.Admin()
	for _, id := range []string{dev, mail} {
		if _, err := ad.Link(bg(), id, person, "ops", "test"); err != nil {
			e.t.Fatalf("Link(%s) = %v", id, err)
		}
	}
	r := e.fixed("a", 3, w)
	p := e.policyWith([]sdk.PolicyOption{sdk.WithPerson(dim)}, r)
	for i, id := range []string{dev, mail, dev} {
		d := e.msg("Take to "+id, p, sdk.Attempt{Subject: sdk.Subject{}, Identity: id}, take)
		if !d.Allowed || d.Rules[0].Used != int64(i+1) {
			e.t.Fatalf("Take #%d to %s = allowed %t, rules %s, want allowed at %d: one person's caps", i+1, id, d.Allowed, fmtRules(d.Rules), i+1)
		}
	}
	if d := e.msg("Take to the person", p, sdk.Attempt{}, take); d.Allowed || d.Rules[0].Used != 3 {
		e.t.Errorf("Take to the person itself = allowed %t, rules %s, want denied at 3/3", d.Allowed, fmtRules(d.Rules))
	}
	if d := e.msg("Take to an unlinked identity", p, sdk.Attempt{Subject: sdk.Subject{}, Identity: "other-" + e.tag}, take); !d.Allowed || d.Rules[0].Used != 1 {
		e.t.Errorf("Take to an unlinked identity = allowed %t, rules %s, want allowed at 1: its own person", d.Allowed, fmtRules(d.Rules))
	}
	if e.has(inspector) {
		d := e.msg("Take to mail, denied", p, sdk.Attempt{Subject: sdk.Subject{}, Identity: mail}, take)
		if d.Allowed {
			e.t.Fatalf("Take to mail at 3/3 = allowed")
		}
		_, tr := e.inspect(r)
		if len(tr) == 0 || tr[0].Identity != mail {
			e.t.Errorf("trail = %+v, want the newest entry to record identity %q", tr, mail)
		}
	}
	// The stored zone: quiet hours in it for an attempt without zone; the
	// attempt's zone wins.
	kolkata, err := sdk.LoadZone("Asia/Kolkata")
	if err != nil {
		e.t.Fatalf("LoadZone(Asia/Kolkata) = %v", err)
	}
	q, end := quietAround(e.now(), kolkata)
	pq := e.policyWith([]sdk.PolicyOption{sdk.WithPerson(dim), sdk.WithQuietHours(time.UTC, q)}, e.fixed("b", 10, w))
	if d := e.msg("Take to dev, no stored zone", pq, sdk.Attempt{Subject: sdk.Subject{}, Identity: dev}, take); !d.Allowed {
		e.t.Fatalf("Take to dev without a stored zone = denied %v, quiet %v, want allowed (UTC is not quiet)", d.Denied, d.Quiet)
	}
	if err := ad.SetPersonZone(bg(), person, "Asia/Kolkata", "ops", "moved"); err != nil {
		e.t.Fatalf("SetPersonZone = %v", err)
	}
	d := e.msg("Take to dev, stored zone Kolkata", pq, sdk.Attempt{Subject: sdk.Subject{}, Identity: dev}, take)
	e.before(d, end.Add(-time.Minute), "Take to dev")
	if d.Allowed || !d.Quiet.Equal(end) {
		e.t.Errorf("Take to dev with stored zone Kolkata = allowed %t, quiet %v, want denied for quiet hours until %v", d.Allowed, d.Quiet, end)
	}
	if d := e.msg("Take to dev in UTC", pq, sdk.Attempt{Subject: sdk.Subject{}, Identity: dev, Zone: time.UTC}, take); !d.Allowed {
		e.t.Errorf("Take to dev with the attempt's zone UTC = denied %v, quiet %v, want allowed: the attempt's zone wins", d.Denied, d.Quiet)
	}
	if _, err := e.lim.Take(bg(), e.policy(r), sdk.Attempt{Subject: e.subject(), Identity: dev}); !errors.Is(err, sdk.ErrInvalidPolicy) {
		e.t.Errorf("Take with an identity under a policy without person dimension = %v, want ErrInvalidPolicy", err)
	}
}
