package envoytest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
)

// Service stands in for extauthz behind a real Envoy's ext_authz and rate-limit clusters: a
// gRPC server on loopback that records every Check and ShouldRateLimit call exactly as Envoy
// sent it and answers as told. It serves gRPC health ("" is SERVING), which the shipped
// cluster's health check asks. It is safe for concurrent use.
type Service struct {
	authv3.UnimplementedAuthorizationServer
	rlsv3.UnimplementedRateLimitServiceServer
	Addr string // host:port

	mu      sync.Mutex
	checks  []*authv3.CheckRequest
	limits  []*rlsv3.RateLimitRequest
	check   func(*authv3.CheckRequest) *authv3.CheckResponse
	limit   func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse
	changes changes // notified on every call
}

// StartService starts a Service, stopped when t ends. It answers OK to everything until told
// otherwise (Answer).
func StartService(t testing.TB) *Service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Addr: ln.Addr().String()}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, s)
	rlsv3.RegisterRateLimitServiceServer(srv, s)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return s
}

// Answer sets how calls are answered from now on: by check and limit; a nil func answers OK
// (every descriptor OK), and a func that returns nil fails the call (UNAVAILABLE).
func (s *Service) Answer(check func(*authv3.CheckRequest) *authv3.CheckResponse, limit func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) {
	s.mu.Lock()
	s.check, s.limit = check, limit
	s.mu.Unlock()
}

// Check records req and answers it.
func (s *Service) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	s.mu.Lock()
	s.checks = append(s.checks, req)
	answer := s.check
	s.changes.notify()
	s.mu.Unlock()
	if answer == nil {
		return &authv3.CheckResponse{Status: &status.Status{}}, nil
	}
	if resp := answer(req); resp != nil {
		return resp, nil
	}
	return nil, grpcstatus.Error(codes.Unavailable, "the test fails this call")
}

// ShouldRateLimit records req and answers it.
func (s *Service) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.mu.Lock()
	s.limits = append(s.limits, req)
	answer := s.limit
	s.changes.notify()
	s.mu.Unlock()
	if answer == nil {
		return OK(req), nil
	}
	if resp := answer(req); resp != nil {
		return resp, nil
	}
	return nil, grpcstatus.Error(codes.Unavailable, "the test fails this call")
}

// OK is the answer that lets req through: OK overall and for every descriptor.
func OK(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp
}

// Recorded returns the calls recorded so far.
func (s *Service) Recorded() ([]*authv3.CheckRequest, []*rlsv3.RateLimitRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*authv3.CheckRequest(nil), s.checks...), append([]*rlsv3.RateLimitRequest(nil), s.limits...)
}

// Take returns the calls recorded since the last Take (or Forget) and forgets them.
func (s *Service) Take() ([]*authv3.CheckRequest, []*rlsv3.RateLimitRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, l := s.checks, s.limits
	s.checks, s.limits = nil, nil
	return c, l
}

// Wait waits up to limit for cond over the calls recorded, checked on every call, and reports
// whether it held.
func (s *Service) Wait(limit time.Duration, cond func(checks []*authv3.CheckRequest, limits []*rlsv3.RateLimitRequest) bool) bool {
	return s.changes.waitFor(&s.mu, limit, func() bool { return cond(s.checks, s.limits) })
}
