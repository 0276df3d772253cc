package envoytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/wait"
)

// Options say how to run Envoy.
type Options struct {
	Config      []byte   // the bootstrap, as Bootstrap returns it
	Args        []string // more command-line arguments
	LogLevel    string   // Envoy's --log-level; "" is warning
	Concurrency int      // worker threads; 0 is 2
	// Ready is how long Start waits for the admin /ready page to say LIVE; 0 is 30s.
	Ready time.Duration
}

// Proc is a running Envoy. Its methods are safe for concurrent use.
type Proc struct {
	AdminURL string // http://127.0.0.1:PORT
	Config   string // the bootstrap file Envoy runs

	cmd  *exec.Cmd
	out  *boundedLog
	done chan struct{} // closed when the process has exited
	err  error         // set before done is closed
}

// Start runs Envoy on o.Config and waits until its admin API says it is ready (clusters
// initialised: a cluster with health checks has had its first round). It is stopped when t
// ends, and its log printed when t failed.
func Start(t testing.TB, o Options) *Proc {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	p, err := run(bin, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("envoy log (tail):\n%s", p.Log())
		}
	})
	return p
}

func run(bin, dir string, o Options) (*Proc, error) {
	cfg := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(cfg, o.Config, 0o644); err != nil {
		return nil, err
	}
	adminPath := filepath.Join(dir, "admin-address")
	level := o.LogLevel
	if level == "" {
		level = "warning"
	}
	conc := o.Concurrency
	if conc == 0 {
		conc = 2
	}
	args := append([]string{
		"-c", cfg,
		"--admin-address-path", adminPath,
		"--disable-hot-restart",
		"--log-level", level,
		"--concurrency", fmt.Sprint(conc),
	}, o.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out := &boundedLog{limit: 4 << 20}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Config: cfg, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	limit := o.Ready
	if limit == 0 {
		limit = 30 * time.Second
	}
	if err := p.waitReady(adminPath, limit); err != nil {
		p.Kill()
		return nil, fmt.Errorf("envoy: %v\n%s", err, p.Log())
	}
	return p, nil
}

// waitReady polls for the admin address file, then for /ready to answer LIVE.
func (p *Proc) waitReady(adminPath string, limit time.Duration) error {
	return wait.Until(limit, 20*time.Millisecond, func() error {
		select {
		case <-p.done:
			return wait.Stop(fmt.Errorf("exited before it was ready: %v", p.err))
		default:
		}
		if p.AdminURL == "" {
			if b, err := os.ReadFile(adminPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				p.AdminURL = "http://" + strings.TrimSpace(string(b))
			}
		}
		if p.AdminURL == "" {
			return fmt.Errorf("no admin address in %s yet", adminPath)
		}
		body, code, err := get(p.AdminURL + "/ready")
		if err == nil && code == 200 && strings.TrimSpace(body) == "LIVE" {
			return nil
		}
		return fmt.Errorf("not ready (admin %q): %d %q %v", p.AdminURL, code, strings.TrimSpace(body), err)
	})
}

func get(url string) (string, int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), resp.StatusCode, err
}

// Listener returns the address ("127.0.0.1:PORT") Envoy bound for the listener called name.
func (p *Proc) Listener(t testing.TB, name string) string {
	t.Helper()
	addr, err := ListenerAddr(p.AdminURL, name)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// ListenerAddr asks the Envoy admin API at adminURL (http://host:port) for the address the
// listener called name is bound to; an error until it is bound.
func ListenerAddr(adminURL, name string) (string, error) {
	body, code, err := get(adminURL + "/listeners?format=json")
	if err != nil || code != 200 {
		return "", fmt.Errorf("envoy /listeners: %d %v", code, err)
	}
	var ls struct {
		Statuses []struct {
			Name  string `json:"name"`
			Local struct {
				Socket struct {
					Address string `json:"address"`
					Port    int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &ls); err != nil {
		return "", fmt.Errorf("envoy /listeners: %v: %s", err, body)
	}
	for _, l := range ls.Statuses {
		if l.Name == name && l.Local.Socket.Port != 0 {
			return net.JoinHostPort(l.Local.Socket.Address, strconv.Itoa(l.Local.Socket.Port)), nil
		}
	}
	return "", fmt.Errorf("envoy has no bound listener %q: %s", name, body)
}

// Stats returns Envoy's counters and gauges by name.
func (p *Proc) Stats(t testing.TB) map[string]int64 {
	t.Helper()
	body, code, err := get(p.AdminURL + "/stats?format=json")
	if err != nil || code != 200 {
		t.Fatalf("envoy /stats: %d %v", code, err)
	}
	var st struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("envoy /stats: %v", err)
	}
	m := make(map[string]int64, len(st.Stats))
	for _, s := range st.Stats {
		var v int64
		if s.Name != "" && json.Unmarshal(s.Value, &v) == nil {
			m[s.Name] = v
		}
	}
	return m
}

// Stat returns one counter or gauge, 0 when Envoy has none of that name.
func (p *Proc) Stat(t testing.TB, name string) int64 {
	t.Helper()
	return p.Stats(t)[name]
}

// Log is the tail of what Envoy wrote (its log and access log, interleaved).
func (p *Proc) Log() string { return p.out.String() }

// Done is closed when Envoy has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill stops Envoy (SIGTERM, then SIGKILL after 5s) and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// boundedLog keeps the last limit bytes written to it.
type boundedLog struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (b *boundedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *boundedLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.buf)
	if len(s) > 20000 {
		s = "...\n" + s[len(s)-20000:]
	}
	return s
}
