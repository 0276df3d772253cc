// Package tracing sends the service's spans to an OpenTelemetry collector over OTLP/gRPC, and
// reads the trace context Envoy sends (W3C traceparent, Zipkin B3) so that each span continues
// Envoy's trace. Tracing is off unless an endpoint is configured.
package tracing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name of every span's resource.
const ServiceName = "extauthz"

// Options configure a Provider.
type Options struct {
	// Endpoint is the collector's OTLP/gRPC address, host:port; "" turns tracing off.
	Endpoint string
	// Insecure sends spans in plaintext; otherwise over TLS, verified against the system's
	// roots.
	Insecure bool
	// SampleRatio is the share of calls without a sampled-or-not decision from Envoy that are
	// traced, 0 to 1. A call whose parent Envoy sampled is always traced, one whose parent
	// Envoy left out never is (the parent-based sampler).
	SampleRatio float64
	// BatchTimeout is the longest a finished span waits before it is sent; 0 means the SDK's
	// default (5s).
	BatchTimeout time.Duration
	// Version is the service.version of the spans' resource; "" leaves it out.
	Version string
}

// Provider is the service's TracerProvider: a no-op one when tracing is off. It is safe for
// concurrent use.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
}

// New returns a Provider exporting to opts.Endpoint, or a no-op one when it is "". The
// exporter connects lazily: a collector that is down loses spans, never fails a call.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.Endpoint == "" {
		return &Provider{tp: noop.NewTracerProvider()}, nil
	}
	if opts.SampleRatio < 0 || opts.SampleRatio > 1 {
		return nil, errors.New("tracing: sample ratio must be from 0 to 1")
	}
	eopts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.Endpoint)}
	if opts.Insecure {
		eopts = append(eopts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, eopts...)
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName)}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	var bopts []sdktrace.BatchSpanProcessorOption
	if opts.BatchTimeout > 0 {
		bopts = append(bopts, sdktrace.WithBatchTimeout(opts.BatchTimeout))
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, bopts...),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio))),
	)
	return &Provider{tp: sdk, sdk: sdk}, nil
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// TracerProvider is the provider to hand to the packages that make spans of their own (a span
// per Redis call); nil when tracing is off, so that they make none, not even no-op ones.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p.sdk == nil {
		return nil
	}
	return p.sdk
}

// Tracer returns the tracer of the service's own spans.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer("github.com/extauthz/extauthz") }

// Shutdown sends the spans still buffered and stops the exporter, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Propagator reads (and writes) the trace context of both formats Envoy's tracers send: B3,
// then W3C Trace Context, whose traceparent wins when a request carries both.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(B3{}, propagation.TraceContext{})
}
