package sdk

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/freqcap/freqcap/internal/alg"
	"github.com/freqcap/freqcap/internal/bounded"
	"github.com/freqcap/freqcap/sdk/driver"
)

// MaxPriority is the highest Attempt.Priority (0, the default, is the
// lowest).
const MaxPriority = 9

// MaxClasses is the most message classes a policy declares (WithClass).
const MaxClasses = 32

// MaxQuietPeriods is the most quiet periods a policy declares
// (WithQuietHours).
const MaxQuietPeriods = 14

// Class is a message class a policy declares (WithClass): what an attempt
// of that class (Attempt.Class) is exempt from. "otp" exempt from every
// rule and counted: a one-time password is never blocked but still counts
// toward the caps, so marketing stops sooner; "security" exempt and not
// counted; "alert" exempt from quiet hours only.
//
// An exempt rule never denies the class's attempts (RuleDecision.Exempt);
// when it would have, the decision names it (Decision.Exempted) and a Take
// or Reserve writes a trail entry marked Exempt. A shadow rule is a trial
// of the rule as it stands: it counts a class's attempts as any other's.
type Class struct {
	// Name is the class's name ([A-Za-z0-9_.-]{1,64}), what attempts give.
	Name string
	// AllRules exempts the class from every rule of the policy; Rules
	// from those named (both empty: from none, e.g. quiet hours only).
	AllRules bool
	Rules    []string
	// Counted: the class's attempts still count toward the rules they are
	// exempt from (consumed with the attempt, even past the limit);
	// without it they consume nothing from them.
	Counted bool
	// QuietHours exempts the class from the policy's quiet hours.
	QuietHours bool
}

// Headroom keeps the last units of a rule for attempts of higher priority
// (Rule.WithHeadroom): attempts whose Attempt.Priority is below Priority
// may not use the rule's last Keep units. "Promotions stop at 40 of 50,
// alerts may use all 50" is a limit of 50 with Headroom{Priority: 1,
// Keep: 10}, promotions sent at priority 0 and alerts at 1.
type Headroom struct {
	Priority int
	Keep     int64
}

// WithHeadroom returns a copy of r that keeps its last keep units for
// attempts of priority p or above (Headroom). Several tiers may be given,
// from the lowest priority up, each keeping fewer units: an attempt is
// kept from the units of the nearest tier above its priority. Priorities
// run from 1 to MaxPriority, keep from 1 to Limit-1; GCRA rules have no
// headroom (NewPolicy refuses it). Headroom is not part of the rule's
// identity: changing it keeps every count.
func (r Rule) WithHeadroom(keep int64, p int) Rule {
	r.Headroom = append(slices.Clip(r.Headroom), Headroom{Priority: p, Keep: keep})
	return r
}

// checkHeadroom checks r's headroom tiers (normalize's last step).
func (r *Rule) checkHeadroom() error {
	if len(r.Headroom) == 0 {
		return nil
	}
	if r.Algorithm == driver.GCRA {
		return fmt.Errorf("headroom is for counting rules, not GCRA")
	}
	for i, h := range r.Headroom {
		if h.Priority < 1 || h.Priority > MaxPriority {
			return fmt.Errorf("headroom priority must be 1 to %d, got %d", MaxPriority, h.Priority)
		}
		if h.Keep < 1 || h.Keep >= r.Limit {
			return fmt.Errorf("headroom must keep 1 to limit-1 (%d) units, got %d", r.Limit-1, h.Keep)
		}
		if i > 0 {
			prev := r.Headroom[i-1]
			if h.Priority <= prev.Priority || h.Keep >= prev.Keep {
				return fmt.Errorf("headroom tiers must rise in priority and fall in units kept: {%d %d} after {%d %d}", h.Priority, h.Keep, prev.Priority, prev.Keep)
			}
		}
	}
	r.Headroom = slices.Clone(r.Headroom)
	return nil
}

// keepFor returns how many of r's last units an attempt of priority p may
// not use.
func keepFor(hs []Headroom, p int) int64 {
	for _, h := range hs {
		if p < h.Priority {
			return h.Keep
		}
	}
	return 0
}

// Room is how many units attempts of priority Priority (up to the next
// tier's) may still use of rule Rule, which has headroom (Decision.Rooms).
type Room struct {
	Rule      string
	Priority  int
	Remaining int64
}

// QuietPeriod is one daily period of quiet hours in local time: from From
// until To, durations since local midnight in [0, 24h); To before From
// runs past midnight (From 21h, To 8h: 21:00 to 08:00 the next morning).
// Days are the weekdays a period starts on (empty: every day).
type QuietPeriod struct {
	From, To time.Duration
	Days     []time.Weekday
}

// WithQuietHours makes the policy deny sends during the periods, in the
// recipient's local time: the zone the attempt carries (Attempt.Zone),
// else the person's stored zone (Admin.SetPersonZone, read for attempts
// that carry an Identity), else loc (required; UTC is a zone too). The
// attempt's zone wins because the sender knows where the message goes
// now. A denial for quiet hours consumes nothing and says when they end
// (Decision.Quiet; Decision.NextEligible is the first instant every rule
// admits the attempt outside quiet hours); classes with QuietHours set
// pass (WithClass). The decision is made on the backend's clock, as every
// rule's: the sdk gives it the periods as instants around its own clock
// (a period's local times that a DST change skips are read in the offset
// before the change), and a backend whose clock is beyond them fails the
// decision (ErrClockSkew). At most MaxQuietPeriods periods.
func WithQuietHours(loc *time.Location, periods ...QuietPeriod) PolicyOption {
	return func(o *policyOptions) error {
		if loc == nil || loc == time.Local {
			return fmt.Errorf("%w: quiet hours need a named zone (LoadZone), not %v", ErrInvalidPolicy, loc)
		}
		if len(periods) == 0 || len(periods)+len(o.quiet) > MaxQuietPeriods {
			return fmt.Errorf("%w: quiet hours need 1 to %d periods, got %d", ErrInvalidPolicy, MaxQuietPeriods, len(periods)+len(o.quiet))
		}
		if o.quietLoc != nil && o.quietLoc != loc {
			return fmt.Errorf("%w: quiet hours in one zone per policy", ErrInvalidPolicy)
		}
		o.quietLoc = loc
		for _, q := range periods {
			if q.From < 0 || q.From >= 24*time.Hour || q.To < 0 || q.To >= 24*time.Hour || q.From == q.To {
				return fmt.Errorf("%w: quiet period %v to %v: times of day in [0, 24h), not equal", ErrInvalidPolicy, q.From, q.To)
			}
			if q.From%time.Minute != 0 || q.To%time.Minute != 0 {
				return fmt.Errorf("%w: quiet period %v to %v: whole minutes", ErrInvalidPolicy, q.From, q.To)
			}
			aq := alg.Quiet{From: q.From, To: q.To}
			for _, d := range q.Days {
				if d < time.Sunday || d > time.Saturday {
					return fmt.Errorf("%w: quiet period: weekday %d", ErrInvalidPolicy, d)
				}
				aq.Days |= 1 << uint(d)
			}
			o.quiet = append(o.quiet, aq)
			o.quietSrc = append(o.quietSrc, QuietPeriod{From: q.From, To: q.To, Days: slices.Clone(q.Days)})
		}
		return nil
	}
}

// WithClass declares message classes (Class) that attempts may give
// (Attempt.Class). Names must be unique and name rules of the policy; at
// most MaxClasses.
func WithClass(classes ...Class) PolicyOption {
	return func(o *policyOptions) error {
		for _, c := range classes {
			c.Rules = slices.Clone(c.Rules)
			o.classes = append(o.classes, c)
		}
		return nil
	}
}

// addClasses checks the declared classes against p's rules.
func (p *Policy) addClasses(cs []Class) error {
	if len(cs) > MaxClasses {
		return fmt.Errorf("%w: %d classes, want <= %d", ErrInvalidPolicy, len(cs), MaxClasses)
	}
	for i, c := range cs {
		if !validName(c.Name) {
			return fmt.Errorf("%w: class name %q must match [A-Za-z0-9_.-]{1,64}", ErrInvalidPolicy, c.Name)
		}
		for _, d := range cs[:i] {
			if d.Name == c.Name {
				return fmt.Errorf("%w: class %q declared twice", ErrInvalidPolicy, c.Name)
			}
		}
		if c.AllRules && len(c.Rules) > 0 {
			return fmt.Errorf("%w: class %q: AllRules or Rules, not both", ErrInvalidPolicy, c.Name)
		}
		for _, r := range c.Rules {
			if !slices.ContainsFunc(p.rules, func(x Rule) bool { return x.Name == r }) {
				return fmt.Errorf("%w: class %q names rule %q, which the policy does not have", ErrInvalidPolicy, c.Name, r)
			}
		}
		if !c.AllRules && len(c.Rules) == 0 && !c.QuietHours {
			return fmt.Errorf("%w: class %q is exempt from nothing: give AllRules, Rules or QuietHours", ErrInvalidPolicy, c.Name)
		}
	}
	p.classes = cs
	return nil
}

// Classes returns the policy's message classes (WithClass), a copy.
func (p *Policy) Classes() []Class {
	if p == nil {
		return nil
	}
	out := slices.Clone(p.classes)
	for i := range out {
		out[i].Rules = slices.Clone(out[i].Rules)
	}
	return out
}

// QuietHours returns the policy's quiet periods and their default zone
// (WithQuietHours); nil, nil when it has none.
func (p *Policy) QuietHours() (*time.Location, []QuietPeriod) {
	if p == nil || len(p.quiet) == 0 {
		return nil, nil
	}
	out := slices.Clone(p.quietSrc)
	for i := range out {
		out[i].Days = slices.Clone(out[i].Days)
	}
	return p.quietLoc, out
}

// class returns the declared class named name.
func (p *Policy) class(name string) (*Class, bool) {
	for i := range p.classes {
		if p.classes[i].Name == name {
			return &p.classes[i], true
		}
	}
	return nil, false
}

// exempts reports how c exempts rule name.
func (c *Class) exempts(name string) driver.Exemption {
	if c == nil || (!c.AllRules && !slices.Contains(c.Rules, name)) {
		return driver.NotExempt
	}
	if c.Counted {
		return driver.ExemptCounted
	}
	return driver.ExemptUncounted
}

// quietReach is how far around the Limiter's clock the quiet spans sent
// with a request reach: the backend's clock may differ from ours by up to
// that much. The sdk sends the spans that reach into [c-1min-quietReach,
// c+quietReach), c the first whole minute at or after its clock
// (quietMinute): at least quietReach each way of the clock, at most a
// minute more before it, the same for every attempt of (c-1min, c]
// (Policy.quietSpans). Beyond them it sends two more spans, before and
// after, reaching far (skewSpan): a backend whose clock is in one of them
// denies the request as quiet, consuming nothing, and the sdk turns that
// into ErrClockSkew (skewed): never a decision the quiet hours were not
// given for.
const (
	quietReach = time.Hour
	skewSpan   = 100 * 365 * 24 * time.Hour
)

// messaging gives req what the attempt's class, priority and zone ask of
// p: each rule's headroom and exemption, and the quiet spans around now
// in a.Zone (nil: the policy's). before marks, per rule of req, a rule's
// former self (nonzero: resolved.before), which the class exempts as the
// rule but which keeps no headroom: it is enforced with its own limit,
// which may be at or below the units its successor keeps. It returns the
// class (nil: none).
func (p *Policy) messaging(req *driver.Request, before []int64, a Attempt, now time.Time) (*Class, error) {
	var cls *Class
	if a.Class != "" {
		c, ok := p.class(a.Class)
		if !ok {
			return nil, fmt.Errorf("%w: %q: policy %q declares %s", ErrInvalidClass, a.Class, p.name, p.classNames())
		}
		cls = c
	}
	if a.Priority < 0 || a.Priority > MaxPriority {
		return nil, fmt.Errorf("%w: %d, want 0 to %d", ErrInvalidPriority, a.Priority, MaxPriority)
	}
	if p.headrooms != nil || cls != nil {
		for i := range req.Rules {
			r := &req.Rules[i]
			if hs := p.headrooms[r.Name]; hs != nil && (before == nil || before[i] == 0) {
				r.Keep = keepFor(hs, a.Priority)
			}
			if !r.Shadow {
				r.Exempt = cls.exempts(r.Name)
			}
		}
	}
	if len(p.quiet) > 0 && (cls == nil || !cls.QuietHours) {
		zone := a.Zone
		if zone == nil {
			zone = p.quietLoc
		}
		req.Quiet = p.quietSpans(zone, now)
	}
	return cls, nil
}

// quietSpans returns the quiet spans of p in zone around now, as a
// request carries them (driver.Request.Quiet): those reaching into
// [c-1min-quietReach, c+quietReach), c = quietMinute(now), framed by two
// far spans (skewed): the first ends at least quietReach before now, the
// last starts at least quietReach after it. Every now of the minute
// (c-1min, c] gets the same spans, which p keeps per zone (quietMemo) and
// shares: a request's Quiet is read-only. As quiet hours start and end on
// whole minutes, a backend's clock within quietReach of now decides as
// with the spans reaching into [now-quietReach, now+quietReach) alone:
// the ones the minute adds end before that (a backend's clock in one of
// them is quiet, not a skew). When more spans than a request carries
// (driver.MaxQuietSpans - 2) reach into the minute's, the spans are now's
// own, uncached (quietFrame).
func (p *Policy) quietSpans(zone *time.Location, now time.Time) []driver.Span {
	c := quietMinute(now)
	if q := p.quietMemo.get(zone, c); q != nil {
		return q
	}
	q, cut := p.quietFrame(zone, c.Add(-time.Minute-quietReach), c.Add(quietReach), now)
	if cut {
		q, _ = p.quietFrame(zone, now.Add(-quietReach), now.Add(quietReach), now)
		return q
	}
	p.quietMemo.put(zone, c, q)
	return q
}

// quietFrame returns the quiet spans of p in zone that reach into
// [lo, hi), framed by two far spans (skewed): one ending at lo (or at the
// first span's start, if earlier), one starting at hi (or at the last
// span's end, if later). When more spans than a request carries
// (driver.MaxQuietSpans - 2) reach into it, it keeps those around now,
// frames them at the nearest ones left out (a backend's clock in those is
// a skew, never a decision without them) and reports cut.
func (p *Policy) quietFrame(zone *time.Location, lo, hi, now time.Time) (q []driver.Span, cut bool) {
	var buf [driver.MaxQuietSpans][2]time.Time
	sp := alg.QuietSpans(buf[:0], p.quiet, zone, lo, hi)
	if n := driver.MaxQuietSpans - 2; len(sp) > n {
		// More spans in reach than a request carries: send the n
		// around now, and frame them at the nearest ones left out
		// (nothing between is quiet), so that a backend's clock in
		// one of those is a skew, never a decision without it.
		cut = true
		k := 0 // the first span ending after now
		for k < len(sp) && !sp[k][1].After(now) {
			k++
		}
		i := min(max(0, k-n/2), len(sp)-n)
		if i > 0 {
			lo = sp[i-1][1]
		}
		if i+n < len(sp) {
			hi = sp[i+n][0]
		}
		sp = sp[i : i+n]
	}
	if len(sp) > 0 {
		lo, hi = minTime(lo, sp[0][0]), maxTime(hi, sp[len(sp)-1][1])
	}
	q = make([]driver.Span, 0, len(sp)+2)
	q = append(q, driver.Span{Start: lo.Add(-skewSpan), End: lo})
	for _, s := range sp {
		q = append(q, driver.Span{Start: s[0], End: s[1]})
	}
	q = append(q, driver.Span{Start: hi, End: hi.Add(skewSpan)})
	return q, cut
}

// quietMinute returns the first whole minute (of Unix time) at or after
// t, on the wall clock (no monotonic reading): the same for every t in
// (c-1min, c].
func quietMinute(t time.Time) time.Time {
	s := t.Add(-1).Unix() // the second holding t's previous nanosecond (floored before 1970 too)
	return time.Unix(s-((s%60)+60)%60+60, 0)
}

// quietMemoFor returns the memo of a policy of quiet hours q
// (Policy.quietMemo): nil when it has none.
func quietMemoFor(q []alg.Quiet) *quietMemo {
	if len(q) == 0 {
		return nil
	}
	return new(quietMemo)
}

// quietMemoMax bounds the zones a quietMemo keeps: when a new one would
// exceed it, the memo empties and refills from the zones in use.
const quietMemoMax = 1024

// quietMemo holds, per zone, a policy's quiet spans (Policy.quietSpans)
// of the last minute asked, at most quietMemoMax zones. A Policy is
// immutable, so its own spans never change: a rebuilt policy has a memo
// of its own. A zone is its *time.Location (LoadZone loads each name
// once). Safe for concurrent use; nil keeps nothing.
type quietMemo struct {
	c bounded.Map[*time.Location, quietEntry]
}

// quietEntry is a zone's quiet spans for the minute ending at min
// (quietMinute, Unix seconds); q is shared by every request of that
// minute and never written.
type quietEntry struct {
	min int64
	q   []driver.Span
}

// get returns zone's spans of the minute ending at m, nil when the memo
// has other ones (another minute: later, or a clock gone back).
func (c *quietMemo) get(zone *time.Location, m time.Time) []driver.Span {
	if c == nil {
		return nil
	}
	if e, ok := c.c.Get(zone); ok && e.min == m.Unix() {
		return e.q
	}
	return nil
}

// put keeps q as zone's spans of the minute ending at m.
func (c *quietMemo) put(zone *time.Location, m time.Time, q []driver.Span) {
	if c != nil {
		c.c.Put(zone, quietEntry{min: m.Unix(), q: q}, quietMemoMax)
	}
}

// skewed reports whether a denial for quiet hours ending at end
// (driver.Result.Quiet) is one of the two spans framing the request's
// quiet spans q (quietReach): the backend's clock outside the hours the
// sdk described.
func skewed(q []driver.Span, end time.Time) bool {
	return len(q) > 0 && !end.IsZero() && (end.Equal(q[0].End) || end.Equal(q[len(q)-1].End))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (p *Policy) classNames() string {
	if len(p.classes) == 0 {
		return "no classes"
	}
	names := make([]string, len(p.classes))
	for i, c := range p.classes {
		names[i] = c.Name
	}
	return "classes " + strings.Join(names, ", ")
}

// explain completes d with what the attempt's class, priority and zone
// made of it: exemptions, headroom and the rooms per priority, quiet
// hours, and the next eligible time. rules are the rules sent; quietEnd
// is the backend's driver.Result.Quiet.
func (p *Policy) explain(d *Decision, rules []driver.Rule, cls *Class, a Attempt, quietEnd time.Time) {
	if cls != nil {
		d.Class = cls.Name
	}
	for i := range d.Rules {
		rd := &d.Rules[i]
		r := rules[i]
		rd.Exempt = r.Exempt
		if r.Exempt != driver.NotExempt && !rd.Allowed && !slices.Contains(d.Exempted, rd.Rule) {
			d.Exempted = append(d.Exempted, rd.Rule)
		}
		hs := p.headrooms[r.Name]
		if hs == nil {
			continue
		}
		rd.Keep = r.Keep
		if !rd.Allowed && !rd.Shadow && r.Keep > 0 && rd.Used+a.cost() <= rd.Limit {
			rd.Headroom = true
			d.Headroom = true
		}
		if rd.Before != 0 {
			continue // the rule as it was: its successor's rooms are the ones
		}
		d.Rooms = append(d.Rooms, Room{Rule: rd.Rule, Priority: 0, Remaining: max(0, rd.Limit-keepFor(hs, 0)-rd.Used)})
		for _, h := range hs {
			d.Rooms = append(d.Rooms, Room{Rule: rd.Rule, Priority: h.Priority, Remaining: max(0, rd.Limit-keepFor(hs, h.Priority)-rd.Used)})
		}
	}
	switch {
	case len(p.quiet) == 0:
		nextEligible(d, nil, nil)
	case cls != nil && cls.QuietHours:
		// Sent without quiet hours: an allowed attempt says they were on
		// (Decision.Quiet: a denial with Quiet set is one for them), and
		// they delay nothing.
		if d.Allowed && !d.At.IsZero() {
			if e := QuietEnd(p, a.Zone, d.At); e.After(d.At) {
				d.Quiet = e
			}
		}
		nextEligible(d, nil, nil)
	default:
		d.Quiet = quietEnd
		nextEligible(d, p, a.Zone)
	}
}

// nextEligible sets d.NextEligible for a denial some instant can lift:
// the latest retry of its denying rules (d.RetryAfter, which holds the
// quiet hours' end when they denied), moved past p's quiet hours in zone
// (p nil: none apply). Each rule's count only falls while nothing is
// taken, so every rule admits the attempt from then on. d.RetryAfter
// becomes the wait until then, so that every reader of it (Wait,
// Retry-After headers, serve) waits past quiet hours too.
func nextEligible(d *Decision, p *Policy, zone *time.Location) {
	if d.Allowed || d.CostTooHigh || d.Degraded || d.At.IsZero() {
		return
	}
	if d.Override.Kind == driver.Block && d.RetryAfter <= 0 {
		return // a block without end: never
	}
	d.NextEligible = QuietEnd(p, zone, d.At.Add(d.RetryAfter))
	d.RetryAfter = d.NextEligible.Sub(d.At)
}

// messages reports whether p uses any messaging cap: quiet hours,
// classes or headroom (a policy using none pays nothing for them).
func (p *Policy) messages() bool {
	return len(p.quiet) > 0 || len(p.classes) > 0 || p.headrooms != nil
}

// WithPerson names the policy's person dimension: an attempt carrying an
// Identity (Attempt.Identity) is decided for the person the identity is
// linked to (Admin.Link), whose id becomes the subject's value of dim.
// dim must be a shard dimension (every rule is keyed by it, so all of a
// person's counts share one hash tag: one atomic round trip, on a Redis
// Cluster too).
func WithPerson(dim string) PolicyOption {
	return func(o *policyOptions) error {
		if !validName(dim) {
			return fmt.Errorf("%w: person dimension %q must match [A-Za-z0-9_.-]{1,64}", ErrInvalidPolicy, dim)
		}
		o.person = dim
		return nil
	}
}

// Person returns the policy's person dimension (WithPerson), "" when none.
func (p *Policy) Person() string {
	if p == nil {
		return ""
	}
	return p.person
}

// QuietEnd returns the first instant at or after t outside p's quiet
// hours in zone (nil: the policy's zone): t itself when they are not on
// at t, or when p has none.
func QuietEnd(p *Policy, zone *time.Location, t time.Time) time.Time {
	if p == nil || len(p.quiet) == 0 {
		return t
	}
	if zone == nil {
		zone = p.quietLoc
	}
	return alg.QuietEnd(p.quiet, zone, t)
}
