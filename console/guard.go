package console

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// guard slows down guessing: it counts failed authentication attempts
// (bearer, basic auth, the sign-in form) per remote address, and basic
// auth's also per user name tried (the identity a guess claims; a bearer
// token or the sign-in form claims none beyond its address). The first
// freeFailures of a key cost nothing; each one after locks the key out
// for twice as long as the one before (1s, 2s, 4s … at most maxLockout),
// during which every attempt on it is answered 429 without checking the
// credentials. A success does not lower a count: only forgetAfter
// without failures does, so good credentials from the same address
// cannot buy more guesses. At most maxEntries keys are tracked: memory
// is bounded, whatever the number of attackers. It is safe for
// concurrent use and reads time only from now.
type guard struct {
	now func() time.Time

	mu sync.Mutex
	m  map[guardKey]*attempts
}

// guardKey is what failures are counted against: an address, or the
// hash of a user name tried (so a long name costs no more memory).
type guardKey struct {
	user bool
	v    string
}

func addrKey(addr string) guardKey { return guardKey{v: addr} }
func userKey(name string) guardKey { return guardKey{user: true, v: hashKey(name)} }

type attempts struct {
	fails int
	until time.Time // locked out before this
	last  time.Time // last failure
}

const (
	freeFailures = 5
	baseLockout  = time.Second
	maxLockout   = 5 * time.Minute
	forgetAfter  = 15 * time.Minute
	maxEntries   = 10000
)

func newGuard(now func() time.Time) *guard {
	return &guard{now: now, m: map[guardKey]*attempts{}}
}

// try judges one authentication attempt: it answers a 429 error,
// without calling verify, when any of keys is locked out (with the
// longest wait); else it calls verify and, when verify says no, records
// the failure against each of keys, returning the highest count among
// them and the lockout it starts (0 for none). verify runs under the
// guard's lock, so concurrent attempts are judged one after another and
// each sees the failures of those before it: a burst of simultaneous
// guesses gets no more through than the same guesses in a row. verify
// must be quick (credentials are compared in memory).
func (g *guard) try(c echo.Context, verify func() bool, keys ...guardKey) (ok bool, fails int, wait time.Duration, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if err := g.lockedOut(c, now, keys); err != nil {
		return false, 0, 0, err
	}
	if verify() {
		return true, 0, 0, nil
	}
	fails, wait = g.failed(now, keys)
	return false, fails, wait, nil
}

// lockedOut returns a 429 error when any of keys is locked out at now,
// with the longest wait. g.mu is held.
func (g *guard) lockedOut(c echo.Context, now time.Time, keys []guardKey) error {
	var wait time.Duration
	user := false
	for _, k := range keys {
		if a, ok := g.m[k]; ok {
			if w := a.until.Sub(now); w > wait {
				wait, user = w, k.user
			}
		}
	}
	if wait <= 0 {
		return nil
	}
	secs := strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
	c.Response().Header().Set("Retry-After", secs)
	who := "from your address"
	if user {
		who = "for this user name"
	}
	return echo.NewHTTPError(http.StatusTooManyRequests, "too many failed sign-in attempts "+who+": try again in "+secs+"s")
}

// failed records a failure at now against each of keys and returns the
// highest count among them and the longest lockout it starts (0 for
// none). g.mu is held.
func (g *guard) failed(now time.Time, keys []guardKey) (int, time.Duration) {
	most, longest := 0, time.Duration(0)
	for _, k := range keys {
		a, ok := g.m[k]
		if ok && now.Sub(a.last) > forgetAfter {
			a.fails = 0
		}
		if !ok {
			if len(g.m) >= maxEntries {
				g.prune(now)
			}
			a = &attempts{}
			g.m[k] = a
		}
		a.fails++
		a.last = now
		if n := a.fails - freeFailures; n > 0 {
			wait := maxLockout
			if n <= 20 {
				wait = min(baseLockout<<(n-1), maxLockout)
			}
			a.until = now.Add(wait)
			longest = max(longest, wait)
		}
		most = max(most, a.fails)
	}
	return most, longest
}

// prune drops idle keys, and when none is idle, enough others to make
// room: an attacker with many addresses or names can only shorten the
// memory of the others' failures, never grow it.
func (g *guard) prune(now time.Time) {
	for k, a := range g.m {
		if now.Sub(a.last) > forgetAfter && !now.Before(a.until) {
			delete(g.m, k)
		}
	}
	for k := range g.m {
		if len(g.m) < maxEntries {
			break
		}
		delete(g.m, k)
	}
}

func (g *guard) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}
