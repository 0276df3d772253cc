// Command rediscost measures what Redis spends inside one script call of extauthz's cluster
// check, calls one at a time, three ways side by side on one redis-server: through the built
// binary (ShouldRateLimit over gRPC, one descriptor of one cluster rule); in process, the
// store's own Eval as BenchmarkRedisCost calls it; and a one-line INCRBY script, the floor of
// any script call. Redis's own clock counts (INFO commandstats, usec per EVALSHA). Each round
// runs the three in a rotated order and prints the ratios next to their targets: the binary
// within ±20% of the in-process figure, and at most 3.5x the INCRBY script.
//
// With -pin (taskset), redis-server runs on CPU 1 and everything else on CPU 0, as when Redis
// has a machine of its own: commandstats counts wall time, and on a shared core the callers'
// threads take the CPU from Redis in the middle of a script.
//
// A fourth way, paced, is the in-process one with its calls spaced as the binary's are: how
// much of a difference between those two comes of Redis waiting longer between calls.
//
// With -instr, redis-server runs under valgrind's callgrind instead, and the ways are counted
// in instructions per call, which do not depend on the machine's load; with -extauthz, the
// binary's too (a Redis timeout of 5s, the fallback deny, so every answer is Redis's). Counted
// so, the binary does the work of the in-process way (its keys are longer): a timed difference
// between them is the machine's (caches, the core's state after an idle wait), not the calls'.
//
//	go build -o /tmp/extauthz ./cmd/extauthz && go run ./bench/rediscost -instr -calls 2000 -extauthz /tmp/extauthz
//
//	go build -o /tmp/extauthz ./cmd/extauthz && go run ./bench/rediscost -extauthz /tmp/extauthz
package main

import (
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
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/redisstore"
)

func main() {
	bin := flag.String("extauthz", "", "the built extauthz binary")
	redisBin := flag.String("redis-server", "redis-server", "redis-server to run")
	calls := flag.Int("calls", 5000, "calls per way and round")
	rounds := flag.Int("rounds", 3, "rounds")
	pin := flag.Bool("pin", false, "redis-server on CPU 1, the rest on CPU 0")
	instr := flag.Bool("instr", false, "count instructions per call under callgrind (the binary's too, when -extauthz is given)")
	flag.Parse()
	if *instr {
		if err := runInstr(*bin, *redisBin, *calls); err != nil {
			fmt.Fprintln(os.Stderr, "rediscost:", err)
			os.Exit(1)
		}
		return
	}
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "rediscost: -extauthz is required")
		os.Exit(2)
	}
	if err := run(*bin, *redisBin, *calls, *rounds, *pin); err != nil {
		fmt.Fprintln(os.Stderr, "rediscost:", err)
		os.Exit(1)
	}
}

// way is one of the three callers: call makes one script call.
type way struct {
	name string
	call func(ctx context.Context) error
}

func run(bin, redisBin string, calls, rounds int, pin bool) error {
	dir, err := os.MkdirTemp("", "rediscost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if pin {
		// this process, and every process it starts but Redis, on CPU 0
		if out, err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset: %v: %s", err, out)
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	raddr := "127.0.0.1:" + strconv.Itoa(port)
	redisArgs := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	var redisCmd *exec.Cmd
	if pin {
		redisCmd = exec.Command("taskset", append([]string{"-c", "1", redisBin}, redisArgs...)...)
	} else {
		redisCmd = exec.Command(redisBin, redisArgs...)
	}
	if err := redisCmd.Start(); err != nil {
		return fmt.Errorf("cannot start redis-server: %w", err)
	}
	defer func() { _ = redisCmd.Process.Kill(); _ = redisCmd.Wait() }()
	rc, err := dial(raddr)
	if err != nil {
		return err
	}
	defer rc.Close()
	ctx := context.Background()

	binary, stop, err := startBinary(ctx, bin, raddr, dir)
	if err != nil {
		return err
	}
	defer stop()

	local, done, err := localWays(rc, raddr)
	if err != nil {
		return err
	}
	defer done()
	ways := append([]way{binary}, local...)
	for _, w := range ways { // warm: scripts loaded, connections open
		for range 100 {
			if err := w.call(ctx); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
	}
	// the binary's interval between calls, one at a time: the paced way makes its in-process
	// calls no faster, so that Redis waits as long between them as it does for the binary's
	t0 := time.Now()
	for range 500 {
		if err := ways[0].call(ctx); err != nil {
			return fmt.Errorf("binary: %w", err)
		}
	}
	interval := time.Since(t0) / 500
	inProcess := local[0].call
	ways = append(ways, way{"paced", func(ctx context.Context) error {
		start := time.Now()
		err := inProcess(ctx)
		for time.Since(start) < interval {
		}
		return err
	}})
	fmt.Printf("# %d calls a way and round, one at a time; pinned: %v\n", calls, pin)
	fmt.Printf("%-6s %-11s %14s\n", "round", "way", "redis-us/call")
	var ratioIn, ratioIncr, ratioPaced []string
	for r := range rounds {
		got := map[string]float64{}
		for i := range ways {
			w := ways[(i+r)%len(ways)]
			if err := rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error(); err != nil {
				return err
			}
			for range calls {
				if err := w.call(ctx); err != nil {
					return fmt.Errorf("%s: %w", w.name, err)
				}
			}
			per, err := usecPerCall(ctx, rc)
			if err != nil {
				return err
			}
			got[w.name] = per
			fmt.Printf("%-6d %-11s %14.2f\n", r+1, w.name, per)
		}
		ratioIn = append(ratioIn, fmt.Sprintf("%.2f", got["binary"]/got["in-process"]))
		ratioIncr = append(ratioIncr, fmt.Sprintf("%.2f", got["binary"]/got["incrby"]))
		ratioPaced = append(ratioPaced, fmt.Sprintf("%.2f", got["binary"]/got["paced"]))
	}
	fmt.Printf("binary / in-process, by round: %s   (target 0.8..1.2)\n", strings.Join(ratioIn, " "))
	fmt.Printf("binary / INCRBY script, by round: %s   (target <= 3.5)\n", strings.Join(ratioIncr, " "))
	fmt.Printf("binary / in-process paced to the binary's %v a call, by round: %s   (what the pace explains)\n",
		interval.Round(time.Microsecond), strings.Join(ratioPaced, " "))
	return nil
}

// startBinary starts bin in Redis mode on the Redis at raddr, with one cluster rule that never
// refuses, and returns its way: one ShouldRateLimit of one descriptor; stop stops it.
func startBinary(ctx context.Context, bin, raddr, dir string) (w way, stop func(), err error) {
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("param_flow:\n  - {resource: \"POST:/orders\", param: user, grade: qps, count: 1000000000, duration: 1s, cluster: true}\n"), 0o600); err != nil {
		return w, nil, err
	}
	gport, err := freePort()
	if err != nil {
		return w, nil, err
	}
	gaddr := "127.0.0.1:" + strconv.Itoa(gport)
	svc := exec.Command(bin, "serve", "--rules", rules, "--grpc-addr", gaddr, "--admin-addr", "127.0.0.1:0", "--log-format", "json")
	// no INFO sample while it runs (under callgrind, its instructions would be counted as the
	// script calls'); a timeout a Redis under callgrind meets, and a failed call refused, so
	// that every answer OK is one Redis gave
	svc.Env = append(os.Environ(), "EXTAUTHZ_STORE_REDIS_ADDRS="+raddr, "EXTAUTHZ_STORE_REDIS_SAMPLE_INTERVAL=1h",
		"EXTAUTHZ_STORE_REDIS_TIMEOUT=5s", "EXTAUTHZ_STORE_REDIS_FALLBACK=deny")
	logf, err := os.Create(filepath.Join(dir, "extauthz.log"))
	if err != nil {
		return w, nil, err
	}
	svc.Stdout, svc.Stderr = logf, logf
	if err := svc.Start(); err != nil {
		return w, nil, fmt.Errorf("cannot start extauthz: %w", err)
	}
	kill := func() { _ = svc.Process.Kill(); _ = svc.Wait(); logf.Close() }
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		kill()
		return w, nil, err
	}
	stop = func() { conn.Close(); kill() }
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "extauthz", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
		Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "resource", Value: "POST:/orders"}, {Key: "user", Value: "u1"}}}}}
	if err := waitServing(ctx, rls, req, filepath.Join(dir, "extauthz.log")); err != nil {
		stop()
		return w, nil, err
	}
	return way{"binary", func(ctx context.Context) error {
		ans, err := rls.ShouldRateLimit(ctx, req)
		if err == nil && ans.OverallCode != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("answered %v", ans.OverallCode)
		}
		return err
	}}, stop, nil
}

// localWays are the in-process way (the store's Eval, as BenchmarkRedisCost calls it, on the
// Redis at addr) and the INCRBY script through rc; done closes the store.
func localWays(rc rueidis.Client, addr string) (ways []way, done func(), err error) {
	store, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, Timeout: time.Second, BlockedCache: -1})
	if err != nil {
		return nil, nil, err
	}
	ops := []hotparam.RemoteOp{{RuleID: "q", Value: "u1", Count: 1e9, Duration: time.Second, Hits: 1}}
	res := make([]hotparam.RemoteResult, 1)
	incr := rueidis.NewLuaScript("return redis.call('INCRBY', KEYS[1], 1)")
	return []way{
		{"in-process", func(ctx context.Context) error { return store.Eval(ctx, ops, res) }},
		{"incrby", func(ctx context.Context) error { return incr.Exec(ctx, rc, []string{"rediscost:n"}, nil).Error() }},
	}, store.Close, nil
}

// runInstr is the -instr run: redis-server under callgrind, instructions per call.
func runInstr(bin, redisBin string, calls int) error {
	dir, err := os.MkdirTemp("", "rediscost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	ctx := context.Background()
	return instructions(ctx, redisBin, args, dir, calls, func(rc rueidis.Client, addr string) ([]way, func(), error) {
		ws, done, err := localWays(rc, addr)
		if err != nil || bin == "" {
			return ws, done, err
		}
		b, stop, err := startBinary(ctx, bin, addr, dir)
		if err != nil {
			done()
			return nil, nil, err
		}
		return append(ws, b), func() { stop(); done() }, nil
	})
}

// usecPerCall is INFO commandstats' usec_per_call of EVALSHA since the last reset.
func usecPerCall(ctx context.Context, rc rueidis.Client) (float64, error) {
	info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, errors.New("no EVALSHA in INFO commandstats")
}

func dial(addr string) (rueidis.Client, error) {
	var last error
	for range 100 {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err == nil {
			return c, nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("redis-server at %s: %w", addr, last)
}

func waitServing(ctx context.Context, rls rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, log string) error {
	var last error
	for range 200 {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err := rls.ShouldRateLimit(c, req)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(log)
	return fmt.Errorf("extauthz did not serve: %v\n%s", last, b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
