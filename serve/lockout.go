package serve

import (
	"net"
	"sync"
	"time"
)

// lockout slows down guessing secrets, by the console's rule: it counts
// the calls that send a credential the server does not know (or an
// Authorization header that is not a bearer token) per client address
// (the host of the connection's remote address; a bearer secret claims no
// identity beyond it). The first freeFailures of an address cost nothing;
// each one after locks it out for twice as long as the one before (1s,
// 2s, 4s … at most maxLockout), during which every call from it that
// sends a credential is refused without checking it. A success does not
// lower the count — good credentials from the same address cannot buy
// more guesses — only forgetAfter without failures does. At most
// maxEntries addresses are tracked. Safe for concurrent use; it reads
// time only from now.
type lockout struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*failures
}

type failures struct {
	n     int
	until time.Time // locked out before this
	last  time.Time // last failure
}

// The lockout's rule, the console's (console/guard.go).
const (
	freeFailures = 5
	baseLockout  = time.Second
	maxLockout   = 5 * time.Minute
	forgetAfter  = 15 * time.Minute
	maxEntries   = 10000
)

func newLockout(now func() time.Time) *lockout {
	return &lockout{now: now, m: map[string]*failures{}}
}

// addrHost is the host of a remote address ("host:port"), or the address.
func addrHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// wait returns how long host is still locked out (0: it is not).
func (l *lockout) wait(host string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.m[host]
	if !ok {
		return 0
	}
	return max(0, f.until.Sub(l.now()))
}

// failed records a failure from host and returns the failures counted
// and the lockout it starts (0 for none).
func (l *lockout) failed(host string) (int, time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.m[host]
	if ok && now.Sub(f.last) > forgetAfter {
		f.n = 0
	}
	if !ok {
		if len(l.m) >= maxEntries {
			l.prune(now)
		}
		f = &failures{}
		l.m[host] = f
	}
	f.n++
	f.last = now
	var wait time.Duration
	if n := f.n - freeFailures; n > 0 {
		wait = maxLockout
		if n <= 20 {
			wait = min(baseLockout<<(n-1), maxLockout)
		}
		f.until = now.Add(wait)
	}
	return f.n, wait
}

// prune drops idle addresses, and when none is idle, enough others to
// make room: an attacker with many addresses can only shorten the memory
// of the others' failures, never grow it.
func (l *lockout) prune(now time.Time) {
	for k, f := range l.m {
		if now.Sub(f.last) > forgetAfter && !now.Before(f.until) {
			delete(l.m, k)
		}
	}
	for k := range l.m {
		if len(l.m) < maxEntries {
			break
		}
		delete(l.m, k)
	}
}
