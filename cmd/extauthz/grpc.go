package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// grpcOptions are the gRPC server's options from cfg: message size limit, keepalive and its
// enforcement, and TLS (mTLS when a client CA is set).
func grpcOptions(cfg Config) ([]grpc.ServerOption, error) {
	ka := cfg.GRPC.Keepalive
	pingAfter := ka.Time
	if pingAfter == 0 {
		pingAfter = time.Duration(math.MaxInt64) // never ping
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.GRPC.MaxRecvMsgSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingAfter, Timeout: ka.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: ka.MinTime,
			// Envoy keeps its connections open between requests and may ping them.
			PermitWithoutStream: true,
		}),
	}
	if cfg.TLS.Enabled() {
		tc, err := serverTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return opts, nil
}

// serverTLS loads the listener's certificate and, when ClientCAFile is set, requires client
// certificates signed by that CA.
func serverTLS(cfg TLSConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot load cert_file/key_file: %w", err)
	}
	tc := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2"},
	}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.client_ca_file: %s: no PEM certificate found", cfg.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
