package envoyapi

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

// noop answers OK to everything: the floor the gRPC stack sets.
type noop struct{}

func (noop) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	}, nil
}

func (noop) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

func registerNoop(g *grpc.Server) {
	authv3.RegisterAuthorizationServer(g, noop{})
	rlsv3.RegisterRateLimitServiceServer(g, noop{})
}

// benchRig serves extauthz with rules that apply to every request and always allow: an
// authority white list and a token bucket per item value too large to run dry.
func benchRig(b *testing.B) *rig {
	return newRig(b, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Origin: []descriptors.Source{{From: "principal"}, {From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{
				"item": {From: "query", Name: "item"},
				"user": {From: "header", Name: "x-user-id"},
			},
		}},
		authority: []authority.Rule{
			{Resource: "POST:/order", Strategy: authority.White, Origins: []string{"checkout"}},
			{Resource: "order", Strategy: authority.White, Origins: []string{"checkout"}},
		},
		paramFlow: []hotparam.Rule{
			{Resource: "POST:/order", Param: "item", Count: 1 << 40, Duration: time.Second},
			{Resource: "order", Param: "item", Count: 1 << 40, Duration: time.Second},
		},
	})
}

const benchValues = 1024

// benchChecks are benchValues check requests, one item each, from a white-listed origin.
func benchChecks() []*authv3.CheckRequest {
	reqs := make([]*authv3.CheckRequest, benchValues)
	for i := range reqs {
		reqs[i] = httpReq{method: "POST", path: "/order?item=" + strconv.Itoa(i), addr: "10.0.0.1",
			headers: map[string]string{"x-origin": "checkout", "x-user-id": "u" + strconv.Itoa(i%7),
				"user-agent": "bench", "accept": "*/*"}}.build()
	}
	return reqs
}

// benchLimits are benchValues rate-limit requests of two descriptors each (item and user).
func benchLimits() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, benchValues)
	for i := range reqs {
		reqs[i] = rlReq("bench",
			desc("resource", "order", "origin", "checkout", "item", strconv.Itoa(i)),
			desc("resource", "order", "origin", "checkout", "user", "u"+strconv.Itoa(i%7)),
		)
	}
	return reqs
}

func BenchmarkCheck(b *testing.B) {
	reqs := benchChecks()
	run := func(b *testing.B, c authv3.AuthorizationClient) {
		var n atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				resp, err := c.Check(ctx, reqs[n.Add(1)%benchValues])
				if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
					b.Errorf("Check = %v, %v", resp, err)
					return
				}
			}
		})
	}
	b.Run("noop", func(b *testing.B) { run(b, authv3.NewAuthorizationClient(serve(b, registerNoop))) })
	b.Run("extauthz", func(b *testing.B) { run(b, benchRig(b).auth) })
}

func BenchmarkShouldRateLimit(b *testing.B) {
	reqs := benchLimits()
	run := func(b *testing.B, c rlsv3.RateLimitServiceClient) {
		var n atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				resp, err := c.ShouldRateLimit(ctx, reqs[n.Add(1)%benchValues])
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Errorf("ShouldRateLimit = %v, %v", resp, err)
					return
				}
			}
		})
	}
	b.Run("noop", func(b *testing.B) { run(b, rlsv3.NewRateLimitServiceClient(serve(b, registerNoop))) })
	b.Run("extauthz", func(b *testing.B) { run(b, benchRig(b).rls) })
}

// BenchmarkServerCheck is the handler alone, without gRPC: what extauthz adds per call.
func BenchmarkServerCheck(b *testing.B) {
	r := benchRig(b)
	req := httpReq{method: "POST", path: "/order?item=1", headers: map[string]string{"x-origin": "checkout"}}.build()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp, err := r.srv.Check(ctx, req); err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
			b.Fatal(resp, err)
		}
	}
}

// BenchmarkServerShouldRateLimit is the handler alone, without gRPC.
func BenchmarkServerShouldRateLimit(b *testing.B) {
	r := benchRig(b)
	req := rlReq("bench", desc("resource", "order", "origin", "checkout", "item", "1"), desc("resource", "order", "origin", "checkout", "user", "u"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := r.srv.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
		r.srv.codec.Release(resp) // as the server's codec does once it encoded the answer
	}
}

// BenchmarkRatio calls the no-op server and extauthz alternately from the same goroutines, so
// that both see the same load, and reports each one's mean call time and extauthz's throughput
// as a fraction of the no-op's (noop-ns/extauthz-ns).
func BenchmarkRatio(b *testing.B) {
	noopConn := serve(b, registerNoop)
	r := benchRig(b)
	checks, rls := benchChecks(), benchLimits()
	type pair struct {
		name string
		call func(ctx context.Context, i uint64, extauthz bool) error
	}
	noopAuth, noopRLS := authv3.NewAuthorizationClient(noopConn), rlsv3.NewRateLimitServiceClient(noopConn)
	pairs := []pair{
		{"Check", func(ctx context.Context, i uint64, ext bool) error {
			c := noopAuth
			if ext {
				c = r.auth
			}
			resp, err := c.Check(ctx, checks[i%benchValues])
			if err == nil && resp.GetStatus().GetCode() != int32(codes.OK) {
				b.Errorf("Check = %v", resp)
			}
			return err
		}},
		{"ShouldRateLimit", func(ctx context.Context, i uint64, ext bool) error {
			c := noopRLS
			if ext {
				c = r.rls
			}
			resp, err := c.ShouldRateLimit(ctx, rls[i%benchValues])
			if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Errorf("ShouldRateLimit = %v", resp)
			}
			return err
		}},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			var n atomic.Uint64
			var noopNs, extNs, calls atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				var myNoop, myExt, myCalls int64
				for pb.Next() {
					i := n.Add(1)
					ext := i%2 == 0
					t := time.Now()
					if err := p.call(ctx, i/2, ext); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(t).Nanoseconds()
					if ext {
						myExt += d
						myCalls++
					} else {
						myNoop += d
					}
				}
				noopNs.Add(myNoop)
				extNs.Add(myExt)
				calls.Add(myCalls)
			})
			if c := calls.Load(); c > 0 && extNs.Load() > 0 {
				b.ReportMetric(float64(noopNs.Load())/float64(c), "noop-ns/call")
				b.ReportMetric(float64(extNs.Load())/float64(c), "extauthz-ns/call")
				b.ReportMetric(float64(noopNs.Load())/float64(extNs.Load()), "ratio")
			}
		})
	}
}

// BenchmarkCheckEnvoy is the handler and the encoding of its answer, without gRPC, for the
// Check Envoy 1.40 sends for envoy.yaml's /items route (its attributes as Envoy filled them:
// the peers, the request id, the x-origin header, the route's resource in
// context_extensions), decided by the shipped mapping against a black list: an allowed
// answer that removes x-origin and carries the identity as dynamic metadata. The no-op's
// bare OK, made and encoded the same way, is the floor.
func BenchmarkCheckEnvoy(b *testing.B) {
	req := httpReq{method: "GET", path: "/items?item_id=5", host: "127.0.0.1:8080", addr: "127.0.0.1",
		headers: map[string]string{"x-origin": "web", "x-request-id": "a2ee1da7-d4ca-4794-86c8-a53a9b250406"},
		ext:     map[string]string{"resource": "GET:/items"}}.build()
	r := newRig(b, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{Resource: "{method}:{path}",
			Origin: []descriptors.Source{{From: "principal"}, {From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{"api_key": {From: "header", Name: "x-api-key"}}}},
		authority: []authority.Rule{{Resource: "GET:/items", Strategy: authority.Black, Origins: []string{"scraper"}}},
	})
	ctx := context.Background()
	run := func(b *testing.B, check func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error)) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := check(ctx, req)
			if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
				b.Fatal(resp, err)
			}
			if _, err := r.srv.codec.Marshal(resp); err != nil { // as gRPC encodes the answer
				b.Fatal(err)
			}
		}
	}
	b.Run("noop", func(b *testing.B) { run(b, noop{}.Check) })
	b.Run("extauthz", func(b *testing.B) { run(b, r.srv.Check) })
}
