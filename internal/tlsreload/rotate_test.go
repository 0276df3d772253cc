package tlsreload

// Certificate rotation over real TLS on loopback, with a short look interval.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

// testCheckInterval is the look interval of the in-process servers.
const testCheckInterval = 10 * time.Millisecond

// tlsServer serves gRPC health over TLS from r on loopback and returns its address.
func tlsServer(t *testing.T, r *Reloader) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(r.ServerConfig())))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// rotation is one way tooling replaces a certificate and its key.
type rotation struct {
	name string
	// install lays out pair in dir and returns the paths to configure.
	install func(t *testing.T, dir string, p pemPair) (certFile, keyFile string)
	// replace puts cert and key where install laid them out.
	replace func(t *testing.T, dir string, cert, key []byte)
}

// rotations are the ways the tests replace a pair.
func rotations() []rotation {
	return []rotation{
		{
			name: "rename",
			install: func(t *testing.T, dir string, p pemPair) (string, string) {
				return writeBytes(t, dir, "tls.crt", p.cert), writeBytes(t, dir, "tls.key", p.key)
			},
			replace: func(t *testing.T, dir string, cert, key []byte) {
				replaceFile(t, filepath.Join(dir, "tls.key"), key)
				replaceFile(t, filepath.Join(dir, "tls.crt"), cert)
			},
		},
		{
			name: "write in place",
			install: func(t *testing.T, dir string, p pemPair) (string, string) {
				return writeBytes(t, dir, "tls.crt", p.cert), writeBytes(t, dir, "tls.key", p.key)
			},
			replace: func(t *testing.T, dir string, cert, key []byte) {
				rewriteFile(t, filepath.Join(dir, "tls.key"), key)
				rewriteFile(t, filepath.Join(dir, "tls.crt"), cert)
			},
		},
		{
			// A Kubernetes secret volume: tls.crt -> ..data/tls.crt, and ..data swapped to a new
			// directory in one rename.
			name: "symlink swap",
			install: func(t *testing.T, dir string, p pemPair) (string, string) {
				swapData(t, dir, p.cert, p.key)
				for _, name := range []string{"tls.crt", "tls.key"} {
					if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
						t.Fatal(err)
					}
				}
				return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			},
			replace: swapData,
		},
	}
}

// swapData writes cert and key to a fresh directory in dir and points dir/..data at it.
func swapData(t *testing.T, dir string, cert, key []byte) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, ts, "tls.crt", cert)
	writeBytes(t, ts, "tls.key", key)
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestTLSRotation(t *testing.T) {
	ca := testpki.New(t, "extauthz test CA")
	roots := ca.Roots()
	for _, rot := range rotations() {
		t.Run(rot.name, func(t *testing.T) {
			dir := t.TempDir()
			a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
			b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
			c := issuePair(t, ca, "extauthz-c", x509.ExtKeyUsageServerAuth)
			certFile, keyFile := rot.install(t, dir, a)
			core, logs := observer.New(zapcore.InfoLevel)
			r, err := New(Options{
				Files:    Config{CertFile: certFile, KeyFile: keyFile},
				Interval: testCheckInterval,
				Log:      zap.New(core),
			})
			if err != nil {
				t.Fatal(err)
			}
			addr := tlsServer(t, r)
			testpki.StillServes(t, addr, roots, nil, a.leaf)

			rot.replace(t, dir, b.cert, b.key)
			testpki.EventuallyServes(t, addr, roots, nil, b.leaf)
			st, err := healthOver(t, addr, credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}))
			if err != nil || st != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health after rotation = %v, %v; want SERVING", st, err)
			}

			// Broken replacements: a key of another pair, a certificate cut short mid-write.
			broken := []struct {
				name      string
				cert, key []byte
			}{
				{"mismatched key", b.cert, c.key},
				{"truncated certificate", c.cert[:len(c.cert)/2], c.key},
			}
			for _, br := range broken {
				failures := messages(logs, msgReloadFailed)
				rot.replace(t, dir, br.cert, br.key)
				eventually(t, "the failure of "+br.name, func() bool {
					_, _ = testpki.ServedSerial(addr, roots, nil) // handshakes are what start a look
					return messages(logs, msgReloadFailed) > failures
				})
				testpki.StillServes(t, addr, roots, nil, b.leaf)
			}
			if got := messages(logs, msgReloaded); got < 1 {
				t.Errorf("%q logged %d times, want at least once", msgReloaded, got)
			}
		})
	}
}

func TestTLSClientCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA := testpki.New(t, "old client CA")
	newCA := testpki.New(t, "new client CA")
	serverCA := testpki.New(t, "server CA")
	roots := serverCA.Roots()
	s1 := issuePair(t, serverCA, "extauthz-1", x509.ExtKeyUsageServerAuth)
	s2 := issuePair(t, serverCA, "extauthz-2", x509.ExtKeyUsageServerAuth)
	clientPair := func(ca *testpki.CA) []tls.Certificate {
		cert, key := ca.Issue(t, "envoy", x509.ExtKeyUsageClientAuth)
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	oldClient, newClient := clientPair(oldCA), clientPair(newCA)
	caFile := writeBytes(t, dir, "ca.pem", oldCA.PEM)
	r, err := New(Options{
		Files: Config{
			CertFile:     writeBytes(t, dir, "tls.crt", s1.cert),
			KeyFile:      writeBytes(t, dir, "tls.key", s1.key),
			ClientCAFile: caFile,
		},
		Interval: testCheckInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, r)
	accepted := func(client []tls.Certificate) bool {
		st, err := healthOver(t, addr, credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: client}))
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	}
	if !accepted(oldClient) || accepted(newClient) || accepted(nil) {
		t.Fatalf("before rotation: old CA's client %v, new CA's %v, none %v; want true, false, false",
			accepted(oldClient), accepted(newClient), accepted(nil))
	}

	replaceFile(t, caFile, newCA.PEM)
	eventually(t, "the new CA's client accepted", func() bool { return accepted(newClient) })
	if accepted(oldClient) {
		t.Error("a client signed only by the old CA is still accepted")
	}
	if accepted(nil) {
		t.Error("a client without a certificate is accepted")
	}

	// The server's own certificate rotates on the mTLS path too.
	replaceFile(t, filepath.Join(dir, "tls.key"), s2.key)
	replaceFile(t, filepath.Join(dir, "tls.crt"), s2.cert)
	testpki.EventuallyServes(t, addr, roots, newClient, s2.leaf)
	if !accepted(newClient) || accepted(oldClient) {
		t.Errorf("after the server's rotation: new CA's client %v, old CA's %v; want true, false", accepted(newClient), accepted(oldClient))
	}
}

// writeBytes writes data to dir/name and returns its path.
func writeBytes(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeAtomic replaces path with content in one rename, as rotation tools do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually waits for cond, checking it every 10ms, for at most 15s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healthOver calls the health service at addr over creds.
func healthOver(t *testing.T, addr string, creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return resp.GetStatus(), err
}
