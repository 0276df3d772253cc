package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	tid128 = "4bf92f3577b34da6a3ce929d0e0e4736"
	tid64  = "a3ce929d0e0e4736"
	sid    = "00f067aa0ba902b7"
)

func TestB3Extract(t *testing.T) {
	tests := []struct {
		name        string
		headers     map[string]string
		wantTrace   string // "" when no span context
		wantSampled bool
	}{
		{"multi, sampled", map[string]string{"x-b3-traceid": tid128, "x-b3-spanid": sid, "x-b3-sampled": "1"}, tid128, true},
		{"multi, not sampled", map[string]string{"x-b3-traceid": tid128, "x-b3-spanid": sid, "x-b3-sampled": "0"}, tid128, false},
		{"multi, legacy true", map[string]string{"x-b3-traceid": tid128, "x-b3-spanid": sid, "x-b3-sampled": "true"}, tid128, true},
		{"multi, debug", map[string]string{"x-b3-traceid": tid128, "x-b3-spanid": sid, "x-b3-flags": "1"}, tid128, true},
		{"multi, no decision", map[string]string{"x-b3-traceid": tid128, "x-b3-spanid": sid}, tid128, false},
		{"multi, 64-bit trace id", map[string]string{"x-b3-traceid": tid64, "x-b3-spanid": sid, "x-b3-sampled": "1"}, "0000000000000000" + tid64, true},
		{"multi, upper case", map[string]string{"x-b3-traceid": "4BF92F3577B34DA6A3CE929D0E0E4736", "x-b3-spanid": sid, "x-b3-sampled": "1"}, tid128, true},
		{"multi, no span id", map[string]string{"x-b3-traceid": tid128, "x-b3-sampled": "1"}, "", false},
		{"multi, short trace id", map[string]string{"x-b3-traceid": "abc", "x-b3-spanid": sid}, "", false},
		{"multi, zero trace id", map[string]string{"x-b3-traceid": "00000000000000000000000000000000", "x-b3-spanid": sid}, "", false},
		{"multi, not hex", map[string]string{"x-b3-traceid": "zzf92f3577b34da6a3ce929d0e0e4736", "x-b3-spanid": sid}, "", false},
		{"single", map[string]string{"b3": tid128 + "-" + sid + "-1"}, tid128, true},
		{"single, debug, parent", map[string]string{"b3": tid128 + "-" + sid + "-d-" + sid}, tid128, true},
		{"single, no decision", map[string]string{"b3": tid64 + "-" + sid}, "0000000000000000" + tid64, false},
		{"single, not sampled", map[string]string{"b3": tid128 + "-" + sid + "-0"}, tid128, false},
		{"single, bad decision", map[string]string{"b3": tid128 + "-" + sid + "-x"}, "", false},
		{"single, bad parent", map[string]string{"b3": tid128 + "-" + sid + "-1-xyz"}, "", false},
		{"single, decision only", map[string]string{"b3": "0"}, "", false},
		{"single wins", map[string]string{"b3": tid128 + "-" + sid + "-1", "x-b3-traceid": tid64, "x-b3-spanid": sid}, tid128, true},
		{"single without ids, multi used", map[string]string{"b3": "1", "x-b3-traceid": tid64, "x-b3-spanid": sid, "x-b3-sampled": "1"}, "0000000000000000" + tid64, true},
		{"none", map[string]string{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(B3{}.Extract(context.Background(), propagation.MapCarrier(tt.headers)))
			if tt.wantTrace == "" {
				if sc.IsValid() {
					t.Fatalf("span context %v, want none", sc)
				}
				return
			}
			if !sc.IsValid() || !sc.IsRemote() {
				t.Fatalf("no valid remote span context from %v", tt.headers)
			}
			if got := sc.TraceID().String(); got != tt.wantTrace {
				t.Errorf("trace id %s, want %s", got, tt.wantTrace)
			}
			if got := sc.SpanID().String(); got != sid {
				t.Errorf("span id %s, want %s", got, sid)
			}
			if sc.IsSampled() != tt.wantSampled {
				t.Errorf("sampled %v, want %v", sc.IsSampled(), tt.wantSampled)
			}
		})
	}
}

func TestB3InjectRoundTrip(t *testing.T) {
	tid, _ := trace.TraceIDFromHex(tid128)
	s, _ := trace.SpanIDFromHex(sid)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: s, TraceFlags: trace.FlagsSampled})
	c := propagation.MapCarrier{}
	B3{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	if c["x-b3-traceid"] != tid128 || c["x-b3-spanid"] != sid || c["x-b3-sampled"] != "1" {
		t.Fatalf("injected %v", c)
	}
	got := trace.SpanContextFromContext(B3{}.Extract(context.Background(), c))
	if !got.Equal(sc.WithRemote(true)) {
		t.Errorf("round trip: %v, want %v", got, sc)
	}
}

// With both formats present, traceparent wins.
func TestPropagatorPrefersTraceparent(t *testing.T) {
	c := propagation.MapCarrier{
		"traceparent":  "00-" + tid128 + "-" + sid + "-01",
		"x-b3-traceid": "11111111111111111111111111111111", "x-b3-spanid": "2222222222222222", "x-b3-sampled": "1",
	}
	sc := trace.SpanContextFromContext(Propagator().Extract(context.Background(), c))
	if sc.TraceID().String() != tid128 {
		t.Errorf("trace id %s, want traceparent's %s", sc.TraceID(), tid128)
	}
	delete(c, "traceparent")
	sc = trace.SpanContextFromContext(Propagator().Extract(context.Background(), c))
	if sc.TraceID().String() != "11111111111111111111111111111111" {
		t.Errorf("trace id %s, want B3's", sc.TraceID())
	}
}
