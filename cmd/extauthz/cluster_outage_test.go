package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// The log lines of an outage of Redis, one each.
const (
	logBreakerOpen     = "redis unavailable: breaker open"
	logFallbackStarted = "redis fallback started: cluster rules decided without redis"
	logRedisBack       = "redis available again: breaker closed"
)

// countLogged is the number of log lines of p with message msg.
func countLogged(p *proc, msg string) int {
	return strings.Count(p.LogText(), fmt.Sprintf(`"msg":%q`, msg))
}

// Redis killed and restarted under sequential calls: the breaker opening, the fallback
// starting and Redis coming back are each logged once, not once per call, with the outage's
// counts: the failed calls that opened the breaker, every decision left to the fallback from
// then on (the metric counts those before it too), the calls that did not try Redis, the
// duration.
func TestBinaryRedisOutageLogged(t *testing.T) {
	srv, p, c := faultService(t, "local")
	for i := range 5 {
		if got := code(t, c, "POST:/order", fmt.Sprintf("before-%d", i)); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("before the outage: %v", got)
		}
	}
	srv.Kill()
	calls := 0
	for !p.Logged(logFallbackStarted) {
		if calls > 1000 {
			t.Fatal("no fallback logged in 1000 calls with Redis killed")
		}
		if got := code(t, c, "POST:/order", fmt.Sprintf("during-%d", calls)); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("fallback local, count 1000: call %d %v, want OK", calls, got)
		}
		calls++
	}
	const more = 25
	for i := range more {
		code(t, c, "POST:/order", fmt.Sprintf("more-%d", i))
	}
	srv.Restart()
	p.WaitLog(t, logRedisBack, 15*time.Second)

	opened := p.Entry(logBreakerOpen)
	if opened == nil || opened["failed_calls"] != 3.0 || opened["fallback"] != "local" || opened["at_start"] != false ||
		opened["error"] == nil {
		t.Errorf("%q logged as %v; want 3 failed calls, fallback local, not at start, the error", logBreakerOpen, opened)
	}
	back := p.Entry(logRedisBack)
	fallbacks := metric(t, p, `extauthz_redis_fallbacks_total{policy="local"}`)
	// the first two failed calls fell back before the breaker opened: the metric counts them,
	// the outage (from the opening on) does not. On a loaded machine the call that opened the
	// breaker can land on either side of the opening: one either way.
	near := func(got any, want float64) bool { g, ok := got.(float64); return ok && g >= want-1 && g <= want }
	if back["failed_calls"] != 3.0 || !near(back["fallback_decisions"], fallbacks-2) ||
		!near(back["short_circuited"], fallbacks-3) || back["probes"].(float64) < 1 {
		t.Errorf("%q logged as %v; want 3 failed calls, %v fallback decisions, %v short-circuited, probes", logRedisBack, back,
			fallbacks-2, fallbacks-3)
	}
	if d, err := time.ParseDuration(fmt.Sprint(back["outage"])); err != nil || d <= 0 {
		t.Errorf("outage logged as %v, want a duration", back["outage"])
	}
	if fallbacks < float64(calls+more) {
		t.Errorf("%v fallbacks counted, want at least the %d calls made with Redis down", fallbacks, calls+more)
	}
	for _, msg := range []string{logBreakerOpen, logFallbackStarted, logRedisBack} {
		if n := countLogged(p, msg); n != 1 {
			t.Errorf("%q logged %d times, want once", msg, n)
		}
	}
	// calls reach Redis again (the first over a connection the restart closed may fail once
	// and follow the fallback)
	n := 0
	eventually(t, "a call counted in Redis again", func() bool {
		n++
		code(t, c, "POST:/few", fmt.Sprintf("after-%d", n)) // 2 an hour: its key stays
		return srv.CLI("--scan", "--pattern", "*{after-*") != ""
	})
}

// Redis not running when the service starts: the breaker is open from the start (logged, at
// start), and Redis started later is logged as back.
func TestBinaryRedisDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 1000, duration: 1s, cluster: true}
`)
	cfg := writeFile(t, dir, "extauthz.yaml", fmt.Sprintf(`
store:
  redis:
    addrs: ["%s"]
    timeout: 50ms
    fallback: deny
    breaker_cooldown: 100ms
`, srv.Addr()))
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	p.WaitLog(t, logBreakerOpen, 5*time.Second)
	if e := p.Entry(logBreakerOpen); e["at_start"] != true || e["failed_calls"] != 0.0 {
		t.Errorf("%q logged as %v, want at start, no failed call", logBreakerOpen, e)
	}
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	if got := code(t, c, "POST:/order", "v"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("fallback deny with Redis down: %v, want OVER_LIMIT", got)
	}
	p.WaitLog(t, logFallbackStarted, 5*time.Second)
	srv.Restart()
	p.WaitLog(t, logRedisBack, 15*time.Second)
	if got := code(t, c, "POST:/order", "v"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("Redis back: %v, want OK", got)
	}
}
