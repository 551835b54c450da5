package serve_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
	"google.golang.org/protobuf/proto"
)

// clock is a settable clock for the lockout.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestLockout: an address that sends unknown credentials gets its first 5
// failures free, then is locked out for 1 s, 2 s, 4 s … (at most 5 min):
// every call from it that sends a credential, a valid one included, is
// refused unchecked with resource_exhausted (HTTP 429), reason LOCKED_OUT
// and Retry-After, over JSON and gRPC, consuming nothing. A success does
// not lower the count; calls without a credential do not count; a header
// that is not a bearer token does; 15 minutes without failures forget
// the address.
func TestLockout(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	e := start(t, memory.New(nil), serve.Config{Callers: testCallers(t), Now: clk.now})
	ctx := context.Background()
	push := e.policies["push"]
	s := sdk.Subject{"user": "lockout-user", "content": "c"}

	calls := 0
	// post sends a Take over HTTP/JSON with the Authorization header auth
	// ("" for none) and returns the status, the Retry-After header and
	// the error's reason.
	post := func(auth string) (int, string, freqcapv1.Reason) {
		t.Helper()
		calls++ // each call its own content: push allows 2 identical ones a minute
		body := []byte(fmt.Sprintf(`{"policy": "push", "subject": {"user": "lockout-user", "content": "c%d"}}`, calls))
		req, err := http.NewRequest("POST", e.url+"/freqcap.v1.FreqcapService/Take", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var reason freqcapv1.Reason
		if resp.StatusCode != http.StatusOK {
			reason = reasonOfBody(t, resp.Body)
		}
		return resp.StatusCode, resp.Header.Get("Retry-After"), reason
	}
	wrong, right := "Bearer not-a-known-secret", "Bearer "+senderSecret
	want := func(what string, auth string, status int, retry string, reason freqcapv1.Reason) {
		t.Helper()
		gs, gr, greason := post(auth)
		if gs != status || gr != retry || greason != reason {
			t.Fatalf("%s: Take = %d, Retry-After %q, %v; want %d, %q, %v", what, gs, gr, greason, status, retry, reason)
		}
	}
	unauth := freqcapv1.Reason_REASON_UNAUTHENTICATED
	locked := freqcapv1.Reason_REASON_LOCKED_OUT

	for i := 1; i <= 5; i++ {
		want("free failure", wrong, 401, "", unauth)
		want("a call without a credential (not counted)", "", 401, "", unauth)
	}
	want("valid credential after 5 failures", right, 200, "", 0)
	want("6th failure", "Basic c2VuZGVyOnNlY3JldA==", 401, "", unauth) // not a bearer token: counts
	want("valid credential while locked out", right, 429, "1", locked)
	want("unknown credential while locked out (not counted)", wrong, 429, "1", locked)
	want("a call without a credential while locked out", "", 401, "", unauth)

	// Over gRPC the same: resource_exhausted, Retry-After metadata.
	g := client.New(e.url, &client.Options{Token: senderSecret})
	_, err := g.Take(ctx, push, sdk.Attempt{Subject: s})
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeResourceExhausted || protoconv.ReasonOf(err) != locked {
		t.Fatalf("gRPC Take while locked out = %v, want resource_exhausted, LOCKED_OUT", err)
	}
	if errors.As(err, &ce); ce == nil || ce.Meta().Get("Retry-After") != "1" {
		t.Errorf("gRPC Take while locked out: metadata %v, want Retry-After 1", ce)
	}

	clk.add(time.Second)
	want("valid credential after the lockout", right, 200, "", 0)
	// The success did not lower the count: the next failure locks for 2 s.
	want("7th failure", wrong, 401, "", unauth)
	want("locked for 2 s", right, 429, "2", locked)
	clk.add(1500 * time.Millisecond)
	want("still locked", right, 429, "1", locked)
	clk.add(500 * time.Millisecond)
	want("8th failure", wrong, 401, "", unauth)
	want("locked for 4 s", right, 429, "4", locked)

	// Only the valid takes consumed.
	if got := e.used(t, "push", s, "recv-1m"); got != 2 {
		t.Errorf("recv-1m used = %d, want 2 (locked-out calls consume nothing)", got)
	}

	// 15 minutes without failures forget the address.
	clk.add(16 * time.Minute)
	for i := 1; i <= 5; i++ {
		want("free failure after forgetting", wrong, 401, "", unauth)
	}
	want("valid credential after 5 new failures", right, 200, "", 0)
}

// TestLockoutGrows: the lockouts double from 1 s up to 5 minutes.
func TestLockoutGrows(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
	e := start(t, memory.New(nil), serve.Config{Callers: testCallers(t), Now: clk.now})
	cl := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: "not-a-known-secret"})
	good := client.New(e.url, &client.Options{Protocol: client.ConnectJSON, Token: supportSecret})
	ctx := context.Background()
	push := e.policies["push"]
	s := sdk.Subject{"user": "u", "content": "c"}
	var waits []string
	for i := 1; i <= 16; i++ {
		_, err := cl.Take(ctx, push, sdk.Attempt{Subject: s})
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("failure %d: Take = %v, want unauthenticated", i, err)
		}
		_, err = good.Peek(ctx, push, sdk.Attempt{Subject: s})
		var ce *connect.Error
		errors.As(err, &ce)
		switch {
		case i <= 5 && err != nil:
			t.Fatalf("after %d failures: Peek with a valid secret = %v, want a decision (not locked)", i, err)
		case i > 5 && (connect.CodeOf(err) != connect.CodeResourceExhausted || ce == nil):
			t.Fatalf("after %d failures: Take = %v, want resource_exhausted", i, err)
		case i > 5:
			waits = append(waits, ce.Meta().Get("Retry-After"))
		}
		clk.add(5 * time.Minute)
	}
	want := []string{"1", "2", "4", "8", "16", "32", "64", "128", "256", "300", "300"}
	if len(waits) != len(want) {
		t.Fatalf("lockouts %q, want %q", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("lockouts %q, want %q", waits, want)
		}
	}
}

// reasonOfBody reads the reason of a Connect protocol JSON error body.
func reasonOfBody(t *testing.T, body io.Reader) freqcapv1.Reason {
	t.Helper()
	var e struct {
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.NewDecoder(body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	for _, d := range e.Details {
		if d.Type != "freqcap.v1.ErrorDetail" {
			continue
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("error detail %q: %v", d.Value, err)
		}
		var ed freqcapv1.ErrorDetail
		if err := proto.Unmarshal(b, &ed); err != nil {
			t.Fatalf("error detail: %v", err)
		}
		return ed.GetReason()
	}
	return freqcapv1.Reason_REASON_UNSPECIFIED
}
