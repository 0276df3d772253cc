// Package service builds and runs the extauthz binary, and a redis-server, for the deploy
// module's tests. The module does not require the service's module (its go.mod would then
// follow every dependency change of the service): it builds the binary with the go command in
// the repository root, and reads the service's defaults from its source.
package service

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RepoRoot is the directory of the service's go.mod, above the working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			sc.Scan()
			f.Close()
			if strings.TrimSpace(sc.Text()) == "module github.com/extauthz/extauthz" {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of module github.com/extauthz/extauthz above the working directory")
		}
		dir = parent
	}
}

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the service binary, built once per test process (go build ./cmd/extauthz in
// the repository root, into a temporary directory). It skips under -short.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the built binary; skipped under -short")
	}
	root := RepoRoot(t)
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "extauthz-deploy-bin-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "extauthz")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/extauthz")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/extauthz: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Cleanup removes the built binary; a package's TestMain calls it.
func Cleanup() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// Defaults are the service's built-in listen addresses, read from Default() in the service's
// cmd/extauthz/config/config.go, so that the manifests are checked against the source of truth.
func Defaults(t testing.TB) (grpcAddr, adminAddr string) {
	t.Helper()
	file := filepath.Join(RepoRoot(t), "cmd", "extauthz", "config", "config.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Default" || fn.Recv != nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			key, _ := kv.Key.(*ast.Ident)
			lit, _ := kv.Value.(*ast.BasicLit)
			if key == nil || lit == nil || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			switch key.Name {
			case "GRPCAddr":
				grpcAddr = v
			case "AdminAddr":
				adminAddr = v
			}
			return true
		})
	}
	if grpcAddr == "" || adminAddr == "" {
		t.Fatalf("%s: no GRPCAddr and AdminAddr string literals in Default()", file)
	}
	return grpcAddr, adminAddr
}

// Proc is a running service.
type Proc struct {
	GRPCAddr, AdminAddr string // as logged in "serving"

	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

// Start runs the binary with args (which must keep the default JSON log) until the test ends,
// and waits until it logs "serving".
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{done: make(chan struct{})}
	serving := make(chan [2]string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.Write(sc.Bytes())
			p.log.WriteByte('\n')
			p.mu.Unlock()
			var e struct {
				Msg       string `json:"msg"`
				GRPCAddr  string `json:"grpc_addr"`
				AdminAddr string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "serving" {
				select {
				case serving <- [2]string{e.GRPCAddr, e.AdminAddr}:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("extauthz log:\n%s", p.Log())
		}
	})
	select {
	case a := <-serving:
		p.GRPCAddr, p.AdminAddr = a[0], a[1]
	case <-p.done:
		t.Fatalf("extauthz exited before serving:\n%s", p.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("extauthz did not serve within 30s:\n%s", p.Log())
	}
	return p
}

// Log is what the process logged so far.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Get fetches path from the admin listener.
func (p *Proc) Get(t testing.TB, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + p.AdminAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// WaitMetric waits until the service's /metrics has line (name, labels and value).
func (p *Proc) WaitMetric(t testing.TB, line string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := p.Get(t, "/metrics")
		if strings.Contains(body, "\n"+line+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %q", line)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Redis is a redis-server on a loopback port, without persistence.
type Redis struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server (failing the test when it is not installed: the Debian
// package redis-server) and waits until it answers PING.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is required (Debian package redis-server; scripts/test installs it): %v", err)
	}
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &Redis{Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(r.Kill)
	deadline := time.Now().Add(10 * time.Second)
	for !r.ping() {
		select {
		case <-r.done:
			t.Fatalf("redis-server exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 10s:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

func (r *Redis) ping() bool {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to exit.
func (r *Redis) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}
