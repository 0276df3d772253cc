package tracing

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// B3 header names (github.com/openzipkin/b3-propagation), as Envoy's Zipkin tracer sends them.
const (
	b3Single  = "b3"
	b3TraceID = "x-b3-traceid"
	b3SpanID  = "x-b3-spanid"
	b3Sampled = "x-b3-sampled"
	b3Flags   = "x-b3-flags"
)

// B3 is the Zipkin B3 propagator. Extract reads the single "b3" header
// ({trace id}-{span id}[-{sampling}[-{parent span id}]]) and, when it is absent or carries no
// ids, the x-b3-traceid, x-b3-spanid, x-b3-sampled and x-b3-flags headers; a 64-bit trace id
// is padded to 128 bits with zeros on the left. A debug flag ("d", x-b3-flags: 1) counts as
// sampled; a missing sampling decision counts as not sampled. Inject writes the multi-header
// form. The zero value is ready to use and safe for concurrent use.
type B3 struct{}

var _ propagation.TextMapPropagator = B3{}

// Fields returns the headers B3 reads and writes.
func (B3) Fields() []string {
	return []string{b3Single, b3TraceID, b3SpanID, b3Sampled, b3Flags}
}

// Inject writes the span context of ctx, when valid, as x-b3-* headers.
func (B3) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	carrier.Set(b3TraceID, sc.TraceID().String())
	carrier.Set(b3SpanID, sc.SpanID().String())
	sampled := "0"
	if sc.IsSampled() {
		sampled = "1"
	}
	carrier.Set(b3Sampled, sampled)
}

// Extract returns ctx with the remote span context carrier holds, or ctx as it is when the
// carrier holds none (or a malformed one).
func (B3) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	if sc, ok := parseB3Single(carrier.Get(b3Single)); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	traceID := carrier.Get(b3TraceID)
	if traceID == "" {
		return ctx
	}
	sampled := carrier.Get(b3Sampled)
	sc, ok := b3Context(traceID, carrier.Get(b3SpanID),
		sampled == "1" || strings.EqualFold(sampled, "true") || carrier.Get(b3Flags) == "1")
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// parseB3Single parses the single b3 header; a header of a sampling decision alone ("0", "1",
// "d") carries no ids, so no span context.
func parseB3Single(h string) (trace.SpanContext, bool) {
	if len(h) < 16+1+16 {
		return trace.SpanContext{}, false
	}
	parts := strings.Split(h, "-")
	if len(parts) < 2 || len(parts) > 4 {
		return trace.SpanContext{}, false
	}
	sampled := false
	if len(parts) >= 3 {
		switch parts[2] {
		case "1", "d":
			sampled = true
		case "0":
		default:
			return trace.SpanContext{}, false
		}
	}
	if len(parts) == 4 && !validHex(parts[3], 16) {
		return trace.SpanContext{}, false
	}
	return b3Context(parts[0], parts[1], sampled)
}

// b3Context builds a remote span context from hex ids; ok is false when either is malformed
// or all zeros.
func b3Context(traceID, spanID string, sampled bool) (trace.SpanContext, bool) {
	if len(traceID) == 16 {
		traceID = strings.Repeat("0", 16) + traceID
	}
	if !validHex(traceID, 32) || !validHex(spanID, 16) {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(strings.ToLower(traceID))
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(strings.ToLower(spanID))
	if err != nil {
		return trace.SpanContext{}, false
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
