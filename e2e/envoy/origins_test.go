package envoy

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

// serviceConfig writes the shipped extauthz.yaml with each old string replaced by its new one
// (each must be there) and returns the arguments that make extauthz serve read it instead.
func serviceConfig(t *testing.T, oldNew ...string) []string {
	t.Helper()
	b, err := os.ReadFile(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("extauthz.yaml has no %q", oldNew[i])
		}
		s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), "extauthz.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--config", path} // after the stack's own --config: the last one wins
}

// shippedOrigin is extauthz.yaml's origin list.
const shippedOrigin = "  origin:\n    - {from: principal}\n    - {from: header, name: x-origin}\n"

// TestOriginFromHeader: the shipped mapping takes the origin from x-origin (no certificate on
// the plaintext listener). POST /orders black-lists scraper on the ext_authz path.
func TestOriginFromHeader(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			seq := "hdr-ok-" + p.name
			a := s.do(p.c, "POST", "/orders", "x-origin", "web", "x-user-id", "u-"+p.name, seqHeader, seq)
			if a.status != http.StatusOK {
				t.Fatalf("POST /orders from web: %d %q", a.status, a.body)
			}
			if got := s.reached(seq); len(got) != 1 || got[0].Method != "POST" || got[0].Header.Values("x-origin") != nil {
				t.Errorf("the upstream saw %v, want one POST without x-origin (the allowed Check removes it)", got)
			}
			seq = "hdr-no-" + p.name
			a = s.do(p.c, "POST", "/orders", "x-origin", "scraper", "x-user-id", "u-"+p.name, seqHeader, seq)
			if a.status != http.StatusForbidden {
				t.Fatalf("POST /orders from scraper: %d %q, want 403", a.status, a.body)
			}
			if r := decodeRefusal(t, a); r.Blocked != "authority" || r.Origin != "scraper" || r.Reason != "in_black_list" {
				t.Errorf("403 body %+v, want authority / scraper / in_black_list", r)
			}
			if len(s.reached(seq)) != 0 {
				t.Error("the 403 reached the upstream")
			}
		})
	}
}

// TestOriginFromXForwardedFor: with the shipped trusted-hops settings (xff_num_trusted_hops 0,
// authz.trusted_hops 0) a client's x-forwarded-for never becomes its address: not on the
// ext_authz path (origin from client_ip) nor in the rate-limit path's remote_address. Then a
// variant trusting one hop on both sides, where the last entry is the client.
func TestOriginFromXForwardedFor(t *testing.T) {
	const spoofed = "203.0.113.7"
	rules := []byte(`authority:
  - resource: "GET:/reports"
    strategy: black
    origins: ["` + spoofed + `"]
param_flow:
  - resource: "GET:/search"
    param: remote_address
    grade: qps
    count: 3
    duration: 1h
`)
	// Variant of extauthz.yaml: the origin is the client address.
	args := serviceConfig(t, shippedOrigin, "  origin:\n    - {from: client_ip}\n")

	t.Run("shipped hops", func(t *testing.T) {
		s := newStack(t, stackOptions{rules: rules, args: args})
		for _, p := range protocols {
			seq := "xff-" + p.name
			a := s.do(p.c, "GET", "/reports", "x-forwarded-for", spoofed, seqHeader, seq)
			if a.status != http.StatusOK {
				t.Errorf("%s: GET /reports claiming x-forwarded-for %s: %d %q, want 200: the claim is not the origin", p.name, spoofed, a.status, a.body)
			}
			got := s.reached(seq)
			if len(got) != 1 {
				t.Fatalf("%s: the upstream saw %v", p.name, got)
			}
			// Envoy keeps the claim and appends what it saw of the peer (for a loopback peer,
			// its own interface address); the external address is the peer.
			xff := got[0].Header.Get("x-forwarded-for")
			if !strings.HasPrefix(xff, spoofed+",") || got[0].Header.Get("x-envoy-external-address") != "127.0.0.1" {
				t.Errorf("%s: upstream x-forwarded-for %q, x-envoy-external-address %q; want the claim with Envoy's entry appended, and 127.0.0.1",
					p.name, xff, got[0].Header.Get("x-envoy-external-address"))
			}
		}
		// remote_address: every claim shares the peer's one bucket of 3.
		var statuses []int
		var last answer
		for i, claim := range []string{"198.51.100.1", "198.51.100.2", "", "198.51.100.3", "198.51.100.4"} {
			kv := []string{}
			if claim != "" {
				kv = append(kv, "x-forwarded-for", claim)
			}
			last = s.do(protocols[i%2].c, "GET", "/search", kv...)
			statuses = append(statuses, last.status)
		}
		if want := []int{200, 200, 200, 429, 429}; !equalInts(statuses, want) {
			t.Errorf("GET /search with five different claims: %v, want %v (one bucket: the peer's)", statuses, want)
		}
		if r := decodeRefusal(t, last); r.Param != "remote_address" || r.Value != "127.0.0.1" {
			t.Errorf("429 body %+v, want the remote_address 127.0.0.1", r)
		}
	})

	t.Run("one trusted hop", func(t *testing.T) {
		// Variant of envoy.yaml: xff_num_trusted_hops 1, and x-forwarded-for among ext_authz's
		// allowed_headers (as its comment says for trusted_hops > 0); authz.trusted_hops 1.
		bootstrap := variant(t, func(root map[string]any) {
			hcm(root)["xff_num_trusted_hops"] = 1
			ah := obj(httpFilter(root, "envoy.filters.http.ext_authz")["allowed_headers"])
			ah["patterns"] = append(ah["patterns"].([]any), map[string]any{"exact": "x-forwarded-for"})
		})
		s := newStack(t, stackOptions{rules: rules, bootstrap: bootstrap, args: args, env: []string{"EXTAUTHZ_AUTHZ_TRUSTED_HOPS=1"}})
		for _, p := range protocols {
			a := s.do(p.c, "GET", "/reports", "x-forwarded-for", spoofed)
			if a.status != http.StatusForbidden {
				t.Errorf("%s: GET /reports via a trusted proxy that says %s: %d %q, want 403", p.name, spoofed, a.status, a.body)
			}
			if a := s.do(p.c, "GET", "/reports", "x-forwarded-for", "198.51.100.9"); a.status != http.StatusOK {
				t.Errorf("%s: GET /reports from 198.51.100.9: %d %q, want 200", p.name, a.status, a.body)
			}
		}
		// remote_address is now the x-forwarded-for entry: one bucket per claimed client.
		for _, claim := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"} {
			if a := s.do(h1, "GET", "/search", "x-forwarded-for", claim); a.status != http.StatusOK {
				t.Errorf("GET /search from %s: %d %q, want 200 (its own bucket)", claim, a.status, a.body)
			}
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// mtlsBootstrap is the shipped envoy.yaml with one edit: its listener's filter chain gets a
// TLS transport socket (the server certificate, client certificates required and verified
// against ca, ALPN h2 and http/1.1 for codec_type AUTO).
func mtlsBootstrap(t *testing.T, ca *testpki.CA) []byte {
	t.Helper()
	dir := t.TempDir()
	cert, key := ca.Issue(t, "envoy", x509.ExtKeyUsageServerAuth)
	files := map[string][]byte{"server.pem": cert, "server.key": key, "ca.pem": ca.PEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name string) map[string]any { return map[string]any{"filename": filepath.Join(dir, name)} }
	return variant(t, func(root map[string]any) {
		chain := obj(listener(root)["filter_chains"].([]any)[0])
		chain["transport_socket"] = map[string]any{
			"name": "envoy.transport_sockets.tls",
			"typed_config": map[string]any{
				"@type":                      "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
				"require_client_certificate": true,
				"common_tls_context": map[string]any{
					"alpn_protocols":     []any{"h2", "http/1.1"},
					"tls_certificates":   []any{map[string]any{"certificate_chain": file("server.pem"), "private_key": file("server.key")}},
					"validation_context": map[string]any{"trusted_ca": file("ca.pem")},
				},
			},
		}
	})
}

// mtlsClients are an HTTP/1.1 and an HTTP/2 client presenting a certificate for cn signed by ca.
func mtlsClients(t *testing.T, ca *testpki.CA, cn string) (*http.Client, *http.Client) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, cn, x509.ExtKeyUsageClientAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: ca.Roots(), Certificates: []tls.Certificate{cert}, ServerName: "localhost"}
	c1 := tlsClient(cfg.Clone())
	tr := &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true}
	var p http.Protocols
	p.SetHTTP2(true)
	tr.Protocols = &p
	return c1, &http.Client{Transport: tr, Timeout: c1.Timeout}
}

// TestOriginFromClientCertificate: Envoy terminates TLS with a test CA and requires a client
// certificate; the CheckRequest carries its principal, which the shipped mapping takes before
// x-origin.
func TestOriginFromClientCertificate(t *testing.T) {
	ca := testpki.New(t, "extauthz test CA")
	bootstrap := mtlsBootstrap(t, ca)

	// What Envoy sends as the principal of a testpki certificate (HTTP/2: a client that
	// speaks nothing else, so ALPN must have chosen h2).
	rs, rec := newRecordedStack(t, bootstrap)
	_, c2 := mtlsClients(t, ca, "web")
	rs.base = "https://" + rs.addr
	if a := rs.do(c2, "GET", "/reports"); a.status != http.StatusOK {
		t.Fatalf("GET /reports over mTLS: %d %q", a.status, a.body)
	}
	checks, _ := rec.take()
	if len(checks) != 1 {
		t.Fatalf("%d Check calls, want 1", len(checks))
	}
	// Envoy's principal is the certificate's first URI SAN, else its first DNS SAN, else its
	// subject: a testpki certificate for CN web carries the DNS SAN localhost.
	principal := checks[0].GetAttributes().GetSource().GetPrincipal()
	if principal != "localhost" {
		t.Fatalf("principal of a certificate for CN web with DNS SAN localhost: %q, want localhost", principal)
	}

	// Through the service: the principal is the origin, whatever x-origin says.
	rules := []byte(`authority:
  - resource: "GET:/reports"
    strategy: white
    origins: ["` + principal + `"]
  - resource: "POST:/orders"
    strategy: black
    origins: ["` + principal + `"]
`)
	s := newStack(t, stackOptions{rules: rules, bootstrap: bootstrap})
	s.base = "https://" + s.addr
	web1, web2 := mtlsClients(t, ca, "web")
	for _, p := range []struct {
		name string
		c    *http.Client
	}{{"h1", web1}, {"h2", web2}} {
		t.Run(p.name, func(t *testing.T) {
			seq := "mtls-" + p.name
			a := s.do(p.c, "GET", "/reports", "x-origin", "partner", seqHeader, seq)
			if a.status != http.StatusOK {
				t.Errorf("GET /reports with a certificate of %q claiming x-origin partner: %d %q, want 200", principal, a.status, a.body)
			}
			if got := s.reached(seq); len(got) != 1 || got[0].Header.Get("x-forwarded-proto") != "https" {
				t.Errorf("the upstream saw %v, want one request with x-forwarded-proto https", got)
			}
			a = s.do(p.c, "POST", "/orders", "x-origin", "web", "x-user-id", "m-"+p.name)
			if a.status != http.StatusForbidden {
				t.Errorf("POST /orders with a black-listed certificate claiming x-origin web: %d %q, want 403", a.status, a.body)
			} else if r := decodeRefusal(t, a); r.Origin != principal {
				t.Errorf("403 names origin %q, want the principal %q", r.Origin, principal)
			}
		})
	}

	// A certificate of another CA gets no TLS connection, so no request and no Check.
	other := testpki.New(t, "another CA")
	stranger, _ := mtlsClients(t, other, "web")
	stranger.Transport.(*http.Transport).TLSClientConfig.RootCAs = ca.Roots()
	req, _ := http.NewRequest("GET", s.base+"/reports", nil)
	checks0 := s.checks()
	if resp, err := stranger.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a certificate of another CA got %d, want the handshake refused", resp.StatusCode)
	}
	if s.checks() != checks0 {
		t.Error("a refused handshake cost a Check")
	}
}
