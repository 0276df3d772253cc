package observe

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/internal/testkit/otlptest"
	"github.com/extauthz/extauthz/tracing"
)

// byRequestID returns the spans received, by their extauthz.request_id attribute.
func byRequestID(r *otlptest.Receiver) map[string][]*tracepb.Span {
	out := map[string][]*tracepb.Span{}
	for _, s := range r.Spans() {
		out[otlptest.Attr(s, "extauthz.request_id")] = append(out[otlptest.Attr(s, "extauthz.request_id")], s)
	}
	return out
}

const (
	envoyTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	envoySpan  = "00f067aa0ba902b7"
	b3Trace    = "80f198ee56343ba864fe8b2a57d3eff7"
	b3Span     = "e457b5a2e4d86bd1"
)

// Each call's span continues the trace Envoy sent (traceparent or B3, in the CheckRequest's
// headers or the call's metadata), carries the decision, and is exported over OTLP.
func TestSpanParentIsEnvoysSpan(t *testing.T) {
	rcv := otlptest.Start(t)
	p, err := tracing.New(context.Background(), tracing.Options{Endpoint: rcv.Addr(), Insecure: true, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	api := &fakeAPI{}
	c := serve(t, New(Options{Log: zap.New(core), Tracer: p.Tracer(), Redact: hashed}), api)

	block := func(d *audit.Decision) {
		d.Resource, d.Result, d.Reason, d.Rule = "GET:/reports", "blocked", "qps", "param_flow[3]"
		d.Param, d.Value = "api_key", "sk-live-42"
	}
	traceparent := "00-" + envoyTrace + "-" + envoySpan + "-01"
	calls := []struct {
		id     string
		decide func(*audit.Decision)
		md     []string
		call   func(ctx context.Context, id string) error
	}{
		{"check-traceparent-header", block, nil, func(ctx context.Context, id string) error {
			_, err := c.authz.Check(ctx, checkRequest(map[string]string{"traceparent": traceparent, "x-request-id": id}, "7"))
			return err
		}},
		{"check-b3-metadata-wins", nil, []string{"x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"},
			func(ctx context.Context, id string) error {
				_, err := c.authz.Check(ctx, checkRequest(map[string]string{"traceparent": traceparent, "x-request-id": id}, "7"))
				return err
			}},
		{"check-b3-single-header", nil, nil, func(ctx context.Context, id string) error {
			_, err := c.authz.Check(ctx, checkRequest(map[string]string{"b3": b3Trace + "-" + b3Span + "-1", "x-request-id": id}, "7"))
			return err
		}},
		{"rls-traceparent-metadata", block, []string{"traceparent", traceparent}, func(ctx context.Context, id string) error {
			_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r", "lease_id", id))
			return err
		}},
		{"rls-b3-metadata", nil, []string{"x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"},
			func(ctx context.Context, id string) error {
				_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r", "lease_id", id))
				return err
			}},
		{"rls-no-context", nil, nil, func(ctx context.Context, id string) error {
			_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r", "lease_id", id))
			return err
		}},
		{"rls-envoy-not-sampled", nil, []string{"traceparent", "00-" + envoyTrace + "-" + envoySpan + "-00"},
			func(ctx context.Context, id string) error {
				_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r", "lease_id", id))
				return err
			}},
	}
	for _, call := range calls {
		api.decide = call.decide
		ctx := context.Background()
		if call.md != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, call.md...)
		}
		if err := call.call(ctx, call.id); err != nil {
			t.Fatalf("%s: %v", call.id, err)
		}
	}
	api.decide, api.err = nil, status.Error(codes.InvalidArgument, "no descriptors")
	_, _ = c.rls.ShouldRateLimit(metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent),
		limitRequest("lease_id", "rls-error"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil { // sends what is buffered
		t.Fatal(err)
	}
	got := byRequestID(rcv)

	want := []struct {
		id, trace, parent, result string
	}{
		{"check-traceparent-header", envoyTrace, envoySpan, "blocked"},
		{"check-b3-metadata-wins", b3Trace, b3Span, "allowed"},
		{"check-b3-single-header", b3Trace, b3Span, "allowed"},
		{"rls-traceparent-metadata", envoyTrace, envoySpan, "blocked"},
		{"rls-b3-metadata", b3Trace, b3Span, "allowed"},
		{"rls-no-context", "", "", "allowed"},
		{"rls-error", envoyTrace, envoySpan, "error"},
	}
	for _, w := range want {
		spans := got[w.id]
		if len(spans) != 1 {
			t.Errorf("%s: %d spans, want 1", w.id, len(spans))
			continue
		}
		s := spans[0]
		if w.trace != "" && hex.EncodeToString(s.GetTraceId()) != w.trace {
			t.Errorf("%s: trace id %x, want %s", w.id, s.GetTraceId(), w.trace)
		}
		if p := hex.EncodeToString(s.GetParentSpanId()); p != w.parent {
			t.Errorf("%s: parent span %q, want %q", w.id, p, w.parent)
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("%s: kind %v, want server", w.id, s.GetKind())
		}
		if r := otlptest.Attr(s, "extauthz.result"); r != w.result {
			t.Errorf("%s: result %q, want %q", w.id, r, w.result)
		}
		if (w.result == "error") != (s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
			t.Errorf("%s: status %v", w.id, s.GetStatus())
		}
	}
	if b := got["check-traceparent-header"]; len(b) == 1 {
		s := b[0]
		for k, v := range map[string]string{"extauthz.api": "check", "extauthz.rule": "param_flow[3]", "extauthz.reason": "qps",
			"extauthz.resource": "GET:/reports", "extauthz.param": "api_key", "extauthz.value": "hmac:sk"} {
			if a := otlptest.Attr(s, k); a != v {
				t.Errorf("attribute %s = %q, want %q", k, a, v)
			}
		}
		if s.GetName() != "envoy.service.auth.v3.Authorization/Check" {
			t.Errorf("span name %q", s.GetName())
		}
	}
	if n := len(got["rls-envoy-not-sampled"]); n != 0 {
		t.Errorf("a call Envoy did not sample exported %d spans", n)
	}
	// The decision log carries the trace id, to go from a log line to its trace.
	for _, e := range logs.AllUntimed() {
		m := e.ContextMap()
		if m["request_id"] == "check-traceparent-header" && m["trace_id"] != envoyTrace {
			t.Errorf("logged trace_id %v, want %s", m["trace_id"], envoyTrace)
		}
	}
}

// With tracing off, the decision log still names the trace Envoy sent.
func TestTraceIDLoggedWithTracingOff(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	c := serve(t, New(Options{Log: zap.New(core)}), &fakeAPI{decide: func(d *audit.Decision) { d.Result = "blocked" }})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "b3", b3Trace+"-"+b3Span+"-0")
	if _, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.rls.ShouldRateLimit(context.Background(), limitRequest("resource", "r")); err != nil {
		t.Fatal(err)
	}
	got := logs.AllUntimed()
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	if id := got[0].ContextMap()["trace_id"]; id != b3Trace {
		t.Errorf("trace_id %v, want %s", id, b3Trace)
	}
	if id, ok := got[1].ContextMap()["trace_id"]; ok {
		t.Errorf("trace_id %v logged for a call without trace context", id)
	}
}
