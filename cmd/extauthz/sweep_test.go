package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// trackedValues sums extauthz_hotparam_tracked_values over its rules in a scrape of p.
func trackedValues(t *testing.T, p *proc) float64 {
	t.Helper()
	_, body := p.Get(t, "/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "extauthz_hotparam_tracked_values{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// The service sweeps its hot-param state every sweep_interval: values asked for once, whose
// buckets are full again and that nobody asks for any more, are forgotten (the tracked-values
// gauge falls back to 0), and forgetting them changes no decision.
func TestBinarySweepForgetsIdleValues(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/sweep", param: item_id, grade: qps, count: 100, duration: 1s}
  - {resource: "POST:/kept", param: item_id, grade: qps, count: 1, duration: 1h}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", "sweep_interval: 200ms\n")
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i := range 20 {
		if got := rateLimit(t, c, "POST:/sweep", fmt.Sprintf("v%d", i)); got != ok {
			t.Fatalf("POST:/sweep v%d: %v, want OK", i, got)
		}
	}
	// The hour-long bucket is empty: not its default state, so it is kept however idle.
	if got := rateLimit(t, c, "POST:/kept", "k"); got != ok {
		t.Fatalf("POST:/kept first: %v, want OK", got)
	}
	if got := trackedValues(t, p); got < 1 {
		t.Fatalf("tracked values after the calls = %v, want the values just asked for", got)
	}
	// A value is forgotten once idle for its rule's current and previous window (1s each).
	eventually(t, "idle values forgotten", func() bool { return trackedValues(t, p) == 1 })
	if got := rateLimit(t, c, "POST:/kept", "k"); got != over {
		t.Errorf("POST:/kept after sweeps: %v, want OVER_LIMIT (its empty bucket was kept)", got)
	}
	if got := rateLimit(t, c, "POST:/sweep", "v0"); got != ok {
		t.Errorf("POST:/sweep v0 after its state was forgotten: %v, want OK", got)
	}
}
