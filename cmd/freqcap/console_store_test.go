package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/freqcap/freqcap/backends/redis"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/internal/seed"
	"github.com/freqcap/freqcap/sdk/policystore"
)

// get fetches base+path and returns the body, failing on a status other
// than 200.
func getPage(t *testing.T, base, path string) string {
	t.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, want 200:\n%s", path, res.StatusCode, b)
	}
	return string(b)
}

// TestConsoleStoreMemory: --policies store on the memory backend gives an
// empty store the seed policies as version 1 and follows it: an apply
// through the API reaches it (and its demo traffic) within 10 s.
func TestConsoleStoreMemory(t *testing.T) {
	base, logs := startConsole(t, time.Now, "--policies", "store", "--demo", "--demo-rate", "200")
	body := getPage(t, base, "/policies/edit")
	if !strings.Contains(body, `<strong id="current-version">1</strong>`) || !strings.Contains(body, "freqcap-console") {
		t.Errorf("the editor does not show version 1 applied by freqcap-console:\n%s\nlogs:\n%s", body, logs.String())
	}
	if body := getPage(t, base, "/"); !strings.Contains(body, `This console runs policy-store version <strong id="running-version">1</strong>`) {
		t.Errorf("the overview does not name version 1:\n%s", body)
	}
	// An apply through the API (auth off: everyone is an admin); the
	// console, and its demo traffic, move to version 2.
	v2 := strings.Replace(string(seed.YAML), "limit: 50, window: 24h", "limit: 40, window: 24h", 1)
	reqBody, _ := json.Marshal(map[string]any{"yaml": v2, "base": 1, "reason": "40 per day"})
	res, err := http.Post(base+"/api/v1/policies/apply", "application/json", bytes.NewReader(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/policies/apply = %d %s", res.StatusCode, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(getPage(t, base, "/"), `<strong id="running-version">2</strong>`) {
		if time.Now().After(deadline) {
			t.Fatalf("the console does not run version 2 within 10 s; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "policy version in force") {
		t.Errorf("the change is not logged:\n%s", logs.String())
	}
}

// TestConsoleStoreRedis: on Redis, --policies store refuses an empty
// store; once a version is applied the console follows the store without
// the flag, and picks up a version applied by another process.
func TestConsoleStoreRedis(t *testing.T) {
	addr := redistest.Standalone(t)
	ctx := context.Background()
	// The server is shared with the package's other tests (and may be
	// FREQCAP_TEST_REDIS): a prefix of this run's own.
	prefix := "console-store-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	err := serveConsole(ctx, []string{"--addr", "127.0.0.1:0", "--redis", addr, "--prefix", prefix, "--policies", "store"}, consoleEnv{stderr: io.Discard, getenv: func(string) string { return "" }, now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "the policy store is empty") {
		t.Fatalf("console --policies store on an empty store = %v, want an error saying the store is empty", err)
	}

	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	st := policystore.New(redis.New(c, nil), policystore.WithPrefix(prefix))
	apply := func(src []byte, reason string) {
		t.Helper()
		plan, err := st.Plan(ctx, src)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if _, err := st.Apply(ctx, plan, "test", reason); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	apply(seed.YAML, "first")
	base, logs := startConsole(t, time.Now, "--redis", addr, "--prefix", prefix)
	if body := getPage(t, base, "/policies"); !strings.Contains(body, `<strong id="running-version">1</strong>`) {
		t.Fatalf("the console does not run version 1:\n%s\nlogs:\n%s", body, logs.String())
	}
	apply([]byte(strings.Replace(string(seed.YAML), "limit: 50, window: 24h", "limit: 40, window: 24h", 1)), "40 per day")
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := getPage(t, base, "/policies")
		if strings.Contains(body, `<strong id="running-version">2</strong>`) {
			if !strings.Contains(body, `<td class="num limit" data-label="Limit">40</td>`) {
				t.Errorf("version 2's limit 40 is not shown:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console does not run version 2 within 10 s:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
