package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/freqcap/sdk/driver"
)

// MaxIdempotencyKeyLen is the longest Attempt.IdempotencyKey, in bytes.
const MaxIdempotencyKeyLen = 128

// Attempt is one request to decide: a subject, a cost and, optionally, an
// idempotency key that makes a retry safe and the recipient's time zone
// for calendar rules. The zero Cost means 1.
type Attempt struct {
	// Subject is what the decision is about.
	Subject Subject
	// Cost is the number of units to take; 0 means 1, and a negative
	// cost or one above driver.MaxLimit is invalid (ErrInvalidCost).
	Cost int64
	// IdempotencyKey, when not empty, names the attempt: a retry of it
	// (e.g. after a timeout) with the same key, for the same policy and
	// shard values, returns the first decision again (Decision.Replayed)
	// and consumes nothing more, for IdempotencyTTL (by default
	// Policy.IdempotencyTTL) after the first decision. Any bytes, at most MaxIdempotencyKeyLen of them. A
	// retry must repeat the attempt: whatever it asks, it gets the first
	// decision. Peeks ignore it. The backend must support idempotency
	// keys (the memory and Redis backends do), else the attempt fails with
	// an error wrapping errors.ErrUnsupported.
	IdempotencyKey string
	// IdempotencyTTL is how long the backend keeps the attempt's first
	// decision for replay, from that decision: 0 means
	// Policy.IdempotencyTTL, and a longer one is cut to
	// Policy.IdempotencyTTL (a record never outlives the policy's longest
	// window). A key that only has to outlive the caller's own re-sends
	// (seconds) can have a short one, which is what the record costs the
	// backend: a retry after it lapsed is a new attempt. A Reserve's record
	// is not tied to its reservation: it may lapse before or after it.
	// Negative is invalid (ErrInvalidIdempotencyKey). It means nothing
	// without an IdempotencyKey; peeks ignore it.
	IdempotencyTTL time.Duration
	// Zone is the recipient's time zone: every calendar rule of the policy
	// (Daily, Hourly, Weekly, Monthly) counts in the windows of Zone's
	// local clock instead of its own Rule.Location, which is used when
	// Zone is nil. The attempt's zone wins; it changes nothing of the
	// rule's identity (the person's counts are the same whatever the zone)
	// and other rules ignore it. LoadZone loads one by IANA name, once.
	//
	// A person whose zone changes between attempts is never uncapped: a
	// calendar rule keeps counting in the window it stored until that
	// window ends (by the backend's clock), whatever the new zone's window
	// around now, and only then starts the window of the attempt's zone.
	// So no stored window admits more than the rule's limit: someone who
	// flew east may wait for the new zone's day until their former day
	// ends; someone who flew west gets a new count once their former day
	// ends, which the new zone calls the same day. time.Local is invalid
	// (ErrInvalidZone: it differs per machine).
	Zone *time.Location
	// Class is the attempt's message class, one its policy declares
	// (WithClass; ErrInvalidClass otherwise): what the attempt is exempt
	// from, counted or not. Empty: none.
	Class string
	// Priority is the attempt's priority, 0 (the default, lowest) to
	// MaxPriority: a rule with headroom (Rule.WithHeadroom) keeps its last
	// units for higher priorities. Others are invalid (ErrInvalidPriority).
	Priority int
	// Identity, when not empty, is the identity the message goes to (a
	// device token, a phone number, an e-mail address…): the attempt is
	// decided for the person the identity is linked to (Admin.Link; an
	// identity without a link is its own person), whose value replaces the
	// Subject's value of the policy's person dimension (WithPerson), and
	// whose stored zone (Admin.SetPersonZone) is used when Zone is nil.
	// Trail entries record it. A policy without a person dimension refuses
	// it (ErrInvalidPolicy), and so does a backend that keeps no links
	// (driver.Linker; errors.ErrUnsupported).
	Identity string
}

// cost returns the attempt's cost (0 means 1).
func (a Attempt) cost() int64 {
	if a.Cost == 0 {
		return 1
	}
	return a.Cost
}

// Take takes a.Cost units (0 means 1) for a.Subject from every rule of p
// if every enforced rule admits them, atomically: all rules or none (a
// shadow rule never denies, and counts the units only if it admits them;
// an override, WithOverrides, may decide instead). A denial is a
// Decision with Allowed false, not an error; it consumes nothing. With an
// IdempotencyKey, a retry of the attempt returns the first decision with
// Replayed set and consumes nothing more.
//
// An error means no decision was made: invalid input (ErrInvalidPolicy,
// ErrInvalidSubject, ErrInvalidCost, ErrInvalidIdempotencyKey,
// ErrInvalidZone) or, under
// a fail-closed policy, a backend failure. Under a fail-open policy a
// backend failure yields an allowed Decision with Degraded set and a nil
// error.
func (l *Limiter) Take(ctx context.Context, p *Policy, a Attempt) (Decision, error) {
	var c call
	return l.take(ctx, &c, "take", opTake, p, a, 0)
}

// Peek reports what Take would decide for a, consuming nothing (its
// IdempotencyKey is ignored). The backend must support peeks (the memory
// and Redis backends do), else the error wraps errors.ErrUnsupported.
func (l *Limiter) Peek(ctx context.Context, p *Policy, a Attempt) (Decision, error) {
	var c call
	return l.take(ctx, &c, "peek", opPeek, p, a, 0)
}

// Reserve is Take that can be undone: when allowed, the units are
// consumed and held for ttl (1ms to driver.MaxWindow); Commit keeps them,
// Cancel gives them back, and a reservation neither committed nor
// cancelled within ttl is given back by itself. It suits "check during selection, consume only for the
// ad finally shown". A denied Reserve returns a nil Reservation.
//
// With an IdempotencyKey, a retry returns the first decision with
// Replayed set and, if it was allowed, the first attempt's Reservation
// (no second one is made; Commit or Cancel it as usual — it may since
// have been settled or have lapsed, which they report with
// ErrReservationNotFound).
//
// The backend must support reservations (else the error wraps
// errors.ErrUnsupported). A degraded (fail-open) decision returns a
// Reservation whose Commit and Cancel do nothing.
func (l *Limiter) Reserve(ctx context.Context, p *Policy, a Attempt, ttl time.Duration) (Decision, *Reservation, error) {
	return l.reserve(ctx, p, a, ttl)
}

// call is one decision in the making: the checked input, the request for
// the backend and what the hot-deny cache needs.
type call struct {
	op     string // names the operation in events (Event.Op)
	name   string // names it in errors: op, or "<op> batch" in a batch
	kind   opKind // the driver operation
	p      *Policy
	req    driver.Request // req.Rules are the resolved rules
	before []int64        // resolved.before
	base   string         // the subject's key base (resolved.base)
	hot    *hotCache      // nil: no hot-deny cache for this call
	hotKey string
	batch  int // Event.Batch
	// subject is the attempt's subject (Event.Subject).
	subject Subject
	resID   string // set by finish: the reservation of an allowed reserve
	// The attempt's messaging caps (Policy.messaging): its class (nil:
	// none), and the attempt (its cost, priority, identity and zone, for
	// the observer too).
	cls *Class
	att Attempt
}

// prepare checks an attempt and builds its request in c (the caller's:
// a single decision's stays on its stack). The idempotency key is
// ignored for peeks. In a batch, errors name the operation "<op>
// batch".
func (l *Limiter) prepare(c *call, op string, batch bool, dop opKind, p *Policy, a Attempt, ttl time.Duration) error {
	name := op
	if batch {
		name += " batch"
	}
	if err := l.hasBackend(name); err != nil {
		return err
	}
	if a.Cost < 0 {
		return fmt.Errorf("sdk: %s: %w: cost must be >= 0 (0 means 1), got %d", name, ErrInvalidCost, a.Cost)
	}
	n, idem := a.cost(), a.IdempotencyKey
	if n > driver.MaxLimit {
		return fmt.Errorf("sdk: %s: %w: cost must be <= %d (MaxLimit), got %d", name, ErrInvalidCost, driver.MaxLimit, n)
	}
	if a.Zone == time.Local {
		return fmt.Errorf("sdk: %s: %w: time.Local differs per machine: give a named zone (LoadZone)", name, ErrInvalidZone)
	}
	res, err := resolve(l.prefix, p, a.Subject, false, l.now)
	if err != nil {
		return fmt.Errorf("sdk: %s: %w", name, err)
	}
	if err := l.supports(name, dop); err != nil {
		return err
	}
	*c = call{op: op, name: name, kind: dop, p: p, req: l.request(p, res, n), base: res.base, before: res.before, subject: a.Subject, att: a}
	c.req.Zone = a.Zone
	if err := c.messaging(a, l.now); err != nil {
		return err
	}
	if dop == opReserve {
		c.req.ReservationID = newReservationID()
		c.req.ReservationTTL = ttl
	}
	consume := dop == opTake || dop == opReserve
	if consume && a.IdempotencyTTL < 0 {
		return fmt.Errorf("sdk: %s: %w: idempotency TTL must be >= 0 (0: the policy's), got %v", name, ErrInvalidIdempotencyKey, a.IdempotencyTTL)
	}
	if consume && idem != "" {
		if len(idem) > MaxIdempotencyKeyLen {
			return fmt.Errorf("sdk: %s: %w: %d bytes, want <= %d", name, ErrInvalidIdempotencyKey, len(idem), MaxIdempotencyKeyLen)
		}
		c.req.IdempotencyKey = c.base + "!i:" + escapeValue(idem)
		c.req.IdempotencyTTL = p.idemTTL
		if a.IdempotencyTTL > 0 {
			c.req.IdempotencyTTL = min(a.IdempotencyTTL, p.idemTTL)
		}
	}
	if consume && a.Class == "" && a.Priority == 0 {
		// The cache holds what default attempts were denied: a class or a
		// priority may be admitted where they are not.
		if h := l.hotCacheFor(p); h != nil {
			c.hot, c.hotKey = h, hotKey(res)
		}
	}
	return nil
}

// messaging records a's class, priority and identity in c's trail
// entries and applies what the policy's messaging caps ask of a to c's
// request (Policy.messaging).
func (c *call) messaging(a Attempt, now func() time.Time) error {
	p := c.p
	if p.trailMax > 0 {
		c.req.TrailValues = withTrailMeta(c.req.TrailValues, a)
	}
	if p.messages() || a.Class != "" || a.Priority != 0 {
		var err error
		if c.cls, err = p.messaging(&c.req, c.before, a, now()); err != nil {
			return fmt.Errorf("sdk: %s: %w", c.name, err)
		}
	}
	return nil
}

// cached answers c from the hot-deny cache, if it can. Attempts with an
// idempotency key always go to the backend (a retry must get its first
// decision, whatever happened since).
func (l *Limiter) cached(c *call) (Decision, bool) {
	if c.hot == nil || c.req.IdempotencyKey != "" {
		return Decision{}, false
	}
	d, ok := c.hot.get(c.base, c.hotKey, c.req.Cost, l.now())
	if ok {
		l.emit(c.event(d, nil, 0))
	}
	return d, ok
}

// finish turns the backend's answer into c's Decision: fail-open, the
// hot-deny cache and the observer.
func (l *Limiter) finish(c *call, a answer) (Decision, error) {
	p := c.p
	if a.err != nil {
		if p.failOpen {
			d := Decision{Allowed: true, Policy: p.name, At: l.now(), Degraded: true, Err: a.err}
			l.emit(c.event(d, a.err, a.lat))
			return d, nil
		}
		err := fmt.Errorf("sdk: %s: %w", c.name, a.err)
		l.emit(c.event(Decision{}, err, a.lat))
		return Decision{}, err
	}
	r := a.r
	if skewed(c.req.Quiet, r.Quiet) {
		q := c.req.Quiet
		a.err = fmt.Errorf("%w: the backend's clock reads %v, and quiet hours were given from %v to %v (the Limiter's clock: %v)", ErrClockSkew, r.Now, q[0].End, q[len(q)-1].Start, l.now())
		return l.finish(c, a)
	}
	if r.Replayed {
		var err error
		switch {
		case c.kind == opTake && r.ReservationID != "":
			err = fmt.Errorf("sdk: %s: %w: it was first used by a reservation", c.name, ErrInvalidIdempotencyKey)
		case c.kind == opReserve && r.Allowed && r.ReservationID == "":
			err = fmt.Errorf("sdk: %s: %w: it was first used by a take, not a reservation", c.name, ErrInvalidIdempotencyKey)
		}
		if err != nil {
			l.emit(c.event(Decision{}, err, a.lat))
			return Decision{}, err
		}
	}
	d := decide(p.name, c.req.Rules, c.before, r)
	if p.messages() {
		p.explain(&d, c.req.Rules, c.cls, c.att, r.Quiet)
	} else {
		nextEligible(&d, nil, nil)
	}
	c.resID = c.req.ReservationID
	if r.ReservationID != "" {
		c.resID = r.ReservationID
	}
	if c.hot != nil && !r.Replayed {
		switch {
		case d.Allowed:
			c.hot.evict(c.base, c.hotKey)
		case !d.CostTooHigh && d.RetryAfter > 0 && (d.Override.ID == 0 || d.Override.Kind == driver.Block):
			// Shadow rules never deny, so never cause a denial cached
			// here; a Limit override's denial is not cached (the
			// override may be changed elsewhere at any time), a Block's
			// until its end.
			c.hot.put(c.base, c.hotKey, c.req.Cost, a.start, l.now(), d)
		}
	}
	l.emit(c.event(d, nil, a.lat))
	return d, nil
}

// event is the observer's Event of c: its decision d or error err, the
// backend call's latency lat.
func (c *call) event(d Decision, err error, lat time.Duration) Event {
	return Event{Policy: c.p.name, PolicyRef: c.p, Shard: driver.HashTag(c.base), Op: c.op, Subject: c.subject, Cost: c.req.Cost,
		Priority: c.att.Priority, Zone: c.req.Zone, Identity: c.att.Identity, Decision: d, Err: err, Latency: lat, Batch: c.batch}
}
