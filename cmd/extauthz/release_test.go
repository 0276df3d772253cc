package main

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
		entries := []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: "POST:/upload"},
			{Key: "item_id", Value: "big"},
		}
		if lease != "" {
			entries = append(entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: "lease_id", Value: lease})
		}
		d := &rlcommonv3.RateLimitDescriptor{Entries: entries}
		if release {
			d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
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
