package main

import (
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// Two replicas (store.redis.replicas: 2) with Redis down and fallback local: a rule of 3 an
// hour admits 1 a replica, 2 in all, never more than the rule (rounded up it admitted 2 a
// replica, 4 in all); a rule of 1 an hour, below the replicas, admits none.
func TestBinaryFallbackShareNeverExceedsRule(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/three", param: item_id, grade: qps, count: 3, duration: 1h, cluster: true}
  - {resource: "POST:/one", param: item_id, grade: qps, count: 1, duration: 1h, cluster: true}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
    timeout: 50ms
    fallback: local
    replicas: 2
`, srv.Addr()))
	admitted := map[string]int{}
	for r := range 2 {
		p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
		p.WaitLog(t, logBreakerOpen, 5*time.Second)
		c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
		for _, res := range []string{"POST:/three", "POST:/one"} {
			for range 5 {
				if code(t, c, res, "v") == rlsv3.RateLimitResponse_OK {
					admitted[res]++
				}
			}
		}
		t.Logf("after replica %d: %v", r, admitted)
	}
	if admitted["POST:/three"] != 2 {
		t.Errorf("count 3 on 2 replicas admitted %d in all, want 2 (1 a replica, never above 3)", admitted["POST:/three"])
	}
	if admitted["POST:/one"] != 0 {
		t.Errorf("count 1 on 2 replicas admitted %d in all, want 0 (a share below one is none)", admitted["POST:/one"])
	}
}
