package serve_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/freqcap/freqcap/backends/memory"
	"github.com/freqcap/freqcap/client"
	"github.com/freqcap/freqcap/sdk"
	"github.com/freqcap/freqcap/serve"
)

// otelSubject is the subject value the OpenTelemetry tests send: no span
// or metric may carry it.
const otelSubject = "otel-user-4c6f7265"

// TestOpenTelemetry: with Config.TracerProvider and MeterProvider (the
// SDK's in-memory exporter and a manual reader, what freqcap serve's
// --otlp-endpoint wires to the OTLP exporters), every operation over
// gRPC and JSON emits a server span named after its method, with the
// caller and the policy, and a point of rpc.server.call.duration for its
// method; a refused call is a span with its code (rpc.response.status_code); no span, event or
// metric carries a subject value. Without them (the default) nothing is
// emitted, not even to the global providers.
func TestOpenTelemetry(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	e := start(t, memory.New(nil), serve.Config{Callers: testCallers(t), TracerProvider: tp, MeterProvider: mp})
	ops := callEveryOperation(t, e)

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans.GetSpans().Snapshots() {
		byName[s.Name()] = append(byName[s.Name()], s)
		checkNoSubject(t, "span "+s.Name(), s.Attributes())
		for _, ev := range s.Events() {
			checkNoSubject(t, "span "+s.Name()+" event "+ev.Name, ev.Attributes)
		}
		if strings.Contains(s.Status().Description, otelSubject) {
			t.Errorf("span %s: status %q carries the subject", s.Name(), s.Status().Description)
		}
	}
	for _, op := range ops {
		name := "freqcap.v1.FreqcapService/" + op
		ss := byName[name]
		if len(ss) < 2 { // one per protocol
			t.Errorf("%d spans named %s, want one per protocol (spans: %v)", len(ss), name, keys(byName))
			continue
		}
		for _, s := range ss {
			if _, refused := attrMap(s.Attributes())["error.type"]; refused {
				continue // the refused Take: no caller, no policy
			}
			if s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %s is %v, want a server span", name, s.SpanKind())
			}
			attrs := attrMap(s.Attributes())
			if attrs[serve.AttrCaller] != "support" {
				t.Errorf("span %s: %s = %q, want support", name, serve.AttrCaller, attrs[serve.AttrCaller])
			}
			if want := "push"; op != "ListPolicies" && attrs[serve.AttrPolicy] != want {
				t.Errorf("span %s: %s = %q, want %s", name, serve.AttrPolicy, attrs[serve.AttrPolicy], want)
			}
		}
	}
	refused := false
	for _, s := range byName["freqcap.v1.FreqcapService/Take"] {
		if attrMap(s.Attributes())["rpc.response.status_code"] == "UNAUTHENTICATED" {
			refused = true
		}
	}
	if !refused {
		t.Errorf("no Take span of the refused call with rpc.response.status_code UNAUTHENTICATED")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	methods := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, dp := range h.DataPoints {
				checkNoSubject(t, "metric "+m.Name, dp.Attributes.ToSlice())
				if m.Name == "rpc.server.call.duration" {
					v, _ := dp.Attributes.Value("rpc.method")
					methods[v.AsString()] += dp.Count
				}
			}
		}
	}
	for _, op := range ops {
		if n := methods["freqcap.v1.FreqcapService/"+op]; n < 2 {
			t.Errorf("rpc.server.call.duration counts %d calls of %s, want at least 2 (%v)", n, op, methods)
		}
	}

	// Off by default: a server without providers emits nothing, even
	// with global providers set.
	global := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(global)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	plain := start(t, memory.New(nil), serve.Config{Callers: testCallers(t)})
	callEveryOperation(t, plain)
	if n := len(global.GetSpans()); n != 0 {
		t.Errorf("a server without providers emitted %d spans to the global provider, want 0", n)
	}
}

// callEveryOperation calls each operation on e over gRPC and JSON as
// support, with otelSubject as the user, plus a Take with an unknown
// secret; it returns the operations' method names.
func callEveryOperation(t *testing.T, e *env) []string {
	t.Helper()
	ctx := context.Background()
	push := e.policies["push"]
	for _, pr := range protocols {
		c := client.New(e.url, &client.Options{Protocol: pr.p, Token: supportSecret})
		s := sdk.Subject{"user": otelSubject, "content": "c-" + pr.name}
		a := sdk.Attempt{Subject: s, IdempotencyKey: "otel-key-" + pr.name}
		// The reservations have their own content: push allows 2
		// identical ones a minute.
		rs := sdk.Subject{"user": otelSubject, "content": "r-" + pr.name}
		must := func(op string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s %s: %v", pr.name, op, err)
			}
		}
		_, err := c.Take(ctx, push, a)
		must("Take", err)
		_, err = c.Peek(ctx, push, a)
		must("Peek", err)
		must("TakeBatch", c.TakeBatch(ctx, push, []sdk.Attempt{{Subject: s}})[0].Err)
		must("PeekBatch", c.PeekBatch(ctx, push, []sdk.Attempt{{Subject: s}})[0].Err)
		_, r, err := c.Reserve(ctx, push, sdk.Attempt{Subject: rs}, time.Minute)
		must("Reserve", err)
		must("Commit", r.Commit(ctx))
		_, r, err = c.Reserve(ctx, push, sdk.Attempt{Subject: rs}, time.Minute)
		must("Reserve", err)
		must("Cancel", r.Cancel(ctx))
		_, err = c.Admin().Inspect(ctx, push, s)
		must("Inspect", err)
		must("Reset", c.Admin().Reset(ctx, push, s))
		_, err = c.Policies(ctx)
		must("ListPolicies", err)
		bad := client.New(e.url, &client.Options{Protocol: pr.p, Token: "not-a-known-secret"})
		if _, err := bad.Take(ctx, push, a); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("%s Take with an unknown secret = %v, want unauthenticated", pr.name, err)
		}
	}
	return []string{"Take", "Peek", "TakeBatch", "PeekBatch", "Reserve", "Commit", "Cancel", "Inspect", "Reset", "ListPolicies"}
}

func checkNoSubject(t *testing.T, where string, kvs []attribute.KeyValue) {
	t.Helper()
	for _, kv := range kvs {
		if strings.Contains(kv.Value.Emit(), otelSubject) {
			t.Errorf("%s: attribute %s = %q carries the subject", where, kv.Key, kv.Value.Emit())
		}
	}
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

func keys[V any](m map[string]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return fmt.Sprint(ks)
}
