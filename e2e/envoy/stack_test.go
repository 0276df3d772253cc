// Package envoy runs the shipped Envoy bootstrap (envoy-config/envoy.yaml) in a real Envoy
// 1.40 in front of the built extauthz binary and a recording upstream, and checks what a
// client sees and what reaches the upstream. Under -short the package is skipped; without
// Envoy it skips with the install command, and fails when EXTAUTHZ_REQUIRE_ENVOY=1 (CI).
package envoy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// Paths relative to this package's directory, where go test runs.
const (
	moduleRoot   = "../.."
	envoyYAML    = "../../envoy-config/envoy.yaml"
	rulesYAML    = "../../envoy-config/rules.yaml"
	extauthzYAML = "../../envoy-config/extauthz.yaml"
)

var service = testbin.Lazy{ModuleRoot: moduleRoot}

func TestMain(m *testing.M) {
	code := m.Run()
	service.Close()
	os.Exit(code)
}

// stack is Envoy on the shipped bootstrap, in front of extauthz and an upstream.
type stack struct {
	t     *testing.T
	svc   *testbin.Proc
	svcs  []*testbin.Proc // every replica, svc first
	envoy *envoytest.Proc
	up    *envoytest.Upstream
	base  string // http://127.0.0.1:PORT of Envoy's ingress listener
	addr  string // the same, host:port
	rules string // the rules file extauthz watches
	// serve starts one more extauthz like the stack's own, on grpcAddr.
	serve func(grpcAddr string) *testbin.Proc
}

// stackOptions change what the stack runs; the zero value is the shipped configs.
type stackOptions struct {
	rules     []byte   // nil: envoy-config/rules.yaml
	config    []byte   // the service's config; nil: envoy-config/extauthz.yaml
	bootstrap []byte   // nil: envoy-config/envoy.yaml
	args      []string // more arguments to extauthz serve
	env       []string // extauthz's environment
	replicas  int      // extauthz processes behind Envoy's cluster; 0 is 1
}

// newStack starts extauthz, the upstream, then Envoy (which waits for its first health
// check of extauthz before it says it is ready).
func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	envoytest.Binary(t) // skips or fails first: nothing to build without Envoy
	bin := service.Path(t)
	dir := t.TempDir()
	rules := o.rules
	if rules == nil {
		var err error
		if rules, err = os.ReadFile(rulesYAML); err != nil {
			t.Fatal(err)
		}
	}
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	svcConfig, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	if o.config != nil {
		svcConfig = filepath.Join(dir, "extauthz.yaml")
		if err := os.WriteFile(svcConfig, o.config, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &stack{t: t, rules: rulesPath, up: envoytest.StartUpstream(t)}
	n := max(o.replicas, 1)
	s.serve = func(grpcAddr string) *testbin.Proc {
		return testbin.Start(t, testbin.Options{
			Binary: bin,
			Args: append([]string{"serve",
				"--config", svcConfig,
				"--rules", rulesPath,
				"--grpc-addr", grpcAddr,
				"--admin-addr", "127.0.0.1:0",
			}, o.args...),
			Env: o.env,
		})
	}
	var addrs []string
	for i := 0; i < n; i++ {
		p := s.serve("127.0.0.1:0")
		s.svcs = append(s.svcs, p)
		addrs = append(addrs, p.GRPCAddr)
	}
	s.svc = s.svcs[0]
	src := o.bootstrap
	if src == nil {
		if src, err = os.ReadFile(envoyYAML); err != nil {
			t.Fatal(err)
		}
	}
	var cfg []byte
	cfg, err = envoytest.Bootstrap(src, envoytest.Rewrite{Upstreams: map[string][]string{
		"extauthz": addrs,
		"upstream": {s.up.Addr},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.envoy = envoytest.Start(t, envoytest.Options{Config: cfg})
	s.addr = s.envoy.Listener(t, "ingress")
	s.base = "http://" + s.addr
	return s
}

// answer is what a client saw.
type answer struct {
	status int
	header http.Header
	body   string
}

// client is a plain-text HTTP client of Envoy's listener: HTTP/1.1, or HTTP/2 with prior
// knowledge (h2c), which the listener's codec_type AUTO accepts.
func client(h2 bool) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	if h2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

var (
	h1 = client(false)
	h2 = client(true)
)

// do sends method path (with query) to Envoy with header pairs, over c.
func (s *stack) do(c *http.Client, method, path string, kv ...string) answer {
	s.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, s.base+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if c == h2 && resp.ProtoMajor != 2 {
		s.t.Fatalf("%s %s: answered over %s, want HTTP/2", method, path, resp.Proto)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// raw sends one HTTP/1.1 request whose request line is written exactly as given (the path as
// is, no client normalisation), and returns the status Envoy answered.
func (s *stack) raw(requestTarget string, kv ...string) answer {
	s.t.Helper()
	conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n", requestTarget)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[i], kv[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		s.t.Fatalf("GET %s: %v", requestTarget, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// checks is how many Check calls Envoy's ext_authz filter has completed (any answer).
func (s *stack) checks() int64 {
	st := s.envoy.Stats(s.t)
	var n int64
	for _, k := range []string{"ok", "denied", "error", "failure_mode_allowed"} {
		n += st["http.ingress.ext_authz.extauthz."+k]
	}
	return n
}

// tlsClient is an HTTP/1.1 client that presents cert to a TLS listener signed by roots.
func tlsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 20 * time.Second}
}
