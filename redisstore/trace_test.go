package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedStore returns a store tracing into a span recorder, and a tracer of the same provider for
// the caller's spans.
func tracedStore(t *testing.T, cfg Config) (*Store, *tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	cfg.Timeout = time.Second
	s, err := NewWithOptions(cfg, Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, rec, tp.Tracer("caller")
}

func attr(span sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range span.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// spansNamed returns the ended spans called name.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestTraceSpanPerRedisCall(t *testing.T) {
	srv := redistest.Start(t)
	s, rec, caller := tracedStore(t, Config{Addrs: []string{srv.Addr()}})
	op := hotparam.RemoteOp{RuleID: "tr", Value: "v", Count: 1, Duration: time.Hour, Hits: 1}
	two := op
	two.Hits = 2

	ctx, parent := caller.Start(context.Background(), "decision")
	res := make([]hotparam.RemoteResult, 1)
	// allowed, taking the last token; then refused by Redis (two hits, which the cache does not
	// answer)
	for _, o := range []hotparam.RemoteOp{op, two} {
		if err := s.Eval(ctx, []hotparam.RemoteOp{o}, res); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Eval(ctx, []hotparam.RemoteOp{op}, res); err != nil || res[0].Allowed { // from the cache
		t.Fatalf("third call: %v %+v", err, res[0])
	}
	parent.End()

	spans := spansNamed(rec, "redis EVALSHA")
	if len(spans) != 2 {
		t.Fatalf("EVALSHA spans: got %d, want 2 (the cached refusal makes none)", len(spans))
	}
	for i, sp := range spans {
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() || sp.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d: parent %v in trace %v, want the caller's span %v", i, sp.Parent().SpanID(),
				sp.SpanContext().TraceID(), parent.SpanContext().SpanID())
		}
		if sp.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %d: kind %v, want client", i, sp.SpanKind())
		}
		if v, _ := attr(sp, "db.system.name"); v.AsString() != "redis" {
			t.Errorf("span %d: db.system.name %q", i, v.AsString())
		}
		if v, _ := attr(sp, keyOps); v.AsInt64() != 1 {
			t.Errorf("span %d: ops %d, want 1", i, v.AsInt64())
		}
		if v, _ := attr(sp, keyAllowed); v.AsBool() != (i == 0) {
			t.Errorf("span %d: allowed %v, want %v", i, v.AsBool(), i == 0)
		}
	}
	var events []string
	for _, sp := range spansNamed(rec, "decision") {
		for _, e := range sp.Events() {
			events = append(events, e.Name)
		}
	}
	if len(events) != 1 || events[0] != "redis refusal from cache" {
		t.Errorf("caller's span events: %q, want the refusal from cache", events)
	}

	// a failed call: its span carries the error
	srv.Kill()
	if err := s.Eval(ctx, []hotparam.RemoteOp{{RuleID: "tr", Value: "w", Count: 1, Duration: time.Hour}}, res); err == nil {
		t.Fatal("Eval with Redis down: no error")
	}
	spans = spansNamed(rec, "redis EVALSHA")
	if last := spans[len(spans)-1]; last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Errorf("span of a failed call: status %v, events %d: want the error recorded", last.Status(), len(last.Events()))
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with Redis down: no error")
	}
	if p := spansNamed(rec, "redis PING"); len(p) != 1 || p[0].Status().Code != codes.Error {
		t.Errorf("PING spans: %d, want 1 with the error", len(p))
	}
}

// A cross-slot call that blocks on one slot traces its compensation of the others.
func TestTraceUndo(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, rec, caller := tracedStore(t, Config{Addrs: cl.Addrs(), Mode: ModeCluster})
	a, b := qps("tu-a", "gx", 5), qps("tu-b", "gy", 0)
	if slot(key(DefaultPrefix, &a)) == slot(key(DefaultPrefix, &b)) {
		t.Fatal("test values share a slot")
	}
	ctx, parent := caller.Start(context.Background(), "decision")
	res := make([]hotparam.RemoteResult, 2)
	if err := s.Eval(ctx, []hotparam.RemoteOp{a, b}, res); err != nil {
		t.Fatal(err)
	}
	parent.End()
	call, undo := spansNamed(rec, "redis EVALSHA"), spansNamed(rec, "redis EVALSHA undo")
	if len(call) != 1 || len(undo) != 1 {
		t.Fatalf("spans: %d calls, %d undos; want 1 and 1", len(call), len(undo))
	}
	if v, _ := attr(call[0], keyGroups); v.AsInt64() != 2 {
		t.Errorf("groups: %d, want 2", v.AsInt64())
	}
	if undo[0].Parent().SpanID() != call[0].SpanContext().SpanID() {
		t.Error("the undo span is not a child of its call's span")
	}
}
