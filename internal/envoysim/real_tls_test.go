package envoysim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pki is a CA and the certificates it signed: the listener's and two clients'.
type pki struct {
	caPEM                []byte
	serverPEM, serverKey []byte
	client               tls.Certificate // with the URI SAN newPKI is given
	clientPEM            []byte
	plain                tls.Certificate // with a DNS SAN but no URI SAN
	plainPEM             []byte
	roots                *x509.CertPool
}

func newPKI(t *testing.T, clientURI string) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, uri string) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{cn}}
		if uri != "" {
			u, err := url.Parse(uri)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = []*url.URL{u}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), roots: x509.NewCertPool()}
	p.roots.AddCert(ca)
	p.serverPEM, p.serverKey = issue(2, "api.example", x509.ExtKeyUsageServerAuth, "")
	var clientKey []byte
	p.clientPEM, clientKey = issue(3, "web", x509.ExtKeyUsageClientAuth, clientURI)
	if p.client, err = tls.X509KeyPair(p.clientPEM, clientKey); err != nil {
		t.Fatal(err)
	}
	p.plainPEM, clientKey = issue(4, "mobile", x509.ExtKeyUsageClientAuth, "")
	if p.plain, err = tls.X509KeyPair(p.plainPEM, clientKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// withMTLS makes the listener called name terminate TLS with p's server certificate, asking
// for a client certificate signed by p's CA.
func withMTLS(name string, p *pki) variant {
	return func(t *testing.T, b *bootstrapv3.Bootstrap) {
		inline := func(b []byte) *corev3.DataSource {
			return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(b)}}
		}
		ctx, err := anypb.New(&tlsv3.DownstreamTlsContext{
			RequireClientCertificate: wrapperspb.Bool(true),
			CommonTlsContext: &tlsv3.CommonTlsContext{
				TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: inline(p.serverPEM), PrivateKey: inline(p.serverKey)}},
				ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
					ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: inline(p.caPEM)}},
			}})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range b.GetStaticResources().GetListeners() {
			if l.GetName() != name {
				continue
			}
			for _, fc := range l.GetFilterChains() {
				fc.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: ctx}}
			}
		}
	}
}

// TestRealMTLSCheckRequest runs TestStreamCheckRequest's request with its principal, over a
// TLS listener asking for a client certificate (include_peer_certificate, as shipped): the
// CheckRequest's source principal and certificate and its scheme are the emulation's.
func TestRealMTLSCheckRequest(t *testing.T) {
	p := newPKI(t, "spiffe://example/web")
	e := startReal(t, withListener("mtls", func(*hcmv3.HttpConnectionManager) {}), withMTLS("mtls", p)).at("mtls")
	for _, c := range []struct {
		name      string
		cert      tls.Certificate
		pem       []byte
		principal string
	}{
		{"a URI SAN", p.client, p.clientPEM, "spiffe://example/web"},
		{"no URI SAN: the DNS SAN", p.plain, p.plainPEM, "mobile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.clientTLS = &tls.Config{RootCAs: p.roots, ServerName: "api.example", Certificates: []tls.Certificate{c.cert}}
			r := streamCheckCase()
			r.Protocol = "" // HTTP/1.1 over TLS
			r.TLS = true
			r.Principal = c.principal
			r.PeerCertificate = c.pem
			r.LocalPrincipal = "api.example" // the listener's certificate: no URI SAN, its DNS SAN
			e.compareCheck(t, r, func(s *Stream) (*authv3.CheckRequest, error) { return e.conf.CheckRequest(s, time.Now()) })
		})
	}
}
