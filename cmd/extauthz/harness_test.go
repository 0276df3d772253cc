package main

// The harness of the binary tests: build once, start as a process, read its JSON log, call it.

import (
	"bufio"
	"context"
	"encoding/json"
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
