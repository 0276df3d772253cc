package main

import (
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// A descriptor whose hits_addend is an explicit 0 (Envoy sends it: GrpcClientImpl::createRequest
// copies hits_addend whenever it has a value) checks a cluster rule in Redis without consuming:
// after any number of such probes, on both replicas, the real requests are admitted up to the
// full count, and each probe reports the remaining of the state as it is. Before, each probe
// took a token (or a slot) in Redis: the real requests after three probes were all refused.
func TestBinaryClusterProbeConsumesNothing(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "GET:/stock", param: item_id, grade: qps, count: 3, duration: 1h, cluster: true}
  - {resource: "GET:/export", param: user, grade: concurrency, count: 2, lease: 1h, cluster: true}
`)
	replicas := startReplicas(t, dir, srv.Addr(), rules, 2)
	clients := []rlsv3.RateLimitServiceClient{
		rlsv3.NewRateLimitServiceClient(dial(t, replicas[0].GRPCAddr)),
		rlsv3.NewRateLimitServiceClient(dial(t, replicas[1].GRPCAddr)),
	}
	// call sends one descriptor to replica i: a probe (hits_addend explicitly 0) or a real
	// request (no hits_addend: the request's, 0 meaning 1).
	call := func(i int, resource, param, value, lease string, probe bool) *rlsv3.RateLimitResponse {
		t.Helper()
		return leased{resource, param, value, lease, false, probe}.send(t, clients[i%2])
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	remaining := func(r *rlsv3.RateLimitResponse) uint32 {
		if len(r.GetStatuses()) != 1 || r.GetStatuses()[0].GetCurrentLimit() == nil {
			t.Fatalf("response without the status of the rule: %v", r)
		}
		return r.GetStatuses()[0].GetLimitRemaining()
	}

	t.Run("qps", func(t *testing.T) {
		for i := range 10 {
			r := call(i, "GET:/stock", "item_id", "hot", "", true)
			if r.GetOverallCode() != ok || remaining(r) != 3 {
				t.Fatalf("probe %d of a full bucket: %v, remaining %d; want OK, 3", i, r.GetOverallCode(), remaining(r))
			}
		}
		for i := range 3 {
			r := call(i, "GET:/stock", "item_id", "hot", "", false)
			if r.GetOverallCode() != ok || remaining(r) != uint32(2-i) {
				t.Errorf("real request %d of 3 after the probes: %v, remaining %d; want OK, %d",
					i, r.GetOverallCode(), remaining(r), 2-i)
			}
			if p := call(i+1, "GET:/stock", "item_id", "hot", "", true); remaining(p) != uint32(2-i) {
				t.Errorf("probe after real request %d: remaining %d, want %d", i, remaining(p), 2-i)
			}
		}
		if r := call(0, "GET:/stock", "item_id", "hot", "", false); r.GetOverallCode() != over {
			t.Errorf("the fourth real request: %v, want OVER_LIMIT", r.GetOverallCode())
		}
		for i := range 2 {
			if r := call(i, "GET:/stock", "item_id", "hot", "", true); r.GetOverallCode() != over {
				t.Errorf("probe %d of an empty bucket: %v, want OVER_LIMIT", i, r.GetOverallCode())
			}
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		for i := range 6 {
			r := call(i, "GET:/export", "user", "u", fmt.Sprintf("probe-%d", i), true)
			if r.GetOverallCode() != ok || remaining(r) != 2 {
				t.Fatalf("probe %d with nothing in flight: %v, remaining %d; want OK, 2", i, r.GetOverallCode(), remaining(r))
			}
		}
		for i := range 2 {
			if r := call(i, "GET:/export", "user", "u", fmt.Sprintf("real-%d", i), false); r.GetOverallCode() != ok {
				t.Errorf("real request %d of 2 after the probes: %v, want OK", i, r.GetOverallCode())
			}
		}
		if r := call(0, "GET:/export", "user", "u", "real-2", false); r.GetOverallCode() != over {
			t.Errorf("a third request in flight: %v, want OVER_LIMIT", r.GetOverallCode())
		}
		if r := call(1, "GET:/export", "user", "u", "probe-9", true); r.GetOverallCode() != over || remaining(r) != 0 {
			t.Errorf("probe with both slots held: %v, remaining %d; want OVER_LIMIT, 0", r.GetOverallCode(), remaining(r))
		}
	})
}
