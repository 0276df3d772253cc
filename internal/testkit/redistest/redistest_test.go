package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStartSkipsATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	s := start(t, taken)
	if s.Port == taken {
		t.Fatalf("port: got the taken %d, want another", taken)
	}
	if got := s.CLI("PING"); got != "PONG" {
		t.Errorf("PING: got %q, want PONG", got)
	}
}

func TestKillRestartCommandCalls(t *testing.T) {
	s := Start(t)
	s.CLI("SET", "k", "v")
	if got := s.CommandCalls("set"); got != 1 {
		t.Errorf("set calls: got %d, want 1", got)
	}
	s.Kill()
	if _, err := s.roundTrip("PING"); err == nil {
		t.Error("PING after Kill: got an answer, want an error")
	}
	s.Restart()
	if got := s.CLI("EXISTS", "k"); got != "0" {
		t.Errorf("after restart without persistence: EXISTS got %s, want 0", got)
	}
}

func TestCommandUsecAndCPU(t *testing.T) {
	s := Start(t)
	for range 50 {
		s.CLI("SET", "k", "v")
	}
	calls, usec := s.CommandUsec("set")
	if calls != 50 || usec <= 0 {
		t.Errorf("set: got %d calls in %dus, want 50 in some time", calls, usec)
	}
	if c, u := s.CommandUsec("evalsha"); c != 0 || u != 0 {
		t.Errorf("evalsha never ran: got %d calls in %dus", c, u)
	}
	if s.CPU() <= 0 {
		t.Error("CPU: got 0 after 50 commands")
	}
}

// A command through DelayProxy is answered, a round trip of two delays later at the least, and
// a large value comes back whole.
func TestDelayProxy(t *testing.T) {
	s := Start(t)
	const oneWay = 20 * time.Millisecond
	c, err := net.Dial("tcp", DelayProxy(t, s.Addr(), oneWay))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	begin := time.Now()
	big := strings.Repeat("x", 200<<10)
	fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", len(big), big)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("SET: %q, %v", line, err)
	}
	if took := time.Since(begin); took < 2*oneWay {
		t.Errorf("answered after %v, want at least %v", took, 2*oneWay)
	}
	if line, err := r.ReadString('\n'); err != nil || line != fmt.Sprintf("$%d\r\n", len(big)) {
		t.Fatalf("GET: %q, %v", line, err)
	}
	got := make([]byte, len(big)+2)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != big+"\r\n" {
		t.Fatalf("GET: %d bytes, %v; want the value set", len(got), err)
	}
}
