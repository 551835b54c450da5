package serve_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/internal/redistest"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// /readyz is ready only while the backend answers (a real Redis, stopped
// and restarted) and the server takes calls; /healthz while it runs.
func TestHealthAndReadiness(t *testing.T) {
	srv := redistest.NewServer(t)
	b, ready := redisBackend(t, srv.Addr())
	e := start(t, b, serve.Config{Ready: ready, Timeout: time.Second})
	if st, body := get(t, e.url+"/healthz"); st != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", st, body)
	}
	if st, _ := get(t, e.url+"/readyz"); st != 200 {
		t.Errorf("/readyz = %d, want 200", st)
	}
	srv.Stop(t)
	if st, body := get(t, e.url+"/readyz"); st != 503 || !strings.Contains(body, "backend") {
		t.Errorf("/readyz with Redis stopped = %d %q, want 503", st, body)
	}
	if st, _ := get(t, e.url+"/healthz"); st != 200 {
		t.Errorf("/healthz with Redis stopped = %d, want 200", st)
	}
	// A fail-closed policy's call fails with unavailable, naming no server.
	c := client.New(e.url, nil)
	_, err := c.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "r", "content": "c"}})
	if connect.CodeOf(err) != connect.CodeUnavailable || strings.Contains(err.Error(), srv.Addr()) {
		t.Errorf("Take with Redis stopped = %v, want unavailable without the address", err)
	}
	srv.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := get(t, e.url+"/readyz")
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d 30 s after Redis restarted, want 200", st)
		}
		time.Sleep(50 * time.Millisecond) // polling a server until a deadline
	}
	e.srv.Drain()
	if st, body := get(t, e.url+"/readyz"); st != 503 || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz while draining = %d %q, want 503", st, body)
	}
	_, err = c.Take(context.Background(), e.policies["push"], sdk.Attempt{Subject: sdk.Subject{"user": "r", "content": "c"}})
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, client.ErrShuttingDown) {
		t.Errorf("Take while draining = %v, want unavailable, ErrShuttingDown", err)
	}
	if got := e.used(t, "push", sdk.Subject{"user": "r", "content": "c"}, "recv-1m"); got != 0 {
		t.Errorf("used = %d, want 0", got)
	}
}

// /metrics has the sdk's series and the request latency by operation and
// code; HTTP answers carry the IETF headers.
func TestMetricsAndHeaders(t *testing.T) {
	b, _ := backendKinds[0].new(t)
	e := start(t, b, serve.Config{})
	body := `{"policy":"push","subject":{"user":"h","content":"c"}}`
	var hs []http.Header
	for range 3 {
		st, h, out := post(t, e.url, "Take", body, "")
		if st != 200 {
			t.Fatalf("Take = %d %s", st, out)
		}
		hs = append(hs, h)
	}
	if got := hs[0].Get("RateLimit-Policy"); got != `"recv-1m";q=15;w=60, "recv-24h";q=50;w=86400, "content-59s";q=2;w=59, "content-59m";q=5;w=3540` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := hs[0].Get("RateLimit"); !strings.HasPrefix(got, `"content-59s";r=1;t=`) {
		t.Errorf("RateLimit = %q, want content-59s with 1 left", got)
	}
	if hs[0].Get("Retry-After") != "" || hs[2].Get("Retry-After") == "" {
		t.Errorf("Retry-After = %q then %q, want none when allowed, set when denied", hs[0].Get("Retry-After"), hs[2].Get("Retry-After"))
	}
	// A small answer is not gzipped, even for a client that accepts it
	// (it costs more CPU than it saves).
	req, err := http.NewRequest(http.MethodPost, e.url+"/freqcap.v1.FreqcapService/Peek", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "" {
		t.Errorf("Peek with Accept-Encoding gzip = %d, Content-Encoding %q, want 200 uncompressed", res.StatusCode, res.Header.Get("Content-Encoding"))
	}
	post(t, e.url, "Take", `{"policy":"nope","subject":{"user":"h"}}`, "")
	st, m := get(t, e.url+"/metrics")
	if st != 200 {
		t.Fatalf("/metrics = %d", st)
	}
	for _, want := range []string{
		serve.RequestDuration + `_count{code="ok",op="Take"} 3`,
		serve.RequestDuration + `_count{code="not_found",op="Take"} 1`,
		`freqcap_decisions_total{op="take",outcome="allowed",policy="push"} 2`,
		`freqcap_decisions_total{op="take",outcome="denied",policy="push"} 1`,
		serve.InFlight + " 0",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(m, `"h"`) || strings.Contains(m, `user="`) {
		t.Errorf("/metrics names a subject")
	}
}

// SIGTERM under load (Shutdown): every take answered is counted in Redis,
// and no unanswered one is. Workers on both protocols keep sending while
// the server drains; the calls refused consumed nothing.
func TestShutdownUnderLoad(t *testing.T) {
	b, _ := redisBackend(t, redistest.Standalone(t))
	e := start(t, b, serve.Config{})
	bulk := e.policies["bulk"]
	const workers = 16
	answered := make([]int64, workers)
	var total, refused atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range workers {
		pr := protocols[w%len(protocols)]
		c := client.New(e.url, &client.Options{Protocol: pr.p, Timeout: 20 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sdk.Subject{"user": fmt.Sprintf("sd-%d", w)}
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; i < 200000 && time.Now().Before(deadline); i++ {
				d, err := c.Take(context.Background(), bulk, sdk.Attempt{Subject: s})
				if err == nil && d.Allowed {
					answered[w]++
					total.Add(1)
					continue
				}
				if err == nil {
					t.Errorf("worker %d: a denial from a limit of a million", w)
					return
				}
				refused.Add(1)
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for total.Load() < 500 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the workers' progress until a deadline
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-e.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	e.done <- nil // for start's cleanup
	close(stop)
	wg.Wait()
	if total.Load() < 500 || refused.Load() == 0 {
		t.Fatalf("answered %d, refused %d: want the load to run before and after the shutdown", total.Load(), refused.Load())
	}
	for w := range workers {
		s := sdk.Subject{"user": fmt.Sprintf("sd-%d", w)}
		if got := e.used(t, "bulk", s, "big"); got != answered[w] {
			t.Errorf("worker %d: %d takes counted in Redis, %d answered", w, got, answered[w])
		}
	}
	t.Logf("%d takes answered before and during shutdown, %d refused", total.Load(), refused.Load())
}
