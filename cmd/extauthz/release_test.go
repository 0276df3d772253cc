package main

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A concurrency rule whose acquires carry lease ids: releases without a lease id free none of
// their slots, however many are sent, so a client cannot make room for itself that way; a
// release naming a lease frees that lease's slot. (Before, a bare release freed the newest
// slot, whoever held it.)
func TestBinaryBareReleaseFreesNoNamedSlot(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/upload", param: item_id, grade: concurrency, count: 2, lease: 1h}
`)
	p := start(t, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	call := func(lease string, release bool) rlsv3.RateLimitResponse_Code {
		t.Helper()
		return leased{"POST:/upload", "item_id", "big", lease, release, false}.send(t, c).GetOverallCode()
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for _, id := range []string{"a", "b"} {
		if got := call(id, false); got != ok {
			t.Fatalf("acquire %s: %v, want OK", id, got)
		}
	}
	for range 5 {
		call("", true) // releases without a lease id
	}
	if got := call("c", false); got != over {
		t.Fatalf("acquire c after bare releases: %v, want OVER_LIMIT (a and b still hold both slots)", got)
	}
	call("a", true) // a's own release
	if got := call("c", false); got != ok {
		t.Errorf("acquire c after a's release: %v, want OK", got)
	}
}
