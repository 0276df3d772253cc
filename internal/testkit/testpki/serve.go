package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/wait"
)

// Roots returns a pool holding the CA's certificate alone.
func (c *CA) Roots() *x509.CertPool {
	roots := x509.NewCertPool()
	roots.AddCert(c.Cert)
	return roots
}

// ServedSerial opens a new TLS connection to addr (as 127.0.0.1, offering h2 and the client
// certificates client) and returns the serial number of the certificate the server presents.
func ServedSerial(addr string, roots *x509.CertPool, client []tls.Certificate) (*big.Int, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
		RootCAs:      roots,
		ServerName:   "127.0.0.1",
		NextProtos:   []string{"h2"},
		Certificates: client,
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// EventuallyServes opens new connections to addr, every 10ms for at most 15s, until one is
// presented want.
func EventuallyServes(t testing.TB, addr string, roots *x509.CertPool, client []tls.Certificate, want *x509.Certificate) {
	t.Helper()
	err := wait.Until(15*time.Second, 10*time.Millisecond, func() error {
		got, err := ServedSerial(addr, roots, client)
		if err == nil && got.Cmp(want.SerialNumber) == 0 {
			return nil
		}
		return fmt.Errorf("last served serial %v, %v; want %v", got, err, want.SerialNumber)
	})
	if err != nil {
		t.Fatalf("waiting for %s to be served: %v", want.Subject.CommonName, err)
	}
}

// StillServes checks that a new connection to addr is presented want.
func StillServes(t testing.TB, addr string, roots *x509.CertPool, client []tls.Certificate, want *x509.Certificate) {
	t.Helper()
	got, err := ServedSerial(addr, roots, client)
	if err != nil || got.Cmp(want.SerialNumber) != 0 {
		t.Errorf("served serial %v, %v; want %v (%s)", got, err, want.SerialNumber, want.Subject)
	}
}
