package redistest

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

// Certs writes, in a temporary directory, a fresh certificate authority and a server
// certificate it signs, valid for 127.0.0.1 and localhost for one hour.
func Certs(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.New(t, "redistest CA")
	cert, key := ca.Issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, b := range map[string][]byte{f.CA: ca.PEM, f.Cert: cert, f.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}
