package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
)

// The real binary on a real Redis, under load from both protocols, gets
// SIGTERM: it exits 0, and every take it answered is counted in Redis,
// and no other.
func TestServeSIGTERMUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	rs := redistest.NewServer(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	policyFile := filepath.Join(dir, "policies.yaml")
	const policies = "policies:\n  - name: bulk\n    rules:\n      - {name: big, algorithm: fixed_window, limit: 1000000, window: 24h, by: [user]}\n"
	if err := os.WriteFile(policyFile, []byte(policies), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--redis", rs.Addr(), "--prefix", "sigterm", "--policies", policyFile)
	cmd.Env = append(os.Environ(), "FREQCAP_SERVE_TOKENS=loader:loader-secret:take@bulk")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	url := ""
	for url == "" && lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "freqcap serve on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
	}
	if url == "" {
		t.Fatal("freqcap serve did not say where it listens")
	}
	var log strings.Builder
	logDone := make(chan struct{})
	go func() {
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
		}
		close(logDone)
	}()

	bulk, err := sdk.NewPolicy("bulk", []sdk.Rule{sdk.FixedWindow("big", 1000000, 24*time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	const workers = 8
	answered := make([]int64, workers)
	var total, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		proto := client.GRPC
		if w%2 == 1 {
			proto = client.ConnectJSON
		}
		c := client.New(url, &client.Options{Protocol: proto, Token: "loader-secret", Timeout: 20 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sdk.Subject{"user": fmt.Sprintf("w%d", w)}
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; i < 200000 && time.Now().Before(deadline) && refused.Load() < 100; i++ {
				d, err := c.Take(context.Background(), bulk, sdk.Attempt{Subject: s})
				switch {
				case err != nil:
					refused.Add(1)
				case !d.Allowed:
					t.Errorf("worker %d: denied", w)
					return
				default:
					answered[w]++
					total.Add(1)
				}
			}
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for total.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the workers' progress until a deadline
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { <-logDone; waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("freqcap serve exited with %v after SIGTERM, want 0\n%s", err, log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("freqcap serve still running 60 s after SIGTERM")
	}
	wg.Wait()
	if total.Load() < 300 {
		t.Fatalf("only %d takes answered before SIGTERM", total.Load())
	}
	if !strings.Contains(log.String(), "shutting down") {
		t.Errorf("log lacks the shutdown line:\n%s", log.String())
	}
	rc := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(rs.Addr())))
	defer rc.Close()
	lim := sdk.New(redis.New(rc, nil), sdk.WithPrefix("sigterm"))
	for w := range workers {
		in, err := lim.Admin().Inspect(context.Background(), bulk, sdk.Subject{"user": fmt.Sprintf("w%d", w)})
		if err != nil {
			t.Fatal(err)
		}
		if got := in.Rules[0].Used; got != answered[w] {
			t.Errorf("worker %d: %d takes counted in Redis, %d answered", w, got, answered[w])
		}
	}
	t.Logf("%d takes answered, then %d calls refused", total.Load(), refused.Load())
}

// serve's collector target: --gc-percent when given, whatever $GOGC
// says; else $GOGC (the runtime applied it: serve leaves it); else 400.
func TestServeGCPercent(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		gogc   string
		want   int
		set    bool
		errSub string
	}{
		{nil, "", defaultGCPercent, true, ""},
		{nil, "100", 0, false, ""},
		{[]string{"--gc-percent", "150"}, "", 150, true, ""},
		{[]string{"--gc-percent", "150"}, "100", 150, true, ""},
		{[]string{"--gc-percent", "-1"}, "", -1, true, ""},
		{[]string{"--gc-percent", "-2"}, "", 0, false, "--gc-percent -2"},
	} {
		f, err := parseServeFlags(tc.args, io.Discard)
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("parseServeFlags(%q) = %v, want an error naming %q", tc.args, err, tc.errSub)
			}
			continue
		}
		if err != nil {
			t.Fatalf("parseServeFlags(%q) = %v", tc.args, err)
		}
		n, set := f.gcTarget(func(k string) string {
			if k == "GOGC" {
				return tc.gogc
			}
			return ""
		})
		if n != tc.want || set != tc.set {
			t.Errorf("%q with GOGC=%q: gcTarget = %d, %v; want %d, %v", tc.args, tc.gogc, n, set, tc.want, tc.set)
		}
	}
}
