package main

import (
	"fmt"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// A refund cluster rule in Redis mode: Envoy sends the stream-done release (is_negative_hits)
// for every request, refused ones included. Twenty sequential over-limit requests, each
// followed by its release with its lease id, admit none: a refused request consumed nothing,
// so its release gives nothing back. (Before, each release gave a token back and let the next
// request in: 19 of 20 admitted.) A release without a lease id gives nothing back either.
func TestBinaryClusterRefundOnlyWhatWasConsumed(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 2, duration: 1h, refund: true, cluster: true}
`)
	p := startReplicas(t, dir, srv.Addr(), rules, 1)[0]
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	call := func(lease string, release bool) rlsv3.RateLimitResponse_Code {
		t.Helper()
		return leased{"POST:/order", "item_id", "hot", lease, release, false}.send(t, c).GetOverallCode()
	}
	ok := rlsv3.RateLimitResponse_OK
	for i := range 2 { // the allowance, held (no release)
		if got := call(fmt.Sprintf("held-%d", i), false); got != ok {
			t.Fatalf("request %d of the allowance: %v", i, got)
		}
	}
	admitted := 0
	for i := range 20 {
		id := fmt.Sprintf("req-%d", i)
		if call(id, false) == ok {
			admitted++
		}
		call(id, true) // Envoy's release at stream end
	}
	for range 5 {
		call("", true) // releases without a lease id
	}
	if call("last", false) == ok {
		admitted++
	}
	if admitted != 0 {
		t.Errorf("over the allowance: %d of 21 requests admitted, want 0", admitted)
	}
}
