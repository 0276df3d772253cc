package main

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/redistest"
)

// spanSink is an in-process OTLP/gRPC trace collector keeping every span it is sent.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newSpanSink(t *testing.T) *spanSink {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &spanSink{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return s
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// With tracing on, a call that goes to Redis has a client span per Redis call, a child of the
// call's own span, itself a child of the span Envoy sent. Calls for a value Redis refused are
// answered from the cache of blocked values, counted by extauthz_redis_blocked_cache_hits_total.
func TestBinaryRedisCallsAreSpans(t *testing.T) {
	srv := redistest.Start(t)
	sink := newSpanSink(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 2, duration: 1h, cluster: true}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", `
store:
  redis:
    addrs: ["`+srv.Addr()+`"]
    timeout: 1s
tracing:
  endpoint: "`+sink.addr+`"
  insecure: true
`)
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	const traceID, envoySpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+envoySpan+"-01")
	resp, err := c.ShouldRateLimit(ctx, rlRequest("POST:/order", "traced"))
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v; want OK", resp.GetOverallCode(), err)
	}
	refused := 0
	for range 10 {
		if rateLimit(t, c, "POST:/order", "hot") == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
	}
	if refused != 8 {
		t.Errorf("%d of 10 calls refused, want 8 (2 an hour)", refused)
	}
	// The first refusal comes from Redis; the next ones, until the hour is over, from the cache.
	if got := metric(t, p, "extauthz_redis_blocked_cache_hits_total"); got != 7 {
		t.Errorf("extauthz_redis_blocked_cache_hits_total = %v, want 7", got)
	}
	if code := p.Stop(t); code != 0 { // buffered spans are sent on the way out
		t.Fatalf("exit code %d", code)
	}

	sink.mu.Lock()
	defer sink.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	for _, s := range sink.spans {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	found := false
	for _, s := range sink.spans {
		if !strings.HasPrefix(s.GetName(), "redis EVALSHA") || hex.EncodeToString(s.GetTraceId()) != traceID {
			continue
		}
		found = true
		if s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("span %q kind %v, want client", s.GetName(), s.GetKind())
		}
		parent := byID[hex.EncodeToString(s.GetParentSpanId())]
		if parent == nil || hex.EncodeToString(parent.GetParentSpanId()) != envoySpan {
			t.Errorf("span %q: parent %v, want the call's span, child of Envoy's %s", s.GetName(), parent, envoySpan)
		}
	}
	if !found {
		var names []string
		for _, s := range sink.spans {
			names = append(names, s.GetName())
		}
		t.Fatalf("no redis EVALSHA span in trace %s; spans: %v", traceID, names)
	}
}
