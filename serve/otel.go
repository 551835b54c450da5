package serve

import (
	"context"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// The attributes serve adds to a call's span: the caller's name and the
// policy, never a subject value.
const (
	AttrCaller = attribute.Key("freqcap.caller")
	AttrPolicy = attribute.Key("freqcap.policy")
)

// otelInterceptor returns the OpenTelemetry interceptor of cfg's
// providers (connectrpc.com/otelconnect: a server span per call, named
// after its method, and the rpc.server.* metrics, labelled by method and
// code; no message contents, no peer address), or nil when cfg has none.
// Trace context in the callers' headers (W3C traceparent) links their
// spans to serve's.
func otelInterceptor(cfg Config) (connect.Interceptor, error) {
	if cfg.TracerProvider == nil && cfg.MeterProvider == nil {
		return nil, nil
	}
	opts := []otelconnect.Option{otelconnect.WithPropagator(propagation.TraceContext{})}
	if cfg.TracerProvider != nil {
		opts = append(opts, otelconnect.WithTracerProvider(cfg.TracerProvider))
	} else {
		opts = append(opts, otelconnect.WithTracerProvider(tracenoop.NewTracerProvider()))
	}
	if cfg.MeterProvider != nil {
		opts = append(opts, otelconnect.WithMeterProvider(cfg.MeterProvider))
	} else {
		opts = append(opts, otelconnect.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	return otelconnect.NewInterceptor(opts...)
}

// annotate adds attributes to the call's span when one is recording.
func annotate(ctx context.Context, kv ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(kv...)
	}
}
