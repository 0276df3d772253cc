package main

// Certificate rotation through the binary, with the shipped look interval (the reloader's own
// tests rotate in process, in internal/tlsreload).

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
	"github.com/extauthz/extauthz/internal/tlsreload"
)

// pemPair is a certificate and its key, PEM-encoded, and the certificate parsed.
type pemPair struct {
	cert, key []byte
	leaf      *x509.Certificate
}

func issuePair(t *testing.T, ca *testpki.CA, cn string, usage x509.ExtKeyUsage) pemPair {
	t.Helper()
	cert, key := ca.Issue(t, cn, usage)
	block, _ := pem.Decode(cert)
	if block == nil {
		t.Fatal("no PEM block")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return pemPair{cert: cert, key: key, leaf: leaf}
}

// replaceFile writes data to path through a rename, as rotation tools do.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	writeAtomic(t, path, string(data))
}

// rewriteFile writes data over path in place.
func rewriteFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

const (
	msgReloaded     = "tls certificate reloaded"
	msgReloadFailed = "tls certificate reload failed; the certificate in force stays"
)

// The binary looks at its files every tlsreload.DefaultInterval and logs what it loads.
func TestBinaryTLSRotation(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "extauthz test CA")
	roots := ca.Roots()
	a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
	c := issuePair(t, ca, "extauthz-c", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "tls.crt", a.cert)
	keyFile := writeBytes(t, dir, "tls.key", a.key)
	cfg := writeFile(t, dir, "tls.yaml", "tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
	p := start(t, "serve", "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	testpki.StillServes(t, p.GRPCAddr, roots, nil, a.leaf)

	replaceFile(t, keyFile, b.key)
	replaceFile(t, certFile, b.cert)
	rotated := time.Now()
	testpki.EventuallyServes(t, p.GRPCAddr, roots, nil, b.leaf)
	if took, bound := time.Since(rotated), tlsreload.DefaultInterval+2*time.Second; took > bound {
		t.Errorf("the new certificate took %v to be served, want under %v", took, bound)
	}
	entry := p.Entry(msgReloaded)
	if entry == nil || entry["subject"] != "CN=extauthz-b" || entry["serial"] != b.leaf.SerialNumber.String() ||
		entry["not_after"] != b.leaf.NotAfter.UTC().Format(time.RFC3339Nano) {
		t.Errorf("reload log = %v; want subject CN=extauthz-b, serial %v, not_after %v", entry, b.leaf.SerialNumber,
			b.leaf.NotAfter.UTC().Format(time.RFC3339Nano))
	}

	rewriteFile(t, keyFile, c.key) // the certificate is still b's
	eventually(t, "the failure logged", func() bool {
		_, _ = testpki.ServedSerial(p.GRPCAddr, roots, nil)
		return p.Logged(msgReloadFailed)
	})
	testpki.StillServes(t, p.GRPCAddr, roots, nil, b.leaf)
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}
