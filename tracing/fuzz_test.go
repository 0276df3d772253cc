package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// FuzzB3Extract: any headers give either no span context or a valid one that survives
// Inject and Extract unchanged.
func FuzzB3Extract(f *testing.F) {
	f.Add(tid128+"-"+sid+"-1", "", "", "")
	f.Add("", tid64, sid, "1")
	f.Add("d", tid128, sid, "true")
	f.Add(tid64+"-"+sid+"-d-"+sid, "", "", "")
	f.Fuzz(func(t *testing.T, single, traceID, spanID, sampled string) {
		c := propagation.MapCarrier{"b3": single, "x-b3-traceid": traceID, "x-b3-spanid": spanID, "x-b3-sampled": sampled}
		sc := trace.SpanContextFromContext(B3{}.Extract(context.Background(), c))
		if !sc.IsValid() {
			return
		}
		out := propagation.MapCarrier{}
		B3{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
		if again := trace.SpanContextFromContext(B3{}.Extract(context.Background(), out)); !again.Equal(sc) {
			t.Fatalf("extracted %v from %v, re-extracted %v", sc, c, again)
		}
	})
}
