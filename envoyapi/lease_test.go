package envoyapi

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/hotparam"
)

// TestRateLimitLeaseIDs plays Envoy's concurrency traffic over loopback gRPC: each request's
// acquire and its stream-done release carry the request's id under the lease key. Envoy sends
// the release also for a request the acquire refused; that release must not free a slot held
// by another request, or more than the limit would get in.
func TestRateLimitLeaseIDs(t *testing.T) {
	r := newRig(t, rigConfig{paramFlow: []hotparam.Rule{
		{Resource: "c", Param: "k", Grade: hotparam.Concurrency, Count: 2},
	}})
	acquire := func(id string) *rlsv3.RateLimitRequest {
		return rlReq("d", desc("resource", "c", "k", "x", "lease_id", id))
	}
	release := func(id string) *rlsv3.RateLimitRequest {
		d := desc("resource", "c", "k", "x", "lease_id", id)
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
		return rlReq("d", d)
	}
	steps := []struct {
		name      string
		req       *rlsv3.RateLimitRequest
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{
		{"a acquires", acquire("a"), ok, 1},
		{"b acquires", acquire("b"), ok, 0},
		{"c refused", acquire("c"), over, 0},
		{"c's stream-done release frees nothing", release("c"), ok, 0},
		{"d still refused", acquire("d"), over, 0},
		{"d's release frees nothing", release("d"), ok, 0},
		{"a releases its own slot", release("a"), ok, 1},
		{"a's release again is a no-op", release("a"), ok, 1},
		{"e takes a's slot", acquire("e"), ok, 0},
		{"f refused", acquire("f"), over, 0},
		{"b releases", release("b"), ok, 1},
		{"e releases", release("e"), ok, 2},
		{"f's late release: never below zero", release("f"), ok, 2},
	}
	for _, s := range steps {
		resp, err := r.rls.ShouldRateLimit(ctx(t), s.req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		st := resp.GetStatuses()
		if len(st) != 1 || resp.GetOverallCode() != s.code || st[0].GetCode() != s.code || st[0].GetLimitRemaining() != s.remaining {
			t.Fatalf("%s: overall %v, statuses %v; want %v with %d remaining", s.name, resp.GetOverallCode(), st, s.code, s.remaining)
		}
	}
}
