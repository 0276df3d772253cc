package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/envoyapi"
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
		grpc.ForceServerCodecV2(envoyapi.NewCodec()),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingAfter, Timeout: cfg.Keepalive.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.Keepalive.MinTime, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(uint32(cfg.StreamWorkers)),
	}
}

// serveNoop serves the no-op (and gRPC health, which Envoy's cluster checks) on addr until
// SIGTERM or SIGINT; it prints the address it listens on first.
func serveNoop(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer(serverOptions()...)
	authv3.RegisterAuthorizationServer(g, noop{})
	rlsv3.RegisterRateLimitServiceServer(g, noop{})
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
