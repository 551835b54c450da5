package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fcredis "github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/sdk"
)

// unique returns a value no other test uses, for subjects and policy names.
func unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// policy returns a one-rule fixed-window policy (limit per hour) keyed by
// user, fail-open when open is set.
func policy(t *testing.T, name string, limit int64, open bool) *sdk.Policy {
	t.Helper()
	var opts []sdk.PolicyOption
	if open {
		opts = append(opts, sdk.WithFailOpen())
	}
	p, err := sdk.NewPolicy(name, []sdk.Rule{
		sdk.FixedWindow("per-hour", limit, time.Hour).By("user"),
		sdk.SlidingWindow("per-min", limit+100, time.Minute).By("user"),
	}, opts...)
	if err != nil {
		t.Fatalf("NewPolicy(%q): %v", name, err)
	}
	return p
}

// newStandaloneClient returns a client to addr with the backend's
// recommended settings and the given I/O timeout, closed when t ends.
func newStandaloneClient(t *testing.T, addr string, io time.Duration) *goredis.Client {
	t.Helper()
	o := fcredis.NewClientOptions(addr).Simple()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = io, io, io, io
	o.PoolSize = 8
	c := goredis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// expectExact checks that subject s gets exactly limit allowed decisions on
// p and is then denied, all without degradation.
func expectExact(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, limit int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := int64(1); i <= limit+1; i++ {
		d, err := lim.Allow(ctx, p, s)
		if err != nil {
			t.Fatalf("Allow #%d = %v, want a decision", i, err)
		}
		if want := i <= limit; d.Allowed != want || d.Degraded {
			t.Fatalf("Allow #%d = allowed %v degraded %v (%v), want allowed %v degraded false",
				i, d.Allowed, d.Degraded, d.Err, want)
		}
		if got := d.Rules[0].Used; i <= limit && got != i {
			t.Fatalf("Allow #%d: rule %s used = %d, want %d", i, d.Rules[0].Rule, got, i)
		}
	}
}

// pollDecision calls Allow until it returns a non-degraded decision or the
// deadline passes; it returns how long that took. Each call is bounded by
// the limiter's own timeout.
func pollDecision(t *testing.T, lim *sdk.Limiter, p *sdk.Policy, s sdk.Subject, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < within {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := lim.Allow(ctx, p, s)
		cancel()
		switch {
		case err != nil:
			last = err
		case d.Degraded:
			last = d.Err
		default:
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no decision within %v; last error: %v", within, last)
	return 0
}

// ourGoroutines counts the goroutines running go-redis or freqcap code
// (the test's own goroutine excluded), from a full goroutine dump.
func ourGoroutines() (int, string) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	n := 0
	var dump []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "ourGoroutines") || strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "go-redis") {
			continue
		}
		if strings.Contains(g, "github.com/redis/go-redis") ||
			strings.Contains(g, "github.com/freqcap/freqcap/sdk") ||
			strings.Contains(g, "github.com/freqcap/freqcap/backends") {
			n++
			dump = append(dump, g)
		}
	}
	return n, strings.Join(dump, "\n\n")
}

// settleGoroutines polls until at most want of our goroutines remain and
// the total is at most total, failing after d.
func settleGoroutines(t *testing.T, want, total int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n, dump := ourGoroutines()
		all := runtime.NumGoroutine()
		if n <= want && all <= total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutine leak: %d go-redis/freqcap goroutines (want <= %d), %d in all (want <= %d) after %v:\n%s",
				n, want, all, total, d, dump)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
