// Command memory measures the resident memory of the running server, the built binary under
// a soft memory limit (EXTAUTHZ_MEMORY_LIMIT, 1GiB unless set, as in a container with that
// limit), from /proc/PID/status:
//
//   - values: one rule tracking 1,000,000 distinct values, sent over gRPC as ShouldRateLimit
//     calls of 64 descriptors; RSS per value after the load, and at steady state, after a
//     further run of calls for values already tracked (the collector has run, the scavenger
//     has returned what it frees). Target: <= 160 bytes a value.
//
//   - rules: the same binary with 50,000 idle hot-param rules against one with none, each
//     settled; RSS per rule (and the anonymous part of it). Target: <= 1 KB a rule.
//
//     go build -o /tmp/extauthz ./cmd/extauthz && go run ./bench/memory -extauthz /tmp/extauthz
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	bin := flag.String("extauthz", "", "the built extauthz binary")
	values := flag.Int("values", 1_000_000, "distinct values tracked by the one rule")
	rules := flag.Int("rules", 50_000, "idle rules")
	steady := flag.Duration("steady", 20*time.Second, "calls for tracked values after the load, before the steady-state figure")
	only := flag.String("only", "", "values or rules; both when empty")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "memory: -extauthz is required")
		os.Exit(2)
	}
	if os.Getenv("EXTAUTHZ_MEMORY_LIMIT") == "" {
		os.Setenv("EXTAUTHZ_MEMORY_LIMIT", "1GiB")
	}
	fmt.Printf("# soft memory limit %s\n", os.Getenv("EXTAUTHZ_MEMORY_LIMIT"))
	dir, err := os.MkdirTemp("", "memory")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	if *only == "" || *only == "values" {
		if err := measureValues(dir, *bin, *values, *steady); err != nil {
			fail(err)
		}
	}
	if *only == "" || *only == "rules" {
		if err := measureRules(dir, *bin, *rules); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "memory:", err)
	os.Exit(1)
}

// server is a running extauthz.
type server struct {
	cmd  *exec.Cmd
	addr string
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

func start(dir, bin, name, rules string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "serve", "--rules", rules, "--grpc-addr", s.addr, "--admin-addr", "127.0.0.1:0", "--log-format", "json")
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start extauthz: %w", err)
	}
	if s.conn, err = grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		s.stop()
		return nil, err
	}
	s.rls = rlsv3.NewRateLimitServiceClient(s.conn)
	var last error
	for range 600 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, last = s.rls.ShouldRateLimit(ctx, request(0, 1))
		cancel()
		if last == nil {
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	b, _ := os.ReadFile(log.Name())
	return nil, fmt.Errorf("extauthz %s did not serve: %v\n%s", name, last, b)
}

func (s *server) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// rss is the server's resident memory in bytes.
func (s *server) rss() (int64, error) { return s.status("VmRSS") }

// status returns a size field of the process's /proc/PID/status (VmRSS, RssAnon, ...) in bytes.
func (s *server) status(field string) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no " + field)
}

// settled is the RSS once it moved less than 1% over two seconds, or after a minute.
func (s *server) settled() (int64, error) {
	prev, err := s.rss()
	if err != nil {
		return 0, err
	}
	for range 30 {
		time.Sleep(2 * time.Second)
		cur, err := s.rss()
		if err != nil {
			return 0, err
		}
		if d := cur - prev; d < prev/100 && -d < prev/100 {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// request is a ShouldRateLimit call for n users from first on.
func request(first, n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "extauthz"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: "POST:/orders"}, {Key: "user", Value: "user-" + strconv.Itoa(10_000_000+first+i)}}})
	}
	return req
}

// send sends calls for users [0, n), 64 a call, from 8 goroutines.
func (s *server) send(n int) error {
	const per, workers = 64, 8
	calls := (n + per - 1) / per
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				first := c * per
				ans, err := s.rls.ShouldRateLimit(context.Background(), request(first, min(per, n-first)))
				if err == nil && ans.OverallCode != rlsv3.RateLimitResponse_OK {
					err = fmt.Errorf("call %d answered %v", c, ans.OverallCode)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
	for c := 0; c < calls && err == nil; c++ {
		select {
		case next <- c:
		case err = <-errs:
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

func measureValues(dir, bin string, n int, steady time.Duration) error {
	rules := filepath.Join(dir, "values.yaml")
	rule := fmt.Sprintf("param_flow:\n  - {resource: \"POST:/orders\", param: user, grade: qps, count: 1000000000, duration: 1s, capacity: %d}\n", n+n/10)
	if err := os.WriteFile(rules, []byte(rule), 0o600); err != nil {
		return err
	}
	s, err := start(dir, bin, "values", rules)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.send(10_000); err != nil { // warm: connections, buffers, the collector's first cycles
		return err
	}
	rss0, err := s.settled()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := s.send(n); err != nil {
		return err
	}
	load := time.Since(t0)
	rss1, err := s.rss()
	if err != nil {
		return err
	}
	for end := time.Now().Add(steady); time.Now().Before(end); {
		if err := s.send(n / 10); err != nil { // values already tracked
			return err
		}
	}
	rss2, err := s.settled()
	if err != nil {
		return err
	}
	fmt.Printf("values: %d tracked in %v; RSS %d MiB before, %d MiB after the load, %d MiB at steady state\n",
		n, load.Round(time.Millisecond), rss0>>20, rss1>>20, rss2>>20)
	fmt.Printf("values: RSS per value %.0f B after the load, %.0f B at steady state (target <= 160)\n",
		float64(rss1-rss0)/float64(n), float64(rss2-rss0)/float64(n))
	return nil
}

func measureRules(dir, bin string, n int) error {
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("param_flow: []\n"), 0o600); err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString("param_flow:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {resource: \"GET:/r%d\", param: user, grade: qps, count: %d, duration: 1s}\n", i, 10+i%90)
	}
	many := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(many, b.Bytes(), 0o600); err != nil {
		return err
	}
	var rss, anon [2]int64
	for i, f := range []string{empty, many} {
		s, err := start(dir, bin, "rules"+strconv.Itoa(i), f)
		if err != nil {
			return err
		}
		if err := s.send(1000); err != nil {
			s.stop()
			return err
		}
		rss[i], err = s.settled()
		if err == nil {
			anon[i], err = s.status("RssAnon")
		}
		s.stop()
		if err != nil {
			return err
		}
	}
	fmt.Printf("rules: RSS %d MiB with none, %d MiB with %d idle rules (a %d KiB file): %.0f B a rule (target <= 1024)\n",
		rss[0]>>20, rss[1]>>20, n, b.Len()>>10, float64(rss[1]-rss[0])/float64(n))
	// RSS counts the binary's pages read from its file too, which the code a process ran moves
	// (the collector's, say) whatever its rules; the anonymous memory is the rules' alone
	fmt.Printf("rules: anonymous RSS (RssAnon) %.0f B a rule\n", float64(anon[1]-anon[0])/float64(n))
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
