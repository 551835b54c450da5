package lockout

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// TestRule: the free failures, then lockouts doubling up to MaxLockout;
// a success neither lowers the count nor is checked while locked out;
// ForgetAfter without failures forgets the key.
func TestRule(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	g := New(clk.Now)
	k := Addr("192.0.2.1")
	fail := func() bool { return false }
	for i := 1; i <= FreeFailures; i++ {
		if v := g.Try(fail, k); v.OK || v.Locked != 0 || v.Wait != 0 || v.Failures != i {
			t.Fatalf("failure %d = %+v, want counted without a lockout", i, v)
		}
	}
	var waits []time.Duration
	for range 12 {
		v := g.Try(fail, k)
		if v.Locked != 0 {
			t.Fatalf("attempt after the lockout ended = %+v, want checked", v)
		}
		waits = append(waits, v.Wait)
		// Locked out: a good credential is not even checked.
		checked := false
		if got := g.Try(func() bool { checked = true; return true }, k); got.Locked != v.Wait || checked || got.OK {
			t.Fatalf("good credential during a %v lockout = %+v (checked %v), want refused unchecked", v.Wait, got, checked)
		}
		clk.Advance(v.Wait)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("lockouts %v, want %v seconds", waits, want)
		}
	}
	if v := g.Try(func() bool { return true }, k); !v.OK {
		t.Fatalf("good credential once free = %+v, want OK", v)
	}
	if v := g.Try(fail, k); v.Wait != MaxLockout {
		t.Fatalf("failure after a success = %+v, want the count kept (a %v lockout)", v, MaxLockout)
	}
	clk.Advance(ForgetAfter + time.Second)
	if v := g.Try(fail, k); v.Failures != 1 || v.Wait != 0 {
		t.Fatalf("failure after %v without any = %+v, want the first again", ForgetAfter, v)
	}
}

// TestUserKey: a user name is its own key, whichever address tries it.
func TestUserKey(t *testing.T) {
	g := New(fakeclock.New(time.Unix(0, 0)).Now)
	for i := range FreeFailures + 1 {
		g.Try(func() bool { return false }, Addr("198.51.100."+strconv.Itoa(i)), User("alice"))
	}
	v := g.Try(func() bool { return true }, Addr("203.0.113.1"), User("alice"))
	if v.Locked == 0 || !v.Key.User {
		t.Fatalf("alice from a fresh address = %+v, want locked out by the user name", v)
	}
	if v := g.Try(func() bool { return true }, Addr("203.0.113.1"), User("bob")); !v.OK {
		t.Fatalf("bob from that address = %+v, want OK", v)
	}
}

// TestConcurrent: attempts made all at once are judged one after another:
// the free failures and one more are checked, every other is refused.
func TestConcurrent(t *testing.T) {
	g := New(fakeclock.New(time.Unix(0, 0)).Now)
	var (
		mu      sync.Mutex
		checked int
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			g.Try(func() bool { mu.Lock(); checked++; mu.Unlock(); return false }, Addr("192.0.2.9"))
		}()
	}
	close(start)
	wg.Wait()
	if checked != FreeFailures+1 {
		t.Fatalf("500 simultaneous guesses: %d checked, want %d", checked, FreeFailures+1)
	}
}

// TestBounded: memory stays bounded whatever the number of keys.
func TestBounded(t *testing.T) {
	g := New(fakeclock.New(time.Unix(0, 0)).Now)
	for i := range MaxEntries + 500 {
		g.Try(func() bool { return false }, Addr("10.0."+strconv.Itoa(i)), User("user-"+strconv.Itoa(i)))
	}
	if n := g.Size(); n > MaxEntries {
		t.Fatalf("Guard tracks %d keys, want at most %d", n, MaxEntries)
	}
}
