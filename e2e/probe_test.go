package e2e

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestProbe: a descriptor with an explicit hits_addend of 0 is a probe (README "hits_addend"):
// it is decided and its status reported as if it asked one token, but it takes nothing. The
// items rule holds 7 (5 a second, a burst of 2).
func TestProbe(t *testing.T) {
	s := sharedService(t)
	rr := func(hits uint64) *rlsv3.RateLimitRequest {
		x := limitRequest(t, itemReq("probe-1"), false)
		x.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		return x
	}
	// Twenty probes of a fresh value: each answered OK with the whole allowance left.
	for i := range 20 {
		resp := s.limit(t, rr(0))
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("probe %d of a full bucket = %v, want OK", i, resp.GetOverallCode())
		}
		st := resp.GetStatuses()[0]
		if st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 5 {
			t.Fatalf("probe %d: limit %d, remaining %d; want 5 and 5", i,
				st.GetCurrentLimit().GetRequestsPerUnit(), st.GetLimitRemaining())
		}
	}
	// The bucket is still full: all 7 at once pass (had the probes taken a token each, it
	// would have been empty after 7 of them).
	if got := s.limit(t, rr(7)).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("hits 7 after the probes = %v, want OK (the probes took nothing)", got)
	}
	// On the empty bucket a probe reports the refusal, and still takes nothing: refused, the
	// bucket refills at 5 a second as if the probe had not been made.
	resp := s.limit(t, rr(0))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("probe of an empty bucket = %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	if st := resp.GetStatuses()[0]; st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().GetSeconds() < 1 {
		t.Errorf("probe of an empty bucket: remaining %d, reset %v; want 0 and >= 1s",
			st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
	}
}
