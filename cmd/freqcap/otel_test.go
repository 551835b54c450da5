package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
)

// otlpReceiver is an in-process OTLP/HTTP receiver: it decodes the
// protobuf export requests posted to /v1/traces and /v1/metrics.
type otlpReceiver struct {
	mu      sync.Mutex
	traces  []*coltracepb.ExportTraceServiceRequest
	metrics []*colmetricpb.ExportMetricsServiceRequest
	raw     [][]byte
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf export request", http.StatusBadRequest)
		return
	}
	var msg, reply proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		msg, reply = &coltracepb.ExportTraceServiceRequest{}, &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		msg, reply = &colmetricpb.ExportMetricsServiceRequest{}, &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.raw = append(rc.raw, b)
	switch m := msg.(type) {
	case *coltracepb.ExportTraceServiceRequest:
		rc.traces = append(rc.traces, m)
	case *colmetricpb.ExportMetricsServiceRequest:
		rc.metrics = append(rc.metrics, m)
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(reply)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// TestServeOTLP runs the real binary with --otlp-endpoint pointing at an
// in-process OTLP/HTTP receiver, makes calls, and stops it with SIGTERM:
// the receiver got, as protobuf export requests, a server span for each
// operation called (resource service.name freqcap-serve) and
// rpc.server.call.duration points for each method, and no byte of any
// export holds the subject's value. Without the flag (the default), the
// receiver gets nothing.
func TestServeOTLP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "freqcap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const subject = "otlp-user-5ec7e7"
	for _, on := range []bool{true, false} {
		rc := &otlpReceiver{}
		recv := httptest.NewServer(rc)
		args := []string{"serve", "--addr", "127.0.0.1:0"}
		if on {
			args = append(args, "--otlp-endpoint", recv.URL, "--otlp-interval", "200ms")
		}
		url, stop := startBinary(t, bin, args, "FREQCAP_SERVE_TOKENS=sender:sender-secret:take,peek@push")
		c := client.New(url, &client.Options{Token: "sender-secret", Timeout: 10 * time.Second})
		push, err := sdk.NewPolicy("push", []sdk.Rule{sdk.FixedWindow("r", 10, time.Minute).By("user")})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		s := sdk.Subject{"user": subject, "content": "c"}
		if _, err := c.Take(ctx, push, sdk.Attempt{Subject: s}); err != nil {
			t.Fatalf("Take: %v", err)
		}
		if _, err := c.Peek(ctx, push, sdk.Attempt{Subject: s}); err != nil {
			t.Fatalf("Peek: %v", err)
		}
		stop() // SIGTERM: serve flushes its last spans and metrics
		recv.Close()

		rc.mu.Lock()
		spans, methods, services := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, req := range rc.traces {
			for _, rs := range req.GetResourceSpans() {
				for _, kv := range rs.GetResource().GetAttributes() {
					if kv.GetKey() == "service.name" {
						services[kv.GetValue().GetStringValue()] = true
					}
				}
				for _, ss := range rs.GetScopeSpans() {
					for _, sp := range ss.GetSpans() {
						spans[sp.GetName()] = true
					}
				}
			}
		}
		for _, req := range rc.metrics {
			for _, rm := range req.GetResourceMetrics() {
				for _, sm := range rm.GetScopeMetrics() {
					for _, m := range sm.GetMetrics() {
						if m.GetName() != "rpc.server.call.duration" {
							continue
						}
						for _, dp := range m.GetHistogram().GetDataPoints() {
							for _, kv := range dp.GetAttributes() {
								if kv.GetKey() == "rpc.method" {
									methods[kv.GetValue().GetStringValue()] = true
								}
							}
						}
					}
				}
			}
		}
		for _, b := range rc.raw {
			if bytes.Contains(b, []byte(subject)) {
				t.Errorf("an OTLP export holds the subject's value")
			}
		}
		n := len(rc.raw)
		rc.mu.Unlock()
		if !on {
			if n != 0 {
				t.Errorf("without --otlp-endpoint the receiver got %d exports, want none", n)
			}
			continue
		}
		for _, op := range []string{"Take", "Peek"} {
			name := "freqcap.v1.FreqcapService/" + op
			if !spans[name] {
				t.Errorf("no span %s received (spans: %v)", name, spans)
			}
			if !methods[name] {
				t.Errorf("no rpc.server.call.duration point for %s received (methods: %v)", name, methods)
			}
		}
		if !services["freqcap-serve"] {
			t.Errorf("resources' service.name = %v, want freqcap-serve", services)
		}
	}
}

// startBinary starts bin with args and env added, waits for the line
// saying where serve listens and returns its URL and a stop function that
// sends SIGTERM and waits for a clean exit.
func startBinary(t *testing.T, bin string, args []string, env ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
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
	var log strings.Builder
	for url == "" && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if _, rest, ok := strings.Cut(lines.Text(), "freqcap serve on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
	}
	if url == "" {
		t.Fatalf("freqcap serve did not say where it listens\n%s", log.String())
	}
	done := make(chan struct{})
	go func() {
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
		}
		close(done)
	}()
	return url, func() {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { <-done; waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("freqcap serve exited with %v after SIGTERM, want 0\n%s", err, log.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("freqcap serve still running 60 s after SIGTERM\n%s", log.String())
		}
	}
}
