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

// BenchmarkServerShouldRateLimitDescriptors runs, on requests of 1 and of 10 descriptors side
// by side, what the server does per call besides the transport: the handler, then the server
// codec's Marshal of its answer (which is where gRPC encodes it, once, after the handler and
// interceptors returned) and the release of the encoded buffer, as gRPC does once it is
// written. 10 descriptors should cost close to 10 single ones, with no allocation per
// descriptor that a single one does not have. The 10-descriptor run reports issue 11's targets
// next to its figures (target-ns/op, target-B/op).
func BenchmarkServerShouldRateLimitDescriptors(b *testing.B) {
	for _, n := range []int{1, 10, 64} {
		b.Run("descriptors="+strconv.Itoa(n), func(b *testing.B) {
			rig := benchRig(b)
			req := manyDescriptors(n)
			ctx := context.Background()
			codec := rig.srv.codec
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rig.srv.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
					b.Fatal(resp, err)
				}
				data, err := codec.Marshal(resp)
				if err != nil || data.Len() == 0 {
					b.Fatal(data.Len(), err)
				}
				data.Free()
			}
			if n == 10 {
				b.ReportMetric(targetNs10, "target-ns/op")
				b.ReportMetric(targetBytes10, "target-B/op")
			}
		})
	}
}

// BenchmarkShouldRateLimit64 is a call of 64 descriptors (descriptors.MaxDescriptors) over
// loopback gRPC, to the no-op server and to extauthz, one call at a time: what extauthz costs
// over the floor for the largest request (client and server in this process; compare
// instructions per call under callgrind, or CPU).
func BenchmarkShouldRateLimit64(b *testing.B) {
	req := manyDescriptors(64)
	run := func(b *testing.B, c rlsv3.RateLimitServiceClient) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.ShouldRateLimit(ctx, req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 64 {
				b.Fatal(resp, err)
			}
		}
	}
	b.Run("noop", func(b *testing.B) { run(b, rlsv3.NewRateLimitServiceClient(serve(b, registerNoop))) })
	b.Run("extauthz", func(b *testing.B) { run(b, benchRig(b).rls) })
}
