package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// counted answers like a service with answers of its own and counts the calls it gets.
type counted struct {
	checks, limits atomic.Int32
}

func (c *counted) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	n := c.checks.Add(1)
	return &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
		HeadersToRemove: []string{"x-origin", string(rune('a' + n))}}}}, nil
}

func (c *counted) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := c.limits.Add(1)
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		r.Statuses = append(r.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: uint32(n)})
	}
	return r, nil
}

// The mirror asks the service it mirrors once a method and answers every later call with that
// answer; a rate-limit call of another number of descriptors is asked again.
func TestMirrorAnswersWithTheFirstAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &counted{}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, svc)
	rlsv3.RegisterRateLimitServiceServer(g, svc)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m := &mirror{auth: authv3.NewAuthorizationClient(cc), rls: rlsv3.NewRateLimitServiceClient(cc)}
	ctx := context.Background()

	var first *authv3.CheckResponse
	for i := range 3 {
		r, err := m.Check(ctx, &authv3.CheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r
		}
		if !proto.Equal(r, first) {
			t.Errorf("check %d answered %v, want the first answer %v", i, r, first)
		}
	}
	if got := first.GetOkResponse().GetHeadersToRemove(); len(got) != 2 || got[0] != "x-origin" {
		t.Errorf("the first answer is %v, not the service's", first)
	}
	if n := svc.checks.Load(); n != 1 {
		t.Errorf("the service was asked %d Checks, want 1", n)
	}

	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "item_id", Value: "1"}}}
	one := &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
	two := &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{d, d}}
	for i, req := range []*rlsv3.RateLimitRequest{one, one, two, two, one} {
		r, err := m.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetStatuses()) != len(req.GetDescriptors()) {
			t.Errorf("call %d: %d statuses for %d descriptors", i, len(r.GetStatuses()), len(req.GetDescriptors()))
		}
	}
	if n := svc.limits.Load(); n != 3 {
		t.Errorf("the service was asked %d ShouldRateLimit calls, want 3 (one a change of shape)", n)
	}
}
