package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// Fault tests at the service level: the built binary, a real redis-server, and Redis killed,
// restarted or stopped (SIGSTOP) under load. Real clock: tolerances for a loaded machine.

const (
	faultRedisTimeout = 50 * time.Millisecond
	// faultTolerance is added to the Redis timeout for the gRPC round trip and scheduling on a
	// loaded 2-core machine (the race detector included).
	faultTolerance = 250 * time.Millisecond
)

// faultService starts redis and one extauthz on it (clusterService) with the fallback policy
// given, a Redis timeout of faultRedisTimeout and a breaker that opens after 3 failures.
func faultService(t *testing.T, fallback string) (*redistest.Server, *proc, rlsv3.RateLimitServiceClient) {
	t.Helper()
	srv := redistest.Start(t)
	p, c := clusterService(t, srv.Addr(), faultRedisTimeout, fallback, 3)
	return srv, p, c
}

// clusterService starts one extauthz on the Redis at addr, with a cluster rule on POST:/order
// (1000 a second, never reached) and one on POST:/few (2 an hour), the Redis timeout and
// fallback policy given, and a breaker that opens after breakerFailures failures and probes
// every 100ms.
func clusterService(t *testing.T, addr string, timeout time.Duration, fallback string, breakerFailures int) (*proc, rlsv3.RateLimitServiceClient) {
	t.Helper()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 1000, duration: 1s, cluster: true}
  - {resource: "POST:/few", param: item_id, grade: qps, count: 2, duration: 1h, cluster: true}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
    timeout: %v
    fallback: %s
    breaker_failures: %d
    breaker_cooldown: 100ms
`, addr, timeout, fallback, breakerFailures))
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	return p, rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
}

// loadStats are the answers of a load run.
type loadStats struct {
	mu      sync.Mutex
	ok      int
	over    int
	errs    int
	slowest time.Duration
}

// answered is the number of calls answered so far, with or without an error.
func (st *loadStats) answered() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ok + st.over + st.errs
}

// runLoad calls ShouldRateLimit for POST:/order from 4 clients until stop is closed, timing
// every call. st counts the answers as they come.
func runLoad(c rlsv3.RateLimitServiceClient, stop <-chan struct{}) (st *loadStats, wait func() *loadStats) {
	st = &loadStats{}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				begin := time.Now()
				resp, err := c.ShouldRateLimit(ctx, rlRequest("POST:/order", fmt.Sprintf("v%d-%d", i, n%50)))
				d := time.Since(begin)
				cancel()
				st.mu.Lock()
				st.slowest = max(st.slowest, d)
				switch {
				case err != nil:
					st.errs++
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					st.ok++
				default:
					st.over++
				}
				st.mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return st, func() *loadStats { wg.Wait(); return st }
}

// metric reads one series from /metrics.
func metric(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	_, body := p.Get(t, "/metrics")
	return metricValue(body, series)
}

func code(t *testing.T, c rlsv3.RateLimitServiceClient, resource, item string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	return rateLimit(t, c, resource, item)
}

// checkFault runs load, applies fault, and checks that every answer came within the timeout,
// that the breaker opens, that /readyz stays ready, and that the fallback policy answers.
func checkFault(t *testing.T, p *proc, c rlsv3.RateLimitServiceClient, fallback string, fault func()) {
	t.Helper()
	stop := make(chan struct{})
	live, wait := runLoad(c, stop)
	eventually(t, "40 calls answered before the fault", func() bool { return live.answered() >= 40 })
	fault()
	eventually(t, "the breaker opens", func() bool { return metric(t, p, "extauthz_redis_breaker_open") == 1 })
	opened := live.answered()
	eventually(t, "40 more calls answered with the breaker open", func() bool { return live.answered() >= opened+40 })
	close(stop)
	st := wait()
	t.Logf("load: %d ok, %d over limit, %d errors; slowest answer %v", st.ok, st.over, st.errs, st.slowest)
	if st.errs != 0 {
		t.Errorf("%d calls failed: the service must answer while Redis is down", st.errs)
	}
	if st.slowest > faultRedisTimeout+faultTolerance {
		t.Errorf("slowest answer %v, want within the Redis timeout %v (+%v)", st.slowest, faultRedisTimeout, faultTolerance)
	}
	if n := metric(t, p, fmt.Sprintf(`extauthz_redis_fallbacks_total{policy=%q}`, fallback)); n == 0 {
		t.Errorf("no fallback counted under %q", fallback)
	}
	if metric(t, p, `extauthz_redis_calls_total{result="error"}`) == 0 {
		t.Error("no failed Redis call counted")
	}
	if code, body := p.Get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while falling back = %d %s, want 200", code, body)
	}
	switch fallback {
	case "deny":
		if st.over == 0 {
			t.Error("fallback deny: no call refused while Redis was down")
		}
		if got := code(t, c, "POST:/order", "fresh"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("fallback deny, Redis down: got %v, want OVER_LIMIT", got)
		}
	case "local":
		// the local state enforces the rule: 2 an hour, then refused
		want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
		for i, w := range want {
			if got := code(t, c, "POST:/few", "local-v"); got != w {
				t.Errorf("fallback local, call %d: got %v, want %v", i, got, w)
			}
		}
	}
}

// checkRecovered waits until the breaker closes, and checks that the state lives in Redis again:
// a value's two tokens an hour are counted in Redis (its key is there), then it is refused.
func checkRecovered(t *testing.T, srv *redistest.Server, p *proc, c rlsv3.RateLimitServiceClient) {
	t.Helper()
	eventually(t, "the breaker closes", func() bool { return metric(t, p, "extauthz_redis_breaker_open") == 0 })
	eventually(t, "calls reach Redis again", func() bool {
		return code(t, c, "POST:/order", "probe") == rlsv3.RateLimitResponse_OK
	})
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i, w := range want {
		if got := code(t, c, "POST:/few", "after"); got != w {
			t.Errorf("after recovery, call %d: got %v, want %v", i, got, w)
		}
	}
	if keys := srv.CLI("--scan", "--pattern", "*{after}*"); keys == "" {
		t.Error("after recovery: no key of the value in Redis, want the cluster state there")
	}
}

// Redis killed mid-load with fallback deny: answers within the deadline, refused, breaker open;
// Redis restarted on its port: used again without restarting extauthz.
func TestBinaryRedisKilledFallbackDeny(t *testing.T) {
	srv, p, c := faultService(t, "deny")
	checkFault(t, p, c, "deny", srv.Kill)
	srv.Restart()
	checkRecovered(t, srv, p, c)
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

// Redis killed mid-load with fallback local: the local state enforces the rules.
func TestBinaryRedisKilledFallbackLocal(t *testing.T) {
	srv, p, c := faultService(t, "local")
	checkFault(t, p, c, "local", srv.Kill)
	srv.Restart()
	checkRecovered(t, srv, p, c)
}

// A Redis that hangs (SIGSTOP) behaves as a dead one: every answer within the deadline, the
// breaker opens, the fallback answers; after SIGCONT the store is used again.
func TestBinaryRedisHangs(t *testing.T) {
	srv, p, c := faultService(t, "deny")
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	checkFault(t, p, c, "deny", srv.Pause)
	srv.Resume()
	resumed = true
	checkRecovered(t, srv, p, c)
}

// The Redis timeout bounds a check, its wait behind the call in flight included: with Redis
// stopped, a check of a value whose call is in flight is answered (by the fallback) at its own
// timeout, not a timeout after that call gave up.
func TestBinaryQueuedCheckEndsAtRedisTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	srv := redistest.Start(t)
	_, c := clusterService(t, srv.Addr(), timeout, "deny", 1000)                     // a check refused is the fallback's
	if got := code(t, c, "POST:/order", "warm"); got != rlsv3.RateLimitResponse_OK { // the script loaded
		t.Fatalf("before the fault: %v, want OK", got)
	}
	srv.Pause()
	defer srv.Resume()
	first := make(chan rlsv3.RateLimitResponse_Code, 1)
	go func() { first <- code(t, c, "POST:/order", "hot") }()
	// a sixth of the timeout later, the first check is in flight to the stopped Redis (a call
	// over loopback); it gives up well before the second's deadline, so the second is sent
	time.Sleep(timeout / 6)
	began := time.Now()
	got := code(t, c, "POST:/order", "hot")
	took := time.Since(began)
	if got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("queued check, Redis stopped, fallback deny: %v, want OVER_LIMIT", got)
	}
	if took > timeout+timeout/3 {
		t.Errorf("queued check answered after %v: want at the Redis timeout %v, its wait behind the call in flight included", took, timeout)
	}
	if got := <-first; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("first check: %v, want OVER_LIMIT", got)
	}
}

// A Redis farther away than half the timeout, asked one check at a time, that once did not
// answer in time (stopped for a moment): every check after it is answered by Redis again, none
// by the fallback. A call that timed out on a connection used one call at a time closed it;
// the next call there, connecting first, took two round trips, timed out and closed it again,
// so that the checks sent on that connection fell back for good.
func TestBinaryDistantRedisRecoversFromATimeout(t *testing.T) {
	const (
		timeout = 150 * time.Millisecond
		oneWay  = 50 * time.Millisecond // 100ms of round trip
	)
	srv := redistest.Start(t)
	_, c := clusterService(t, redistest.DelayProxy(t, srv.Addr(), oneWay), timeout, "deny", 1000) // a check refused is the fallback's
	eventually(t, "a check answered by Redis", func() bool {
		return code(t, c, "POST:/order", "warm") == rlsv3.RateLimitResponse_OK
	})
	// the client's connections, made on first use (each of its pipelines a connection, taken
	// at random by a call: the first call on one takes two round trips, and falls back)
	for i := range 20 {
		code(t, c, "POST:/order", fmt.Sprintf("warm-%d", i))
	}
	for i := range 8 { // Redis stopped for a moment under a few checks, one at a time
		srv.Pause()
		code(t, c, "POST:/order", fmt.Sprintf("hiccup-%d", i))
		srv.Resume()
	}
	refused := 0
	for i := range 30 {
		began := time.Now()
		if code(t, c, "POST:/order", fmt.Sprintf("item-%d", i)) != rlsv3.RateLimitResponse_OK {
			refused++
			t.Logf("check %d refused after %v", i, time.Since(began))
		}
	}
	if refused != 0 {
		t.Errorf("%d of 30 checks after the timeouts refused by the fallback: want each answered by Redis, %v away, within the timeout %v",
			refused, 2*oneWay, timeout)
	}
}
