package envoyapi

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// descriptorTargets are issue 11's targets for ShouldRateLimit with 10 descriptors, handler
// alone: time and bytes allocated per call.
const (
	targetNs10    = 3000
	targetBytes10 = 1024
)

// manyDescriptors is a rate-limit request of n descriptors, each naming resource order from a
// white-listed origin with its own item value, so that every descriptor passes the authority
// rule and takes a token of its own value.
func manyDescriptors(n int) *rlsv3.RateLimitRequest {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("resource", "order", "origin", "checkout", "item", strconv.Itoa(i))
	}
	return rlReq("bench", ds...)
}

// BenchmarkServerShouldRateLimitDescriptors runs the handler alone (no gRPC) on requests of 1
// and of 10 descriptors side by side; 10 descriptors should cost close to 10 single ones, with
// no allocation per descriptor that a single one does not have. The 10-descriptor run reports
// issue 11's targets next to its figures (target-ns/op, target-B/op).
func BenchmarkServerShouldRateLimitDescriptors(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run("descriptors="+strconv.Itoa(n), func(b *testing.B) {
			rig := benchRig(b)
			req := manyDescriptors(n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := rig.srv.ShouldRateLimit(ctx, req); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatal(resp, err)
				}
			}
			if n == 10 {
				b.ReportMetric(targetNs10, "target-ns/op")
				b.ReportMetric(targetBytes10, "target-B/op")
			}
		})
	}
}
