package main

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/testkit/otlptest"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// With tracing on, a call that goes to Redis has a client span per Redis call, a child of the
// call's own span, itself a child of the span Envoy sent. Calls for a value left without a
// token are answered from the cache of blocked values, counted by
// extauthz_redis_blocked_cache_hits_total.
func TestBinaryRedisCallsAreSpans(t *testing.T) {
	srv := redistest.Start(t)
	sink := otlptest.Start(t)
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
  endpoint: "`+sink.Addr()+`"
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
	// The call that takes the last token learns when the next one is back: every refusal,
	// until the hour is over, comes from the cache, none held (the calls come one at a time,
	// long after the answer that made the entry).
	if got := metric(t, p, "extauthz_redis_blocked_cache_hits_total"); got != 8 {
		t.Errorf("extauthz_redis_blocked_cache_hits_total = %v, want 8", got)
	}
	if got := metric(t, p, "extauthz_redis_held_total"); got != 0 {
		t.Errorf("extauthz_redis_held_total = %v, want 0", got)
	}
	if code := p.Stop(t); code != 0 { // buffered spans are sent on the way out
		t.Fatalf("exit code %d", code)
	}

	spans := sink.Spans()
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	found := false
	for _, s := range spans {
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
		for _, s := range spans {
			names = append(names, s.GetName())
		}
		t.Fatalf("no redis EVALSHA span in trace %s; spans: %v", traceID, names)
	}
}
