// Package otlptest is an in-process OpenTelemetry collector for tests: the OTLP/gRPC trace
// service on a loopback port, keeping every span it is sent.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Receiver is a running collector; it stops when its test ends.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []*tracepb.Span
}

// Start starts a Receiver on a loopback port.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

// Addr is the host:port to export to (plaintext).
func (r *Receiver) Addr() string { return r.addr }

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Export keeps the spans of req.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ChildOf returns a span received whose parent span id is parent (hex), or nil.
func (r *Receiver) ChildOf(parent string) *tracepb.Span {
	for _, s := range r.Spans() {
		if hex.EncodeToString(s.GetParentSpanId()) == parent {
			return s
		}
	}
	return nil
}

// Attr is the string value of the attribute key of s, "" when it has none.
func Attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
