package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

func writeBytes(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// healthOver dials addr with creds and returns the health status or the error.
func healthOver(t *testing.T, addr string, creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn := dial(t, addr, grpc.WithTransportCredentials(creds))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return resp.GetStatus(), err
}

func TestBinaryTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "extauthz test CA")
	serverCert, serverKey := ca.Issue(t, "extauthz", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.Issue(t, "envoy", x509.ExtKeyUsageClientAuth)
	other := testpki.New(t, "another CA")
	strangerCert, strangerKey := other.Issue(t, "stranger", x509.ExtKeyUsageClientAuth)

	caFile := writeBytes(t, dir, "ca.pem", ca.PEM)
	certFile := writeBytes(t, dir, "server.pem", serverCert)
	keyFile := writeBytes(t, dir, "server.key", serverKey)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	clientPair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	strangerPair, err := tls.X509KeyPair(strangerCert, strangerKey)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("tls", func(t *testing.T) {
		cfg := writeFile(t, dir, "tls.yaml", "tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
		p := start(t, "serve", "--config", cfg, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")

		st, err := healthOver(t, p.GRPCAddr, credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}))
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health over TLS = %v, %v; want SERVING", st, err)
		}
		// A client that does not trust the server's CA cannot connect.
		if _, err := healthOver(t, p.GRPCAddr, credentials.NewTLS(&tls.Config{ServerName: "127.0.0.1"})); err == nil {
			t.Error("a client without the CA connected")
		}
		if code := p.Stop(t); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})

	t.Run("mtls", func(t *testing.T) {
		cfg := writeFile(t, dir, "mtls.yaml", "tls: {cert_file: "+certFile+", key_file: "+keyFile+", client_ca_file: "+caFile+"}\n"+
			"authz: {origin: [{from: principal}]}\n")
		rules := writeFile(t, dir, "rules.yaml", "authority:\n  - {resource: \"GET:/hello\", strategy: white, origins: [envoy]}\n")
		p := start(t, "serve", "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")

		good := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{clientPair}})
		st, err := healthOver(t, p.GRPCAddr, good)
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health over mTLS = %v, %v; want SERVING", st, err)
		}
		// The origin is the principal Envoy reports for its downstream peer.
		authz := authv3.NewAuthorizationClient(dial(t, p.GRPCAddr, grpc.WithTransportCredentials(good)))
		for _, tt := range []struct {
			principal string
			want      codes.Code
		}{{"envoy", codes.OK}, {"intruder", codes.PermissionDenied}, {"", codes.PermissionDenied}} {
			req := checkRequest("GET", "/hello", "")
			req.Attributes.Source.Principal = tt.principal
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := authz.Check(ctx, req)
			cancel()
			if err != nil {
				t.Fatalf("Check over mTLS: %v", err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != tt.want {
				t.Errorf("Check with principal %q = %v, want %v", tt.principal, got, tt.want)
			}
		}

		tests := []struct {
			name  string
			certs []tls.Certificate
		}{
			{"no client certificate", nil},
			{"certificate from another CA", []tls.Certificate{strangerPair}},
		}
		for _, tt := range tests {
			creds := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: tt.certs})
			if _, err := healthOver(t, p.GRPCAddr, creds); err == nil {
				t.Errorf("%s: connected, want refused", tt.name)
			}
		}
		if code := p.Stop(t); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}
