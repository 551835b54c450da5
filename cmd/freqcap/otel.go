package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlp is freqcap serve's OpenTelemetry export: a tracer and a meter
// provider sending to an OTLP/HTTP receiver (protobuf), or neither.
type otlp struct {
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
}

// newOTLP returns the providers exporting to endpoint, the base URL of an
// OTLP/HTTP receiver (traces to endpoint/v1/traces, metrics to
// endpoint/v1/metrics), with the metrics read every interval (0: the
// SDK's default, $OTEL_METRIC_EXPORT_INTERVAL or 60 s). The exporters read
// the other OTEL_EXPORTER_OTLP_* variables (headers, timeout,
// compression, TLS files); the resource is service.name freqcap-serve
// unless $OTEL_SERVICE_NAME or $OTEL_RESOURCE_ATTRIBUTES say otherwise.
func newOTLP(ctx context.Context, endpoint string, interval time.Duration) (*otlp, error) {
	endpoint = strings.TrimRight(endpoint, "/")
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("serve: --otlp-endpoint %q: want an http:// or https:// URL", endpoint)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "freqcap-serve")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("serve: OpenTelemetry resource: %w", err)
	}
	te, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("serve: OTLP trace exporter: %w", err)
	}
	me, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint+"/v1/metrics"))
	if err != nil {
		return nil, fmt.Errorf("serve: OTLP metric exporter: %w", err)
	}
	var ropts []sdkmetric.PeriodicReaderOption
	if interval > 0 {
		ropts = append(ropts, sdkmetric.WithInterval(interval))
	}
	return &otlp{
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(te), sdktrace.WithResource(res)),
		mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, ropts...)), sdkmetric.WithResource(res)),
	}, nil
}

// shutdown flushes what is left (the spans batched, the metrics since the
// last export) and stops both providers.
func (o *otlp) shutdown(ctx context.Context) error {
	if o == nil {
		return nil
	}
	return errors.Join(o.tp.Shutdown(ctx), o.mp.Shutdown(ctx))
}
