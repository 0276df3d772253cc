// Package redistest starts real redis-server processes on loopback ports for tests, and stops
// them when the test ends.
package redistest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
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

// Binary is where redis-server is looked for when it is not on PATH.
const Binary = "/usr/bin/redis-server"

// Server is one redis-server process. It is safe for concurrent use.
type Server struct {
	t    testing.TB
	Port int
	bin  string
	dir  string
	args []string
	tls  *tls.Config // nil for a plain server

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil when not running
	exited chan struct{} // closed when cmd has exited
	paused bool
}

// Start starts a redis-server on a free loopback port with no persistence, extra arguments
// appended, and stops it at the end of the test. A missing redis-server fails the test; under
// -short the test is skipped (the fast loop runs no server).
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	skipShort(t)
	return start(t, freePort(t, false), extra...)
}

// TLSFiles are the PEM files of a server that serves TLS.
type TLSFiles struct {
	Cert, Key string // the server's certificate (valid for 127.0.0.1) and key
	CA        string // the authority that signed Cert
}

// StartTLS starts a redis-server that serves TLS only (no plain port), with the certificate of
// files, not asking clients for one. Addr is its TLS address.
func StartTLS(t testing.TB, files TLSFiles, extra ...string) *Server {
	t.Helper()
	skipShort(t)
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s: no PEM certificate", files.CA)
	}
	return startWith(t, freePort(t, false), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}, append([]string{
		"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-cert-file", files.CA,
		"--tls-auth-clients", "no",
	}, extra...)...)
}

// skipShort skips t under -short: tests that need a redis-server run in the full suite only.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a redis-server: skipped under -short")
	}
}

func start(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	return startWith(t, port, nil, extra...)
}

func startWith(t testing.TB, port int, tlsConf *tls.Config, extra ...string) *Server {
	t.Helper()
	skipShort(t)
	bin := lookup(t)
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, dir: dir, tls: tlsConf}
	t.Cleanup(s.Close)
	// Another process may take the free port before the server binds it: then the server exits
	// at once, and Start tries another port.
	for attempt := 0; ; attempt++ {
		s.Port = port
		ports := []string{"--port", strconv.Itoa(port)}
		if tlsConf != nil {
			ports = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
		}
		s.args = append(append(ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no",
		), extra...)
		err := s.launch()
		if err == nil {
			return s
		}
		if attempt == 2 {
			t.Fatal(err)
		}
		port = freePort(t, strings.Contains(strings.Join(extra, " "), "cluster-enabled"))
	}
}

func lookup(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("redis-server is required (not on PATH, not at %s): install the redis-server package: %v", Binary, err)
	}
	return Binary
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Restart starts the server again on the same port (after Kill), and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatal(err)
	}
}

// launch starts the process and waits until it answers PING.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis on %d: started while running", s.Port)
	}
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("redis log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	exitedAtStart := errors.New("exited at start")
	err = wait.Until(10*time.Second, 10*time.Millisecond, func() error {
		select {
		case <-exited:
			return wait.Stop(exitedAtStart)
		default:
		}
		// any answer will do: a server with a password answers -NOAUTH
		reply, err := s.roundTrip("PING")
		if err == nil && (reply == "+PONG" || strings.HasPrefix(reply, "-NOAUTH")) {
			return nil
		}
		return fmt.Errorf("PING: %q %v", reply, err)
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, exitedAtStart) {
		s.cmd = nil
	} else {
		s.stop()
	}
	b, _ := os.ReadFile(logPath)
	return fmt.Errorf("redis-server on port %d: %v; log:\n%s", s.Port, err, b)
}

// roundTrip sends one inline command and returns the first reply line.
func (s *Server) roundTrip(cmd string) (string, error) {
	var c net.Conn
	var err error
	if s.tls != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr(), s.tls)
	} else {
		c, err = net.DialTimeout("tcp", s.Addr(), time.Second)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	if s.paused {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Pause stops the process with SIGSTOP: connections stay open, nothing is answered.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redis on %d: signal while not running", s.Port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redis on %d: %v: %v", s.Port, sig, err)
	}
	s.paused = paused
}

// Close stops the server; the test's cleanup calls it.
func (s *Server) Close() { s.Kill() }

// CLI runs redis-cli against the server and returns its trimmed output.
func (s *Server) CLI(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(filepath.Join(filepath.Dir(s.bin), "redis-cli"),
		append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("redis-cli %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// CommandCalls returns how many times the server ran cmd (lower case, e.g. "evalsha"), from
// INFO commandstats.
func (s *Server) CommandCalls(cmd string) int {
	s.t.Helper()
	for _, line := range strings.Split(s.CLI("INFO", "commandstats"), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.Atoi(n)
		if err != nil {
			s.t.Fatalf("commandstats %q: %v", line, err)
		}
		return v
	}
	return 0
}

// CommandUsec returns how many times the server ran cmd and the microseconds it spent in it, from
// INFO commandstats (zeros when it never ran it).
func (s *Server) CommandUsec(cmd string) (calls int, usec int64) {
	s.t.Helper()
	for _, line := range strings.Split(s.CLI("INFO", "commandstats"), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			var err error
			switch k {
			case "calls":
				calls, err = strconv.Atoi(v)
			case "usec":
				usec, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				s.t.Fatalf("commandstats %q: %v", line, err)
			}
		}
	}
	return calls, usec
}

// CPU returns the CPU time (user and system) the server has used since it started, from INFO cpu.
func (s *Server) CPU() time.Duration {
	s.t.Helper()
	var sum float64
	for _, line := range strings.Split(s.CLI("INFO", "cpu"), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.t.Fatalf("INFO cpu %q: %v", line, err)
		}
		sum += f
	}
	return time.Duration(sum * float64(time.Second))
}

// freePort returns a loopback port that is free now; with bus, port+10000 (the cluster bus) too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		if b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// Info returns one field of INFO (e.g. "evicted_keys", "run_id"), or "" when INFO has none.
func (s *Server) Info(field string) string {
	s.t.Helper()
	for _, line := range strings.Split(s.CLI("INFO", "everything"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
