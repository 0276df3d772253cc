package main

// Tests of the built binary: started as a process on free ports, called over real gRPC, reloaded
// through its rules file, and stopped with SIGTERM.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the extauthz binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "extauthz-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "extauthz")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// proc is a running extauthz process.
type proc struct {
	cmd       *exec.Cmd
	grpcAddr  string
	adminAddr string
	done      chan struct{} // closed when the process has exited
	waitErr   error

	mu  sync.Mutex
	log []map[string]any // every JSON log line, in order
}

// start runs the binary with args in an empty directory and waits until it logs that it serves.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startIn(t, t.TempDir(), args...)
}

// startIn is start in directory dir.
func startIn(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			var entry map[string]any
			if json.Unmarshal(sc.Bytes(), &entry) != nil {
				entry = map[string]any{"msg": "non-JSON: " + sc.Text()}
			}
			p.mu.Lock()
			p.log = append(p.log, entry)
			if entry["msg"] == "serving" {
				p.grpcAddr, _ = entry["grpc_addr"].(string)
				p.adminAddr, _ = entry["admin_addr"].(string)
				once.Do(func() { close(serving) })
			}
			p.mu.Unlock()
		}
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("extauthz log:\n%s", p.logText())
		}
	})
	select {
	case <-serving:
	case <-p.done:
		t.Fatalf("extauthz exited before serving: %v\n%s", p.waitErr, p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("extauthz did not serve within 30s\n%s", p.logText())
	}
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, e := range p.log {
		line, _ := json.Marshal(e)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// logged reports whether a log entry has message msg.
func (p *proc) logged(msg string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.log {
		if e["msg"] == msg {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("extauthz did not exit within 20s of SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.adminAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// rulesInfo is the part of /rules the tests read.
type rulesInfo struct {
	Version   uint64 `json:"version"`
	File      string `json:"file"`
	LastError *struct {
		Message string `json:"message"`
	} `json:"last_error"`
	Authority []struct {
		Origins []string `json:"origins"`
	} `json:"authority"`
}

func (p *proc) rules(t *testing.T) rulesInfo {
	t.Helper()
	code, body := p.get(t, "/rules")
	if code != http.StatusOK {
		t.Fatalf("GET /rules = %d %s", code, body)
	}
	var ri rulesInfo
	if err := json.Unmarshal([]byte(body), &ri); err != nil {
		t.Fatalf("decode /rules %s: %v", body, err)
	}
	return ri
}

// eventually polls cond until it holds or 15s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeAtomic replaces path with content in one rename, as config tooling does.
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

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func checkRequest(method, path, origin string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.9.9.9", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 5555}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method:  method,
			Path:    path,
			Host:    "example.com",
			Headers: map[string]string{"x-origin": origin},
		}},
	}}
}

// checkCode calls Check and returns the gRPC status code in the answer.
func checkCode(t *testing.T, c authv3.AuthorizationClient, method, path, origin string) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, checkRequest(method, path, origin))
	if err != nil {
		t.Fatalf("Check %s %s from %q: %v", method, path, origin, err)
	}
	return codes.Code(resp.GetStatus().GetCode())
}

func rateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, resource, item string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, rlRequest(resource, item))
	if err != nil {
		t.Fatalf("ShouldRateLimit %s %s: %v", resource, item, err)
	}
	return resp.GetOverallCode()
}

func rlRequest(resource, item string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: resource},
			{Key: "origin", Value: "serviceA"},
			{Key: "item_id", Value: item},
		}}},
	}
}

const binaryConfig = `
log: {level: info, format: json}
shutdown_grace: 10s
authz:
  origin:
    - {from: header, name: x-origin}
`

func rulesV1(origin string) string {
	return `
authority:
  - resource: "GET:/hello"
    strategy: white
    origins: [` + origin + `]
param_flow:
  - resource: "POST:/order"
    param: item_id
    grade: qps
    count: 2
    duration: 1h
  - resource: "POST:/slow"
    param: item_id
    grade: qps
    count: 1
    duration: 1s
    behavior: throttle
    max_queueing_time: 5s
`
}

func TestBinary(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeAtomic(t, rulesPath, rulesV1("serviceA"))
	cfgPath := writeFile(t, dir, "extauthz.yaml", binaryConfig)

	// No subcommand: serve.
	p := start(t, "--config", cfgPath, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	conn := dial(t, p.grpcAddr)
	authz := authv3.NewAuthorizationClient(conn)
	rls := rlsv3.NewRateLimitServiceClient(conn)

	// Health and readiness.
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, resp.GetStatus(), err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := p.get(t, path); code != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, code, body)
		}
	}

	// Both APIs with the first rules.
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.OK {
		t.Errorf("Check serviceA = %v, want OK", got)
	}
	if got := checkCode(t, authz, "GET", "/hello?x=1", "serviceB"); got != codes.PermissionDenied {
		t.Errorf("Check serviceB = %v, want PermissionDenied", got)
	}
	wantRL := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i, want := range wantRL {
		if got := rateLimit(t, rls, "POST:/order", "42"); got != want {
			t.Errorf("ShouldRateLimit #%d = %v, want %v", i+1, got, want)
		}
	}
	if got := rateLimit(t, rls, "POST:/order", "43"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit other value = %v, want OK", got)
	}
	ri := p.rules(t)
	if ri.Version != 1 || ri.LastError != nil || ri.File != rulesPath {
		t.Fatalf("/rules = %+v, want version 1 from %s, no error", ri, rulesPath)
	}

	// A changed rules file is applied.
	writeAtomic(t, rulesPath, rulesV1("serviceB"))
	eventually(t, "rules version 2", func() bool { return p.rules(t).Version == 2 })
	if got := checkCode(t, authz, "GET", "/hello", "serviceB"); got != codes.OK {
		t.Errorf("after reload: Check serviceB = %v, want OK", got)
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.PermissionDenied {
		t.Errorf("after reload: Check serviceA = %v, want PermissionDenied", got)
	}
	// The hot-param rule kept its state: value 42 is still out of tokens.
	if got := rateLimit(t, rls, "POST:/order", "42"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after reload: ShouldRateLimit 42 = %v, want OVER_LIMIT", got)
	}

	// A broken rules file is rejected: the old rules stay, the error shows on /rules.
	writeAtomic(t, rulesPath, "param_flow:\n  - resource: \"POST:/order\"\n    param: item_id\n    grade: qps\n    count: -5\n")
	eventually(t, "last_error on /rules", func() bool { return p.rules(t).LastError != nil })
	ri = p.rules(t)
	if ri.Version != 2 || len(ri.Authority) != 1 || ri.Authority[0].Origins[0] != "serviceB" {
		t.Errorf("after a broken file /rules = %+v, want version 2 with origin serviceB", ri)
	}
	if msg := ri.LastError.Message; !strings.Contains(msg, "count") || !strings.Contains(msg, "rules.yaml") {
		t.Errorf("last_error %q does not name the file and field", msg)
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceB"); got != codes.OK {
		t.Errorf("after a broken file: Check serviceB = %v, want OK (old rules in force)", got)
	}
	if !p.logged("rules rejected; the rules in force stay") {
		t.Error("the rejected load was not logged")
	}

	// Metrics and the busiest values.
	_, metricsBody := p.get(t, "/metrics")
	for _, want := range []string{
		`extauthz_decisions_total{api="ratelimit",domain="edge",resource="POST:/order",result="param_flow"} 2`,
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/hello",result="authority"} 2`,
		`extauthz_rule_reloads_total{result="applied"} 2`,
		`extauthz_rule_reloads_total{result="failed"} 1`,
		`extauthz_hotparam_tracked_values{param="item_id",resource="POST:/order",rule="0"} 2`,
	} {
		if !strings.Contains(metricsBody, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, hot := p.get(t, "/hot?n=1")
	if code != http.StatusOK || !strings.Contains(hot, `"value": "42"`) {
		t.Errorf("GET /hot?n=1 = %d %s, want value 42", code, hot)
	}

	// A throttled call in flight when SIGTERM arrives is answered before the process exits.
	if got := rateLimit(t, rls, "POST:/slow", "s"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first throttled call = %v, want OK", got)
	}
	type result struct {
		code rlsv3.RateLimitResponse_Code
		err  error
		took time.Duration
	}
	held := make(chan result, 1)
	go func() {
		begin := time.Now()
		resp, err := rls.ShouldRateLimit(context.Background(), rlRequest("POST:/slow", "s"))
		held <- result{resp.GetOverallCode(), err, time.Since(begin)}
	}()
	eventually(t, "the throttled call to be held", func() bool {
		_, body := p.get(t, "/metrics")
		return strings.Contains(body, "extauthz_queue_wait_seconds_count 1")
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	r := <-held
	if r.err != nil || r.code != rlsv3.RateLimitResponse_OK {
		t.Errorf("throttled call during shutdown = %v, %v; want OK", r.code, r.err)
	}
	if r.took < 500*time.Millisecond {
		t.Errorf("throttled call answered after %v; want it held about 1s", r.took)
	}
	if !p.logged("stopped") {
		t.Error("no 'stopped' log entry")
	}
}

// Without a configured rules file, ./rules.yaml is used when present, and watched: creating it
// later applies it.
func TestBinaryDefaultRulesFile(t *testing.T) {
	dir := t.TempDir()
	p := startIn(t, dir, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	if ri := p.rules(t); len(ri.Authority) != 0 || ri.LastError != nil {
		t.Fatalf("/rules without rules.yaml = %+v, want no rules and no error", ri)
	}
	writeAtomic(t, filepath.Join(dir, "rules.yaml"), rulesV1("serviceA"))
	eventually(t, "rules.yaml created after start to be applied", func() bool { return len(p.rules(t).Authority) == 1 })
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}

	// Present at start.
	q := startIn(t, dir, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	ri := q.rules(t)
	if ri.File != "rules.yaml" || len(ri.Authority) != 1 || ri.Authority[0].Origins[0] != "serviceA" {
		t.Errorf("/rules with ./rules.yaml = %+v", ri)
	}
	if code := q.stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

func TestBinaryStartFailures(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing rules file", []string{"--rules", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"invalid config", []string{"--log-level", "loud"}, "log.level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary(t), append(tt.args, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit = %v, want code 1\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output does not mention %q:\n%s", tt.want, out)
			}
		})
	}
}
