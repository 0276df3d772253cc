// Package e2e drives the built extauthz binary over real gRPC the way Envoy does, with requests
// derived from envoy-config/envoy.yaml. Under -short (the fast loop) the whole package is
// skipped, since every test needs the binary; otherwise nothing here is skipped: a missing
// piece fails the run.
package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/envoysim"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// Paths relative to this package's directory, where go test runs.
const (
	moduleRoot   = ".."
	envoyYAML    = "../envoy-config/envoy.yaml"
	rulesYAML    = "../envoy-config/rules.yaml"
	extauthzYAML = "../envoy-config/extauthz.yaml"
)

var (
	binary string           // the built service, set by TestMain
	envoy  *envoysim.Config // the routes the requests are derived from
	// The filters of envoy.yaml: their domain and timeouts are used for every call.
	authzFilter *extauthzv3.ExtAuthz
	rlFilter    *ratelimitv3.RateLimit
	shared      struct {
		once sync.Once
		svc  *service
		err  error
	}
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: every test needs the built binary; skipped under -short")
		return 0
	}
	dir, err := os.MkdirTemp("", "extauthz-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binary, err = testbin.Build(moduleRoot, dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if envoy, err = envoysim.Load(envoyYAML); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	envoy.RequestID = testRequestID
	if authzFilter, rlFilter, err = filters(envoy); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	if shared.svc != nil {
		shared.svc.stop()
	}
	return code
}

// service is one running extauthz process and a gRPC connection to it.
type service struct {
	proc     *testbin.Proc
	cmd      *exec.Cmd
	grpcAddr string
	adminURL string
	rules    string // the rules file it watches (a copy in a temp dir)
	logs     *syncBuffer
	exited   chan struct{}
	exitErr  error // set before exited is closed
	conn     *grpc.ClientConn
	authz    authv3.AuthorizationClient
	rls      rlsv3.RateLimitServiceClient
}

// syncBuffer collects the process output for failure messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep memory bounded: the last MiB is enough to diagnose
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sharedService returns the process most tests share, started on a copy of rules.yaml.
func sharedService(t *testing.T) *service {
	t.Helper()
	shared.once.Do(func() {
		rules, err := os.ReadFile(rulesYAML)
		if err != nil {
			shared.err = err
			return
		}
		dir, err := os.MkdirTemp("", "extauthz-shared-")
		if err != nil {
			shared.err = err
			return
		}
		shared.svc, shared.err = startService(dir, rules)
	})
	if shared.err != nil {
		t.Fatalf("cannot start the shared service: %v", shared.err)
	}
	return shared.svc
}

// newService starts a process of its own for t on rules, stopped when t ends.
func newService(t *testing.T, rules []byte) *service {
	t.Helper()
	s, err := startService(t.TempDir(), rules)
	if err != nil {
		t.Fatalf("cannot start extauthz: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// startService writes rules into dir and runs the binary with envoy-config/extauthz.yaml,
// overriding the addresses (any free port, read back from the log) and the rules file by
// flags, then waits until it logs that it serves.
func startService(dir string, rules []byte) (*service, error) {
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		return nil, err
	}
	logs := &syncBuffer{}
	p, err := testbin.Run(testbin.Options{
		Binary: binary,
		Args: []string{"serve",
			"--config", extauthzYAML,
			"--rules", rulesPath,
			"--grpc-addr", "127.0.0.1:0",
			"--admin-addr", "127.0.0.1:0",
		},
		Output: logs,
		Ready:  15 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	s := &service{
		proc:     p,
		cmd:      p.Cmd,
		grpcAddr: p.GRPCAddr,
		adminURL: "http://" + p.AdminAddr,
		rules:    rulesPath,
		logs:     logs,
		exited:   make(chan struct{}),
	}
	go func() {
		s.exitErr = p.Err()
		close(s.exited)
	}()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.conn = conn
	s.authz = authv3.NewAuthorizationClient(conn)
	s.rls = rlsv3.NewRateLimitServiceClient(conn)
	return s, nil
}

// stop ends the process (SIGTERM, then SIGKILL after 10s) and closes the connection.
func (s *service) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.proc.Kill()
		<-s.exited
	}
}

// rulesInfo is what /rules reports about the rules in force.
type rulesInfo struct {
	Version   uint64          `json:"version"`
	File      string          `json:"file"`
	LastError json.RawMessage `json:"last_error"`
}

func (s *service) rulesInfo(t *testing.T) rulesInfo {
	t.Helper()
	resp, err := http.Get(s.adminURL + "/rules")
	if err != nil {
		t.Fatalf("GET /rules: %v", err)
	}
	defer resp.Body.Close()
	var info rulesInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("GET /rules: %v", err)
	}
	return info
}

// eventually polls cond every 20ms until it holds or limit passes.
func eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s = %q, want it to contain %q", what, s, w)
		}
	}
}
