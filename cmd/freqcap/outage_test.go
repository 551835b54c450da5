package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk/fakeclock"
)

// syncBuffer is a bytes.Buffer safe for the console's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startConsole runs freqcap console with args on a free loopback port,
// logging to the returned buffer, until the test ends.
func startConsole(t *testing.T, now func() time.Time, args ...string) (base string, logs *syncBuffer) {
	t.Helper()
	logs = &syncBuffer{}
	ready := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveConsole(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), consoleEnv{
			stderr: logs, getenv: func(string) string { return "" }, now: now,
			ready: func(a net.Addr) { ready <- a },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("console returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("console did not stop within 30s")
		}
	})
	select {
	case a := <-ready:
		return "http://" + a.String(), logs
	case err := <-done:
		t.Fatalf("console ended before listening: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("console not listening after 60s:\n%s", logs.String())
	}
	return "", nil
}

// consoleLoad sends rounds of requests to every page and endpoint that
// reads the backend, from a few workers; each round is bounded by count,
// and the whole by a deadline.
func consoleLoad(t *testing.T, base string, rounds int) (sent int) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	reqs := []struct{ method, path, body string }{
		{http.MethodGet, "/api/v1/inspect?policy=api&user=u&campaign=c", ""},
		{http.MethodGet, "/api/v1/inspect?policy=push&user=u", ""},
		{http.MethodGet, "/api/v1/stats?policy=push", ""},
		{http.MethodPost, "/api/v1/reset", `{"policy":"push","subject":{"user":"u"}}`},
		{http.MethodGet, "/", ""},
		{http.MethodGet, "/live/overview", ""},
		{http.MethodGet, "/subject?policy=push&user=u", ""},
		{http.MethodGet, "/live/subject?policy=push&user=u", ""},
	}
	deadline := time.Now().Add(60 * time.Second)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range rounds {
				for _, r := range reqs {
					if time.Now().After(deadline) {
						return
					}
					hr, err := http.NewRequest(r.method, base+r.path, strings.NewReader(r.body))
					if err != nil {
						t.Error(err)
						return
					}
					if r.body != "" {
						hr.Header.Set("Content-Type", "application/json")
					}
					res, err := hc.Do(hr)
					if err != nil {
						t.Errorf("%s %s: %v", r.method, r.path, err)
						return
					}
					res.Body.Close()
					mu.Lock()
					sent++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return sent
}

var logLineRE = regexp.MustCompile(`(?m)^.*level=(?:WARN|ERROR) msg=("[^"]*"|\S+).*$`)

// TestConsoleOutageLogs: a real redis-server killed under load. The
// console writes one line per kind of failure per interval (the clock
// stands still, so one in all), go-redis's own lines come through the
// same limiter instead of raw "pool.go" lines, and once the interval has
// passed the next line of a kind says how many were held back.
func TestConsoleOutageLogs(t *testing.T) {
	srv := redistest.NewServer(t)
	clock := fakeclock.New(time.Now())
	base, logs := startConsole(t, clock.Now, "--redis", srv.Addr(), "--timeout", "2s")
	if n := consoleLoad(t, base, 2); n == 0 {
		t.Fatal("no request answered with Redis up")
	}
	if m := logLineRE.FindAllString(logs.String(), -1); len(m) > 0 {
		t.Fatalf("warnings with Redis up:\n%s", strings.Join(m, "\n"))
	}
	mark := len(logs.String())
	srv.Stop(t)
	sent := consoleLoad(t, base, 10)
	out := logs.String()[mark:]
	lines := logLineRE.FindAllStringSubmatch(out, -1)
	perMsg := map[string]int{} // by message, and path for the error handler's
	for _, m := range lines {
		site := m[1]
		if p := regexp.MustCompile(` path=(\S+)`).FindStringSubmatch(m[0]); p != nil {
			site += " " + p[1]
		}
		perMsg[site]++
	}
	t.Logf("%d requests during the outage; %d log lines: %v\n%s", sent, len(lines), perMsg, out)
	if strings.Contains(out, "pool.go") || regexp.MustCompile(`(?m)^redis: `).MatchString(out) {
		t.Errorf("raw go-redis lines in the log:\n%s", out)
	}
	if len(lines) == 0 || !strings.Contains(out, "connection refused") {
		t.Fatalf("the outage was not logged:\n%s", out)
	}
	// A kind is a log site and the kind of its error (a refused dial, a
	// timeout …): a few per site at most, never one per request.
	for msg, n := range perMsg {
		if n > 3 {
			t.Errorf("%d lines of %s, want at most one per kind of error", n, msg)
		}
	}
	if len(lines) > 30 {
		t.Errorf("%d log lines for %d failing requests, want one per kind:\n%s", len(lines), sent, out)
	}
	if !strings.Contains(out, `msg="redis client"`) {
		t.Errorf("go-redis's own lines do not come through the console's log:\n%s", out)
	}
	// The interval passes: the next line of a kind carries the count.
	clock.Advance(10 * time.Second)
	mark = len(logs.String())
	consoleLoad(t, base, 1)
	if out := logs.String()[mark:]; !regexp.MustCompile(`suppressed=\d+`).MatchString(out) {
		t.Errorf("after the interval no line says how many were held back:\n%s", out)
	}
}
