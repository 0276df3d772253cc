package main

import (
	"bufio"
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
	"syscall"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// proc is a process the benchmark started and stops.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string        // where its output goes
	exited chan struct{} // closed once it has exited (and its output is copied)
}

// started returns the proc of cmd, just started. Its Wait runs once, here (a second Wait of an
// exec.Cmd may never return), then after, when not nil.
func started(name string, cmd *exec.Cmd, log string, after func()) *proc {
	p := &proc{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		if after != nil {
			after()
		}
		close(p.exited)
	}()
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop interrupts the process and waits until it has exited; one that has not within 5s is
// killed.
func (p *proc) stop() {
	if p == nil || p.exited == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// start runs name with args and env, its output in dir/name.log, and returns once ready
// returns nil for a line of its output (or at once when ready is nil).
func start(dir, name string, ready func(line string) bool, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = dieWithParent()
	cmd.Env = append(os.Environ(), env...)
	if ready == nil {
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return started(name, cmd, logPath, nil), nil
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := started(name, cmd, logPath, func() { pw.Close() })
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			fmt.Fprintln(f, sc.Text())
			if !sent && ready(sc.Text()) {
				found <- true
				sent = true
			}
		}
		_, _ = io.Copy(f, pr)
		if !sent {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if ok {
			return p, nil
		}
	case <-time.After(60 * time.Second):
	}
	p.stop()
	b, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("%s did not get ready:\n%s", name, tail(b, 4000))
}

// dieWithParent has the kernel kill a child when this process dies, however it dies (a
// signal, a closed pipe on its output), so that no server outlives the benchmark.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// freePort is a loopback port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitPort(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// servingAddr reads extauthz's "serving" log line and returns its gRPC address ("" for
// another line).
func servingAddr(line string) string {
	var e struct {
		Msg  string `json:"msg"`
		Addr string `json:"grpc_addr"`
	}
	if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "serving" {
		return ""
	}
	return e.Addr
}

// envoyProc is a running Envoy and the address of its ingress listener.
type envoyProc struct {
	*proc
	admin   string // http://host:port
	ingress string // host:port
}

// startEnvoy runs Envoy on the bootstrap cfg with workers threads, its access log (stdout)
// discarded, and waits for its admin API to say LIVE.
func startEnvoy(dir, name, bin string, cfg []byte, workers int) (*envoyProc, error) {
	cfgPath := filepath.Join(dir, name+".json")
	adminPath := filepath.Join(dir, name+".admin")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	errLog, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", cfgPath, "--admin-address-path", adminPath, "--disable-hot-restart",
		"--log-level", "warning", "--concurrency", strconv.Itoa(workers))
	cmd.SysProcAttr = dieWithParent()
	cmd.Stdout, cmd.Stderr = nil, errLog // stdout is the access log: /dev/null
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &envoyProc{proc: started(name, cmd, errLog.Name(), nil)}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(adminPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			e.admin = "http://" + strings.TrimSpace(string(b))
			if body, _ := httpGet(e.admin + "/ready"); strings.TrimSpace(body) == "LIVE" {
				if e.ingress, err = envoytest.ListenerAddr(e.admin, "ingress"); err == nil {
					return e, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.stop()
	b, _ := os.ReadFile(errLog.Name())
	return nil, fmt.Errorf("envoy %s not ready:\n%s", name, tail(b, 4000))
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), err
}

func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15 of stat(5)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
