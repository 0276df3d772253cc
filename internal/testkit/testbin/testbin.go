// Package testbin builds the extauthz binary and runs it as a process for tests: it starts it,
// reads its JSON log, finds the addresses it serves on, and stops it.
package testbin

import (
	"bufio"
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
)

// ShortSkip is the reason given by tests skipped under -short because they need the binary.
const ShortSkip = "needs the built binary; skipped under -short"

// Build compiles ./cmd/extauthz of the module at moduleRoot into dir and returns the binary's
// path. Extra arguments go to go build before the package (e.g. "-ldflags", "-X ...").
func Build(moduleRoot, dir string, extra ...string) (string, error) {
	bin := filepath.Join(dir, "extauthz")
	args := append(append([]string{"build", "-o", bin}, extra...), "./cmd/extauthz")
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/extauthz: %v\n%s", err, out)
	}
	return bin, nil
}

// Lazy builds the binary on first use, once, for the tests of one package. The zero value is
// ready; it is safe for concurrent use. Close removes the binary.
type Lazy struct {
	ModuleRoot string // where go build runs; "" is the working directory's module

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the binary on the first call and returns its path. Under -short it skips t: the
// fast loop runs no process.
func (l *Lazy) Path(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip(ShortSkip)
	}
	l.once.Do(func() {
		l.dir, l.err = os.MkdirTemp("", "extauthz-bin-")
		if l.err != nil {
			return
		}
		root := l.ModuleRoot
		if root == "" {
			root = "."
		}
		l.path, l.err = Build(root, l.dir)
	})
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.path
}

// Close removes what Path built.
func (l *Lazy) Close() {
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// Options say how to run the binary.
type Options struct {
	Binary string   // the binary's path
	Args   []string // its arguments; the log must stay JSON (the default format)
	Dir    string   // its working directory; "" is a new temporary one for Start, the current one for Run
	Env    []string // its environment, besides PATH
	// Output, when set, also receives every line the process writes to stderr.
	Output io.Writer
	// Ready is how long Start waits for the "serving" log line; 0 means 30s.
	Ready time.Duration
}

// Proc is a running extauthz process. Its methods are safe for concurrent use.
type Proc struct {
	Cmd       *exec.Cmd
	GRPCAddr  string // as logged in "serving"
	AdminAddr string // as logged in "serving"

	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed

	mu  sync.Mutex
	log []map[string]any // every log line, in order (a line that is not JSON as {"msg": "non-JSON: ..."})
	// waiters are the channels of WaitLog calls, by message; closed when it is logged.
	waiters map[string][]chan struct{}
}

// Start runs the binary and waits until it logs that it serves. The process is killed, if
// still running, when t ends; its log is printed when t failed.
func Start(t testing.TB, o Options) *Proc {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	p, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("extauthz log:\n%s", p.LogText())
		}
	})
	return p
}

// Run is Start for a process that outlives one test: the caller stops or kills it. On an
// error the process is not left running.
func Run(o Options) (*Proc, error) {
	cmd := exec.Command(o.Binary, o.Args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, o.Env...)
	cmd.Dir = o.Dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{}), waiters: make(map[string][]chan struct{})}
	serving := p.waiter("serving")
	go p.read(stderr, o.Output)
	ready := o.Ready
	if ready == 0 {
		ready = 30 * time.Second
	}
	select {
	case <-serving:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("extauthz exited before serving: %v\n%s", p.waitErr, p.LogText())
	case <-time.After(ready):
		p.Kill()
		return nil, fmt.Errorf("extauthz did not serve within %v\n%s", ready, p.LogText())
	}
}

// Kill ends the process at once, if it still runs, and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.done:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// read parses the process's log until it ends, then reaps the process.
func (p *Proc) read(r io.Reader, copyTo io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if copyTo != nil {
			fmt.Fprintf(copyTo, "%s\n", sc.Bytes())
		}
		var entry map[string]any
		if json.Unmarshal(sc.Bytes(), &entry) != nil {
			entry = map[string]any{"msg": "non-JSON: " + sc.Text()}
		}
		msg, _ := entry["msg"].(string)
		p.mu.Lock()
		if msg == "serving" && p.GRPCAddr == "" {
			p.GRPCAddr, _ = entry["grpc_addr"].(string)
			p.AdminAddr, _ = entry["admin_addr"].(string)
		}
		if len(p.log) < 100000 { // bounded: a test never needs more
			p.log = append(p.log, entry)
		}
		for _, ch := range p.waiters[msg] {
			close(ch)
		}
		delete(p.waiters, msg)
		p.mu.Unlock()
	}
	p.waitErr = p.Cmd.Wait()
	close(p.done)
}

// waiter returns a channel closed when a line with message msg is logged (at once when one
// was).
func (p *Proc) waiter(msg string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	for _, e := range p.log {
		if e["msg"] == msg {
			close(ch)
			return ch
		}
	}
	p.waiters[msg] = append(p.waiters[msg], ch)
	return ch
}

// WaitLog waits up to limit for a log line with message msg (one already logged counts) and
// fails t if none comes or the process exits first.
func (p *Proc) WaitLog(t testing.TB, msg string, limit time.Duration) {
	t.Helper()
	select {
	case <-p.waiter(msg):
	case <-p.done:
		if !p.Logged(msg) {
			t.Fatalf("extauthz exited without logging %q: %v", msg, p.waitErr)
		}
	case <-time.After(limit):
		t.Fatalf("extauthz did not log %q within %v", msg, limit)
	}
}

// Done is closed when the process has exited; Err is then its exit error.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.waitErr
}

// LogText is the log so far, one JSON object a line.
func (p *Proc) LogText() string {
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

// Logged reports whether a log line has message msg.
func (p *Proc) Logged(msg string) bool { return p.Entry(msg) != nil }

// Entry is the first log line with message msg, or nil.
func (p *Proc) Entry(msg string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.log {
		if e["msg"] == msg {
			return e
		}
	}
	return nil
}

// Stop sends SIGTERM and returns the exit code; it fails t if the process is still running 20s
// later.
func (p *Proc) Stop(t testing.TB) int {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("extauthz did not exit within 20s of SIGTERM")
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Get fetches path from the admin listener and returns the status and body.
func (p *Proc) Get(t testing.TB, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + p.AdminAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
