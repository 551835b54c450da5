package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
)

// TestSentinelCommands points detect, bench and the console's backend at a
// master found through a real Sentinel.
func TestSentinelCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a master, a replica and a Sentinel")
	}
	z := redistest.NewSentinel(t)
	server := []string{"--sentinel", z.Addr(), "--master", z.Name}

	out, err := captureStdout(t, func() error { return runDetect(server) })
	if err != nil || !strings.Contains(out, "sliding_window") {
		t.Errorf("detect via Sentinel = %v:\n%s", err, out)
	}

	out, err = captureStdout(t, func() error {
		return runBench(append([]string{"-workers", "2", "-duration", "200ms", "-warmup", "0", "-subjects", "50"}, server...))
	})
	if err != nil || !strings.Contains(out, `master "freqcap" via Sentinel `+z.Addr()) || !strings.Contains(out, "errors 0;") {
		t.Errorf("bench via Sentinel = %v:\n%s", err, out)
	}

	f, err := parseConsoleFlags(server, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	b, closeFn, err := consoleBackend(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	p, err := sdk.NewPolicy("p", []sdk.Rule{sdk.FixedWindow("f", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	lim := sdk.New(b, sdk.WithPrefix("fc-sentinel-console"))
	for i, want := range []bool{true, false} {
		d, err := lim.Allow(context.Background(), p, sdk.Subject{"user": "u"})
		if err != nil || d.Allowed != want {
			t.Errorf("console backend via Sentinel, decision %d = %v, %v; want allowed %v", i+1, d.Allowed, err, want)
		}
	}
	// The decision's counter is on the master the Sentinel names (the
	// bench above left keys of its own there: look for this one), in the
	// packed value of the rule's dimension set (docs/DESIGN.md, Keys).
	m := goredis.NewClient(&goredis.Options{Addr: z.Master.Addr()})
	defer m.Close()
	key := "fc-sentinel-console:{u}:p:="
	if n, err := m.Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Errorf("EXISTS %s on the master = %d, %v; want 1", key, n, err)
	}
}

// TestPasswordFlags: --user/--password and $FREQCAP_REDIS_PASSWORD reach
// a server that requires a password.
func TestPasswordFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := redistest.NewServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FREQCAP_REDIS_PASSWORD", "")
	if _, err := captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr(), "--timeout", "3s"}) }); err == nil || !strings.Contains(err.Error(), "NOAUTH") || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("detect without a password = %v, want authentication failed (NOAUTH)", err)
	}
	// A wrong password says so (it used to read "COMMAND INFO: unexpected
	// reply <nil>"), in detect and in the console.
	if _, err := captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr(), "--password", "wrong"}) }); err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "unexpected reply") {
		t.Errorf("detect with a wrong password = %v, want authentication failed", err)
	}
	f, err := parseConsoleFlags([]string{"--redis", srv.Addr(), "--password", "wrong"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := consoleBackend(context.Background(), f); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("console backend with a wrong password = %v, want authentication failed", err)
	}
	if _, err := captureStdout(t, func() error {
		return runBench([]string{"--redis", srv.Addr(), "--password", "wrong", "-duration", "100ms", "-warmup", "0"})
	}); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("bench with a wrong password = %v, want authentication failed", err)
	}
	if out, err := captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr(), "--password", "s3cret"}) }); err != nil {
		t.Errorf("detect --password = %v:\n%s", err, out)
	}
	t.Setenv("FREQCAP_REDIS_PASSWORD", "s3cret")
	if out, err := captureStdout(t, func() error { return runDetect([]string{"--redis", srv.Addr(), "--user", "default"}) }); err != nil {
		t.Errorf("detect with $FREQCAP_REDIS_PASSWORD and --user default = %v:\n%s", err, out)
	}
}
