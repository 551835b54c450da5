package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/testserver"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// The real binary with --policies store on a real Redis whose store is
// empty: it serves no policy, then the version applied through its own
// API (PolicyService, admin credential), then a version applied by
// another process (policyfile, as `freqcap policy apply` does), each
// within the watch bound, without restart.
func TestServePolicyStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	rs := redistest.NewServer(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--redis", rs.Addr(), "--prefix", "servestore", "--policies", "store", "--audit", auditFile)
	cmd.Env = append(os.Environ(), "FREQCAP_SERVE_TOKENS=ops:0ps-s3cret-1:admin,take@* sender:s3nder-s3cret:take@news")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	url, banner := "", ""
	for url == "" && lines.Scan() {
		if _, rest, ok := strings.Cut(lines.Text(), "freqcap serve on "); ok {
			url, _, _ = strings.Cut(rest, " ")
			banner = lines.Text()
		}
	}
	if url == "" {
		t.Fatal("freqcap serve did not say where it listens")
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if !strings.Contains(banner, "policy store version 0") {
		t.Errorf("banner %q does not say the store version (0: empty)", banner)
	}
	ctx := context.Background()
	ops := client.New(url, &client.Options{Token: "0ps-s3cret-1"})
	sender := client.New(url, &client.Options{Token: "s3nder-s3cret", Protocol: client.ConnectJSON})
	news, err := sdk.NewPolicy("news", []sdk.Rule{sdk.FixedWindow("daily", 1, time.Hour).By("user")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sender.Take(ctx, news, sdk.Attempt{Subject: sdk.Subject{"user": "a"}}); !errors.Is(err, sdk.ErrInvalidPolicy) {
		t.Fatalf("Take before any version = %v, want an unknown policy", err)
	}
	doc := "policies:\n  - name: news\n    rules:\n      - {name: daily, algorithm: fixed_window, limit: 1, window: 1h, by: [user]}\n"
	if _, err := ops.ApplyPolicies(ctx, []byte(doc), 0, false, "first"); err != nil {
		t.Fatalf("ApplyPolicies: %v", err)
	}
	await := func(v int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // the empty store is retried every second; the machine may be loaded
		for {
			sp, err := sender.ServedPolicies(ctx)
			if err == nil && sp.Version == v {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("version %d not served after 20 s (last: %+v, %v)", v, sp, err)
			}
			time.Sleep(20 * time.Millisecond) // polling a server until a deadline
		}
	}
	await(1)
	audit, err := os.ReadFile(auditFile)
	if err != nil || !strings.Contains(string(audit), `"action":"policy-apply"`) || !strings.Contains(string(audit), `"name":"ops"`) ||
		!strings.Contains(string(audit), "version 1: first") {
		t.Errorf("audit file = %q, %v; want the apply by ops, version 1, its reason", audit, err)
	}
	for i, want := range []bool{true, false} {
		if d, err := sender.Take(ctx, news, sdk.Attempt{Subject: sdk.Subject{"user": "a"}}); err != nil || d.Allowed != want {
			t.Fatalf("Take #%d under version 1 = %+v, %v; want allowed %v", i+1, d, err, want)
		}
	}

	// Another process applies version 2 (limit 2) to the same store.
	rc := goredis.NewUniversalClient(testserver.Patient(redis.NewClientOptions(rs.Addr())))
	defer rc.Close()
	st := policystore.New(redis.New(rc, nil), policystore.WithPrefix("servestore"))
	plan, err := st.Plan(ctx, []byte(strings.Replace(doc, "limit: 1", "limit: 2", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(ctx, plan, "cli", "two a day"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	await(2)
	t.Logf("version 2 served %v after it was applied by another process", time.Since(start))
	if d, err := sender.Take(ctx, news, sdk.Attempt{Subject: sdk.Subject{"user": "a"}}); err != nil || !d.Allowed || d.Rules[0].Used != 2 {
		t.Fatalf("Take under version 2 = %+v, %v; want allowed, 2 used (the count carried)", d, err)
	}
}
