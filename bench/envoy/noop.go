package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/envoyapi/wire"
)

// noop answers OK to every Check and ShouldRateLimit without looking at it: what the gRPC
// stack alone costs a service behind Envoy.
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

// mirror answers every Check and ShouldRateLimit with the answer extauthz (at like) gave the
// first call of the same method, asked once: a no-op whose answers carry what extauthz's do
// (the origin as dynamic metadata, x-origin's removal, each descriptor's limit, remaining and
// reset), so that what Envoy does with such an answer counts on both sides and the rest is the
// service's own work. The benchmark's requests all have the same shape (one descriptor of the
// same entries, the same headers), so one answer fits them all; a rate-limit call of another
// number of descriptors is asked again, and its answer kept instead.
type mirror struct {
	auth  authv3.AuthorizationClient
	rls   rlsv3.RateLimitServiceClient
	check atomic.Pointer[authv3.CheckResponse]
	limit atomic.Pointer[rlsv3.RateLimitResponse]
}

func (m *mirror) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	if r := m.check.Load(); r != nil {
		return r, nil
	}
	r, err := m.auth.Check(ctx, req)
	if err != nil {
		return nil, err
	}
	m.check.CompareAndSwap(nil, r)
	return r, nil
}

func (m *mirror) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if r := m.limit.Load(); r != nil && len(r.GetStatuses()) == len(req.GetDescriptors()) {
		return r, nil
	}
	r, err := m.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, err
	}
	m.limit.Store(r)
	return r, nil
}

// serverOptions are the gRPC server options extauthz runs with by default (cmd/extauthz's
// grpcOptions on config.Default, without TLS): the same codec, streams per connection,
// stream workers and keepalive, so that the no-op differs from extauthz only in its handlers.
func serverOptions() []grpc.ServerOption {
	cfg := config.Default().GRPC
	pingAfter := cfg.Keepalive.Time
	if pingAfter == 0 {
		pingAfter = time.Duration(math.MaxInt64)
	}
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(uint32(cfg.MaxConcurrentStreams)),
		grpc.ForceServerCodecV2(wire.NewCodec()),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingAfter, Timeout: cfg.Keepalive.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.Keepalive.MinTime, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)),
	}
}

// serveNoop serves the no-op (and gRPC health, which Envoy's cluster checks) on addr until
// SIGTERM or SIGINT; it prints the address it listens on first. With like (extauthz's
// address) it serves the mirror instead; with pace > 0, the paced no-op, pace ShouldRateLimit
// calls a second.
func serveNoop(addr, like string, pace int) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer(serverOptions()...)
	switch {
	case pace > 0:
		authv3.RegisterAuthorizationServer(g, noop{})
		rlsv3.RegisterRateLimitServiceServer(g, newPaced(pace))
	case like == "":
		authv3.RegisterAuthorizationServer(g, noop{})
		rlsv3.RegisterRateLimitServiceServer(g, noop{})
	default:
		cc, err := grpc.NewClient(like, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		m := &mirror{auth: authv3.NewAuthorizationClient(cc), rls: rlsv3.NewRateLimitServiceClient(cc)}
		authv3.RegisterAuthorizationServer(g, m)
		rlsv3.RegisterRateLimitServiceServer(g, m)
	}
	healthpb.RegisterHealthServer(g, health.NewServer())
	fmt.Println(lis.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	return g.Serve(lis)
}
