package sdk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/freqcap/freqcap/internal/keyname"
	"github.com/freqcap/freqcap/sdk/driver"
)

// Limiter makes decisions for policies against one backend.
//
// A Limiter is safe for concurrent use; create one with New and share it.
// All counts live in the backend; the Limiter itself holds only its
// options and the hot-deny caches of the policies that ask for one
// (HotDenyCache). Every operation takes one Attempt (a subject, a cost
// and an optional idempotency key); most callers want Allow, the
// shorthand for a cost-1 Take without a key. TakeBatch decides many
// attempts at once; Peek asks without consuming; Wait delays instead of
// denying; Reserve checks now and commits or cancels later.
//
// Administration and diagnostics (overrides, resets, inspection, the
// backend's description, key layout, hot-deny statistics) are not the
// Limiter's methods but its Admin's (Limiter.Admin).
//
// The zero Limiter, like New(nil), has no backend: every method that
// returns an error returns one saying so (use New), its Admin's too,
// under a fail-open policy too — a missing backend is the caller's mistake, not a backend
// failure to decide through.
type Limiter struct {
	b       driver.Backend
	prefix  string
	clock   driver.Clock
	timeout time.Duration
	observe []func(Event) // WithObserver, in the order given
	hot     sync.Map      // policy name -> *hotSlot: the hot-deny caches
	people  people        // identities' persons and zones, read for decisions (people.go)
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithPrefix sets the first segment of every storage key (default
// "fc"), so that several applications can share one
// database. Bytes outside [A-Za-z0-9_.-] are escaped as %XX, so a prefix
// can never open a hash tag or forge a separator.
func WithPrefix(p string) Option {
	return func(l *Limiter) { l.prefix = sanitizePrefix(p) }
}

// WithClock sets the clock where the Limiter reads the time (degraded
// decisions, Wait's deadline check, Event.Latency, the hot-deny cache)
// and with which Wait sleeps; a *fakeclock.Clock is one for tests, its
// Sleep advancing it at once. By default a Limiter reads its
// backend's clock when the backend decides on one of this process (the
// memory backend: set memory.Options.Clock, once, and the Limiter
// follows), else the system clock. Decisions themselves always use the
// backend's clock (a Redis server's own).
func WithClock(c driver.Clock) Option {
	return func(l *Limiter) {
		if c != nil {
			l.clock = c
		}
	}
}

// WithTimeout bounds each backend call (0, the default, means only the
// caller's context bounds it).
func WithTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = max(d, 0) }
}

// WithObserver adds a function called after every decision, with its
// outcome and latency (for metrics, or a fleet.Recorder's Observe). It
// runs on the caller's goroutine and must be quick and safe for
// concurrent use. Several observers are called in the order given; a nil
// f is ignored.
func WithObserver(f func(Event)) Option {
	return func(l *Limiter) {
		if f != nil {
			l.observe = append(l.observe, f)
		}
	}
}

// New returns a Limiter that decides with b: backends/memory,
// backends/redis, or any implementation of package sdk/driver's contract
// (driver.Backend).
func New(b driver.Backend, opts ...Option) *Limiter {
	l := &Limiter{b: b, prefix: keyname.DefaultPrefix, clock: driver.SystemClock}
	if cb, ok := b.(driver.Clocked); ok && cb.Clock() != nil {
		l.clock = cb.Clock()
	}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	return l
}

// Allow takes one unit for s from every rule of p: shorthand for
// Take(ctx, p, Attempt{Subject: s}).
func (l *Limiter) Allow(ctx context.Context, p *Policy, s Subject) (Decision, error) {
	return l.Take(ctx, p, Attempt{Subject: s})
}

func (l *Limiter) reserve(ctx context.Context, p *Policy, a Attempt, ttl time.Duration) (Decision, *Reservation, error) {
	if err := l.supports("reserve", opReserve); err != nil {
		return Decision{}, nil, err
	}
	st, _ := l.b.(driver.Reserver) // nil for a nil backend, which fails in send
	if ttl < time.Millisecond || ttl > driver.MaxWindow {
		return Decision{}, nil, fmt.Errorf("sdk: reserve: ttl must be from 1ms to %v (MaxWindow), got %v", driver.MaxWindow, ttl)
	}
	c := new(call)
	d, err := l.take(ctx, c, "reserve", opReserve, p, a, ttl)
	if err != nil || !d.Allowed {
		return d, nil, err
	}
	return d, &Reservation{l: l, st: st, key: c.req.ReservationKey, id: c.resID, degraded: d.Degraded,
		hot: c.hot, base: c.base, hotKey: c.hotKey}, nil
}

// Reservation is units consumed by Reserve and held until Commit or
// Cancel (or until the reservation lapses, which cancels it). It is safe for
// concurrent use, but only the first Commit or Cancel succeeds.
type Reservation struct {
	l        *Limiter
	st       driver.Reserver
	key, id  string
	degraded bool
	// The hot-deny cache entry a Cancel evicts (hot nil: none).
	hot          *hotCache
	base, hotKey string
}

// ID returns the reservation's id (16 hex characters; empty for a
// degraded reservation).
func (r *Reservation) ID() string {
	if r == nil {
		return ""
	}
	return r.id
}

// Commit keeps the reserved units. It returns an error wrapping
// ErrReservationNotFound when the reservation was already settled or has
// lapsed (its units were then given back).
func (r *Reservation) Commit(ctx context.Context) error { return r.settle(ctx, "commit", true) }

// Cancel gives the reserved units back. It returns an error wrapping
// ErrReservationNotFound when the reservation was already settled or has
// lapsed.
func (r *Reservation) Cancel(ctx context.Context) error { return r.settle(ctx, "cancel", false) }

func (r *Reservation) settle(ctx context.Context, op string, commit bool) error {
	if r == nil {
		return fmt.Errorf("sdk: %s: nil reservation: %w", op, ErrReservationNotFound)
	}
	if r.degraded {
		return nil
	}
	if !commit && r.hot != nil {
		r.hot.evict(r.base, r.hotKey)
	}
	ctx, cancel := r.l.withTimeout(ctx)
	defer cancel()
	settle := r.st.Cancel
	if commit {
		settle = r.st.Commit
	}
	if err := settle(ctx, r.key, r.id); err != nil {
		return fmt.Errorf("sdk: %s: %w", op, err)
	}
	return nil
}

// take makes one decision (op names it for errors and events), in c
// (the caller's).
func (l *Limiter) take(ctx context.Context, c *call, op string, dop opKind, p *Policy, a Attempt, ttl time.Duration) (Decision, error) {
	a, err := l.identify(ctx, op, p, a)
	if err != nil {
		return Decision{}, err
	}
	if err := l.prepare(c, op, false, dop, p, a, ttl); err != nil {
		return Decision{}, err
	}
	if d, ok := l.cached(c); ok {
		return d, nil
	}
	return l.finish(c, l.send(ctx, c.kind, c.req))
}

// request builds the driver request for res.
func (l *Limiter) request(p *Policy, res resolved, n int64) driver.Request {
	var tv string
	if p.trailMax > 0 {
		tv = trailValues(p, res.subject)
	}
	return driver.Request{
		Policy:         p.name,
		Rules:          res.rules,
		Cost:           n,
		TrailKey:       res.trailKey,
		TrailMax:       p.trailMax,
		TrailTTL:       p.trailTTL,
		TrailValues:    tv,
		ReservationKey: res.reservationKey,
		OverrideKey:    res.overrideKey,
	}
}

// opKind is a driver operation.
type opKind uint8

const (
	opTake    opKind = iota // driver.Backend.Take
	opPeek                  // driver.Peeker.Peek
	opReserve               // driver.Reserver.Reserve
	opInspect               // driver.Inspector.Inspect
)

// supports returns an error wrapping errors.ErrUnsupported, naming op,
// when the backend lacks the optional interface kind needs.
func (l *Limiter) supports(op string, kind opKind) error {
	if err := l.hasBackend(op); err != nil {
		return err
	}
	var ok bool
	var what string
	switch kind {
	case opTake:
		return nil
	case opPeek:
		_, ok = l.b.(driver.Peeker)
		what = "peeks"
	case opReserve:
		_, ok = l.b.(driver.Reserver)
		what = "reservations"
	case opInspect:
		_, ok = l.b.(driver.Inspector)
		what = "inspection"
	}
	if ok {
		return nil
	}
	return fmt.Errorf("sdk: %s: backend %T does not support %s: %w", op, l.b, what, errors.ErrUnsupported)
}

// hasBackend returns an error naming op and wrapping errNilBackend when
// the Limiter has no backend. Every exported method that can fail checks
// it first.
func (l *Limiter) hasBackend(op string) error {
	if l.b == nil {
		return fmt.Errorf("sdk: %s: %w", op, errNilBackend)
	}
	return nil
}

// answer is a backend's answer to one request, with when it was asked
// (by the Limiter's clock) and how long it took.
type answer struct {
	r     driver.Result
	err   error
	start time.Time
	lat   time.Duration
}

// send calls the backend's operation kind under the Limiter's timeout
// and checks the shape of its answer. The caller has checked that the
// backend supports kind (supports).
func (l *Limiter) send(ctx context.Context, kind opKind, req driver.Request) answer {
	if l.b == nil {
		return answer{err: errNilBackend}
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	start := l.now()
	var r driver.Result
	var err error
	switch kind {
	case opPeek:
		r, err = l.b.(driver.Peeker).Peek(ctx, req)
	case opReserve:
		r, err = l.b.(driver.Reserver).Reserve(ctx, req)
	case opInspect:
		r, err = l.b.(driver.Inspector).Inspect(ctx, req)
	default:
		r, err = l.b.Take(ctx, req)
	}
	a := answer{r: r, err: err, start: start, lat: l.now().Sub(start)}
	if a.err == nil {
		a.err = checkResult(req, r)
	}
	if a.err != nil {
		a.r = driver.Result{}
	}
	return a
}

// checkResult checks that r answers req.
func checkResult(req driver.Request, r driver.Result) error {
	if len(r.Rules) != len(req.Rules) {
		return fmt.Errorf("backend answered %d rules, want %d", len(r.Rules), len(req.Rules))
	}
	return nil
}

func (l *Limiter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if l.timeout > 0 {
		return context.WithTimeout(ctx, l.timeout)
	}
	return ctx, noCancel // no deadline to release: no context of its own
}

func noCancel() {}

// now reads the Limiter's clock (the system clock in the zero Limiter).
func (l *Limiter) now() time.Time {
	if l.clock == nil {
		return driver.SystemClock.Now()
	}
	return l.clock.Now()
}

func (l *Limiter) emit(e Event) {
	for _, f := range l.observe {
		f(e)
	}
}

// newReservationID returns 16 random hex characters.
func newReservationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go >= 1.24)
	return hex.EncodeToString(b[:])
}
