package console

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// guard slows down guessing: it counts failed authentication attempts
// (bearer, basic auth, the sign-in form) per remote address. The first
// freeFailures cost nothing; each one after locks the address out for
// twice as long as the one before (1s, 2s, 4s … at most maxLockout),
// during which every attempt from it is answered 429 without checking
// the credentials. A success forgets the address; so does forgetAfter
// without failures. At most maxEntries addresses are tracked: memory is
// bounded, whatever the number of attackers. It is safe for concurrent
// use and reads time only from now.
type guard struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*attempts
}

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
	return &guard{now: now, m: map[string]*attempts{}}
}

// check returns a 429 error when addr is locked out.
func (g *guard) check(c echo.Context) error {
	addr := c.RealIP()
	g.mu.Lock()
	a, ok := g.m[addr]
	var wait time.Duration
	if ok {
		wait = a.until.Sub(g.now())
	}
	g.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	secs := int64((wait + time.Second - 1) / time.Second)
	c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return echo.NewHTTPError(http.StatusTooManyRequests, "too many failed sign-in attempts from your address: try again in "+strconv.FormatInt(secs, 10)+"s")
}

// failed records a failure from addr and returns the failures counted
// and the lockout it starts (0 for none).
func (g *guard) failed(addr string) (int, time.Duration) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.m[addr]
	if ok && now.Sub(a.last) > forgetAfter {
		a.fails = 0
	}
	if !ok {
		if len(g.m) >= maxEntries {
			g.prune(now)
		}
		a = &attempts{}
		g.m[addr] = a
	}
	a.fails++
	a.last = now
	var wait time.Duration
	if n := a.fails - freeFailures; n > 0 {
		wait = maxLockout
		if n <= 20 {
			wait = min(baseLockout<<(n-1), maxLockout)
		}
		a.until = now.Add(wait)
	}
	return a.fails, wait
}

// succeeded forgets addr.
func (g *guard) succeeded(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, addr)
}

// prune drops idle addresses, and when none is idle, enough others to
// make room: an attacker with many addresses can only shorten the memory
// of the others' failures, never grow it.
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
