// Package lockout slows down guessing secrets: the one rule the console
// and freqcap serve apply to failed credentials.
//
// A Guard counts failed authentication attempts per key (a remote
// address, or a user name tried). The first FreeFailures of a key cost
// nothing; each one after locks the key out for twice as long as the one
// before (1s, 2s, 4s … at most MaxLockout), during which every attempt
// on it is refused without checking its credentials. A success does not
// lower a count: only ForgetAfter without failures does, so good
// credentials from the same address cannot buy more guesses. Attempts
// are judged one after another (Try), so a burst of simultaneous guesses
// gets no more checked than the same guesses in a row. At most
// MaxEntries keys are tracked: memory is bounded, whatever the number of
// attackers.
package lockout

import (
	"crypto/sha256"
	"sync"
	"time"
)

// The rule.
const (
	FreeFailures = 5
	BaseLockout  = time.Second
	MaxLockout   = 5 * time.Minute
	ForgetAfter  = 15 * time.Minute
	MaxEntries   = 10000
)

// Key is what failures are counted against: an address, or the hash of a
// user name tried (so a long name costs no more memory).
type Key struct {
	User bool
	v    string
}

// Addr is the key of a remote address.
func Addr(addr string) Key { return Key{v: addr} }

// User is the key of a user name tried.
func User(name string) Key {
	sum := sha256.Sum256([]byte(name))
	return Key{User: true, v: string(sum[:])}
}

// Verdict is the outcome of one attempt.
type Verdict struct {
	// OK: the credentials were good.
	OK bool
	// Locked is how long the attempt's longest-locked key is still locked
	// out, and Key that key; when Locked > 0 the credentials were not
	// checked.
	Locked time.Duration
	Key    Key
	// Failures and Wait, for a failed attempt: the highest count among
	// its keys, and the lockout it starts (0 for none).
	Failures int
	Wait     time.Duration
}

// Guard applies the rule. It is safe for concurrent use and reads time
// only from the clock it was given.
type Guard struct {
	now func() time.Time

	mu sync.Mutex
	m  map[Key]*attempts
}

type attempts struct {
	fails int
	until time.Time // locked out before this
	last  time.Time // last failure
}

// New returns a Guard reading time from now.
func New(now func() time.Time) *Guard {
	return &Guard{now: now, m: map[Key]*attempts{}}
}

// Try judges one authentication attempt against keys: locked out when
// any of them is (verify is not called), else verify's answer, and a
// failure is recorded against each key. verify runs under the Guard's
// lock, so concurrent attempts are judged one after another and each
// sees the failures of those before it; it must be quick (credentials
// compared in memory, the request already read).
func (g *Guard) Try(verify func() bool, keys ...Key) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	var v Verdict
	for _, k := range keys {
		if a, ok := g.m[k]; ok {
			if w := a.until.Sub(now); w > v.Locked {
				v.Locked, v.Key = w, k
			}
		}
	}
	if v.Locked > 0 {
		return v
	}
	if verify() {
		return Verdict{OK: true}
	}
	for _, k := range keys {
		a, ok := g.m[k]
		if ok && now.Sub(a.last) > ForgetAfter {
			a.fails = 0
		}
		if !ok {
			if len(g.m) >= MaxEntries {
				g.prune(now)
			}
			a = &attempts{}
			g.m[k] = a
		}
		a.fails++
		a.last = now
		if n := a.fails - FreeFailures; n > 0 {
			wait := MaxLockout
			if n <= 20 {
				wait = min(BaseLockout<<(n-1), MaxLockout)
			}
			a.until = now.Add(wait)
			v.Wait = max(v.Wait, wait)
		}
		v.Failures = max(v.Failures, a.fails)
	}
	return v
}

// prune drops idle keys, and when that frees too little, others until a
// tenth of the room is free (so that a full Guard prunes once per
// MaxEntries/10 new keys, not on every one): an attacker with many
// addresses or names can only shorten the memory of the others'
// failures, never grow it. g.mu is held.
func (g *Guard) prune(now time.Time) {
	for k, a := range g.m {
		if now.Sub(a.last) > ForgetAfter && !now.Before(a.until) {
			delete(g.m, k)
		}
	}
	for k := range g.m {
		if len(g.m) <= MaxEntries-MaxEntries/10 {
			break
		}
		delete(g.m, k)
	}
}

// Size is how many keys the Guard tracks.
func (g *Guard) Size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}
