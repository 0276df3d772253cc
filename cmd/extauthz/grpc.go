package main

import (
	"math"
	"time"

	"go.uber.org/zap"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/internal/tlsreload"
)

// grpcOptions are the gRPC server's options from cfg: codec as its codec, message size limit,
// streams per connection, stream workers, keepalive and its enforcement, and TLS (mTLS when a
// client CA is set) with certificate rotation logged to log. The Reloader serving the
// certificate is nil without TLS. codec must be the one the envoyapi.Server is given
// (envoyapi.Options.Codec), so that it reuses the server's rate-limit answers.
func grpcOptions(cfg config.Config, codec *wire.Codec, log *zap.Logger) ([]grpc.ServerOption, *tlsreload.Reloader, error) {
	ka := cfg.GRPC.Keepalive
	pingAfter := ka.Time
	if pingAfter == 0 {
		pingAfter = time.Duration(math.MaxInt64) // never ping
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.GRPC.MaxRecvMsgSize),
		// Bounds the goroutines and memory one connection can hold (a throttled call waits
		// in its stream); clients queue further calls until a stream ends.
		grpc.MaxConcurrentStreams(uint32(cfg.GRPC.MaxConcurrentStreams)),
		grpc.ForceServerCodecV2(codec), // invalid UTF-8 is decided on, not refused
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingAfter, Timeout: ka.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: ka.MinTime,
			// Envoy keeps its connections open between requests and may ping them.
			PermitWithoutStream: true,
		}),
	}
	if n := cfg.GRPC.StreamWorkers; n > 0 {
		// A call on a goroutine of its own grows that goroutine's stack on every call (a
		// check's path is deeper than a new goroutine's first stack): 15-20% of the service's
		// CPU in Redis mode under load. A worker keeps its grown stack from call to call; gRPC
		// replaces each worker after 65,536 calls, which gives a stack grown by a rare deep
		// call back. gRPC marks the option experimental; calls beyond the workers run as before.
		opts = append(opts, grpc.NumStreamWorkers(uint32(n)))
	}
	if !cfg.TLS.Enabled() {
		return opts, nil, nil
	}
	r, err := tlsreload.New(tlsreload.Options{Files: cfg.TLS, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return append(opts, grpc.Creds(credentials.NewTLS(r.ServerConfig()))), r, nil
}
