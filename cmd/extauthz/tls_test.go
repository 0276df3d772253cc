package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pki is a test CA and the certificates it signed.
type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	serial int64
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{caCert: cert, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue signs a leaf certificate and returns its PEM cert and key.
func (p *pki) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

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
	ca := newPKI(t, "extauthz test CA")
	serverCert, serverKey := ca.issue(t, "extauthz", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "envoy", x509.ExtKeyUsageClientAuth)
	other := newPKI(t, "another CA")
	strangerCert, strangerKey := other.issue(t, "stranger", x509.ExtKeyUsageClientAuth)

	caFile := writeBytes(t, dir, "ca.pem", ca.caPEM)
	certFile := writeBytes(t, dir, "server.pem", serverCert)
	keyFile := writeBytes(t, dir, "server.key", serverKey)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.caPEM)
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

		st, err := healthOver(t, p.grpcAddr, credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}))
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health over TLS = %v, %v; want SERVING", st, err)
		}
		// A client that does not trust the server's CA cannot connect.
		if _, err := healthOver(t, p.grpcAddr, credentials.NewTLS(&tls.Config{ServerName: "127.0.0.1"})); err == nil {
			t.Error("a client without the CA connected")
		}
		if code := p.stop(t); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})

	t.Run("mtls", func(t *testing.T) {
		cfg := writeFile(t, dir, "mtls.yaml", "tls: {cert_file: "+certFile+", key_file: "+keyFile+", client_ca_file: "+caFile+"}\n"+
			"authz: {origin: [{from: principal}]}\n")
		rules := writeFile(t, dir, "rules.yaml", "authority:\n  - {resource: \"GET:/hello\", strategy: white, origins: [envoy]}\n")
		p := start(t, "serve", "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")

		good := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{clientPair}})
		st, err := healthOver(t, p.grpcAddr, good)
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health over mTLS = %v, %v; want SERVING", st, err)
		}
		// The origin is the principal Envoy reports for its downstream peer.
		authz := authv3.NewAuthorizationClient(dial(t, p.grpcAddr, grpc.WithTransportCredentials(good)))
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
			if _, err := healthOver(t, p.grpcAddr, creds); err == nil {
				t.Errorf("%s: connected, want refused", tt.name)
			}
		}
		if code := p.stop(t); code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	})
}

func TestServerTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, "ca")
	cert, key := ca.issue(t, "s", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "s.pem", cert)
	keyFile := writeBytes(t, dir, "s.key", key)
	notPEM := writeBytes(t, dir, "junk.pem", []byte("not a certificate"))
	tests := []struct {
		name string
		cfg  TLSConfig
	}{
		{"missing cert", TLSConfig{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: keyFile}},
		{"key is not a key", TLSConfig{CertFile: certFile, KeyFile: notPEM}},
		{"missing client CA", TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "nope.pem")}},
		{"client CA without PEM", TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}},
	}
	for _, tt := range tests {
		if _, err := serverTLS(tt.cfg); err == nil {
			t.Errorf("%s: serverTLS succeeded", tt.name)
		}
	}
	tc, err := serverTLS(TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: writeBytes(t, dir, "ca.pem", ca.caPEM)})
	if err != nil {
		t.Fatal(err)
	}
	if tc.ClientAuth != tls.RequireAndVerifyClientCert || tc.ClientCAs == nil || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("mTLS config = auth %v, CAs %v, min %x", tc.ClientAuth, tc.ClientCAs != nil, tc.MinVersion)
	}
}
