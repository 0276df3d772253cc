// Package etcdtest starts a real etcd (Debian's etcd-server package, /usr/bin/etcd) on loopback
// ports in a temporary directory for tests, and stops it when the test ends. Tests that use it
// skip under -short; otherwise a missing etcd fails them.
package etcdtest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/wait"
)

// Binary is where etcd is looked for when it is not on PATH.
const Binary = "/usr/bin/etcd"

// Server is one etcd process, a cluster of one member. Stop and Start it again to take it down
// and bring it back on the same ports and data.
type Server struct {
	t        testing.TB
	bin      string
	dir      string
	client   int // client port
	peer     int // peer port
	Endpoint string
	tls      *TLS         // nil for plain HTTP
	health   *http.Client // the health check's client; nil for http.DefaultClient

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *bytes.Buffer
}

// TLS is what a server that serves its clients TLS uses: its certificate and key, and the CA
// whose client certificates it requires. ClientCert and ClientKey are a client's, for the
// health check. All are PEM files.
type TLS struct {
	CertFile, KeyFile, ClientCAFile string
	ClientCert, ClientKey           string
}

// Start starts an etcd with its data in a temporary directory and stops it when t ends.
func Start(t testing.TB) *Server { return start(t, nil) }

// StartTLS is Start for an etcd that serves its clients TLS only and requires their
// certificates; Endpoint is https.
func StartTLS(t testing.TB, files TLS) *Server { return start(t, &files) }

func start(t testing.TB, files *TLS) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("needs etcd; skipped under -short")
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		bin = Binary
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), client: freePort(t), peer: freePort(t), tls: files}
	scheme := "http"
	if files != nil {
		scheme = "https"
		ca, err := os.ReadFile(files.ClientCAFile)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		s.health = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	}
	s.Endpoint = fmt.Sprintf("%s://127.0.0.1:%d", scheme, s.client)
	s.Restart()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("etcd log:\n%s", s.log)
			s.mu.Unlock()
		}
	})
	return s
}

// Restart starts the process again (after Stop) on the same ports and data, and waits until it
// answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", s.peer)
	args := []string{
		"--name", "test",
		"--data-dir", s.dir,
		"--listen-client-urls", s.Endpoint,
		"--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer,
		"--initial-cluster-state", "new",
	}
	if s.tls != nil {
		args = append(args, "--cert-file", s.tls.CertFile, "--key-file", s.tls.KeyFile,
			"--client-cert-auth", "--trusted-ca-file", s.tls.ClientCAFile)
	}
	cmd := exec.Command(s.bin, args...)
	if s.log == nil {
		s.log = &bytes.Buffer{}
	}
	cmd.Stdout, cmd.Stderr = &lockedWriter{mu: &s.mu, w: s.log}, &lockedWriter{mu: &s.mu, w: s.log}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("cannot start etcd (%s; install Debian's etcd-server): %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	hc := s.health
	if hc == nil {
		hc = http.DefaultClient
	}
	err := wait.Until(20*time.Second, 50*time.Millisecond, func() error {
		select {
		case <-exited:
			return wait.Stop(fmt.Errorf("etcd exited at start"))
		default:
		}
		resp, err := hc.Get(s.Endpoint + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health answered %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		s.t.Fatalf("etcd not healthy: %v", err)
	}
}

// Stop ends the process (SIGTERM, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Wipe stops the process and deletes its data, as a member lost and recreated empty is: the
// next Restart starts a new cluster on the same ports, its revision back at 1.
func (s *Server) Wipe() {
	s.t.Helper()
	s.Stop()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			s.t.Fatal(err)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<20 {
		l.w.Reset()
	}
	return l.w.Write(p)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
