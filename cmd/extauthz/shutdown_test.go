package main

// Shutdown of the built binary with throttled calls queued: none of them may end in a gRPC
// error, which Envoy's rate-limit filter (failure_mode_deny false) turns into an allow.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// throttleRules is one value a second, queued for up to 20s.
const throttleRules = `
param_flow:
  - resource: "POST:/slow"
    param: item_id
    grade: qps
    count: 1
    duration: 1s
    behavior: throttle
    max_queueing_time: 20s
`

// queuedAnswer is what one queued call got.
type queuedAnswer struct {
	resp *rlsv3.RateLimitResponse
	err  error
	at   time.Time // when it was answered
}

// Eleven calls of a one-a-second throttle, queued when SIGTERM arrives with a 2.5s grace: the
// first and those whose turn comes within the grace are allowed, every other one is answered
// OVER_LIMIT (reason shutting_down, with retry-after and duration_until_reset) as soon as the
// shutdown begins, and none gets a gRPC error.
func TestBinaryShutdownAnswersQueuedCalls(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", throttleRules)
	cfg := writeFile(t, dir, "extauthz.yaml", "shutdown_grace: 2500ms\n")
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	// The rule's queue outlasts the grace: said at load.
	p.WaitLog(t, "throttle rule may queue calls longer than shutdown_grace; those still queued at shutdown are refused", 5*time.Second)
	rls := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))

	const calls = 11
	answers := make(chan queuedAnswer, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := rls.ShouldRateLimit(ctx, rlRequest("POST:/slow", "s"))
			answers <- queuedAnswer{resp, err, time.Now()}
		}()
	}
	eventually(t, "ten calls queued", func() bool {
		_, body := p.Get(t, "/metrics")
		return strings.Contains(body, "extauthz_queue_wait_seconds_count 10\n")
	})
	sigterm := time.Now()
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if took := time.Since(sigterm); took > 8*time.Second {
		t.Errorf("exit took %v with a 2.5s grace", took)
	}
	wg.Wait()
	close(answers)

	var ok, over int
	for a := range answers {
		if a.err != nil {
			t.Errorf("a queued call got a gRPC error: %v", a.err)
			continue
		}
		switch a.resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			ok++
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			over++
			checkShuttingDown(t, a.resp)
			if late := a.at.Sub(sigterm); late > 2*time.Second {
				t.Errorf("a refused call was answered %v after SIGTERM; want it at once", late)
			}
		default:
			t.Errorf("answer %v", a.resp.GetOverallCode())
		}
	}
	// Turns 0, 1 and 2 (seconds after queueing) come within the grace; from turn 5 on, none
	// can, however late SIGTERM came after the queueing (at most 1.5s here).
	if ok < 3 || ok > 5 || ok+over != calls {
		t.Errorf("%d allowed and %d refused of %d calls; want 3 to 5 allowed and the rest refused", ok, over, calls)
	}
	if !p.Logged("stopped") {
		t.Error("no 'stopped' log entry")
	}
}

// checkShuttingDown checks a refusal at shutdown: the reason in the body, a retry-after header
// and the descriptor's duration_until_reset.
func checkShuttingDown(t *testing.T, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	if body := string(resp.GetRawBody()); !strings.Contains(body, `"reason":"shutting_down"`) {
		t.Errorf("refused at shutdown with body %s; want reason shutting_down", body)
	}
	retry := ""
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == "retry-after" {
			retry = h.GetValue()
		}
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 {
		t.Errorf("retry-after = %q; want a whole number of seconds ≥ 1", retry)
	}
	st := resp.GetStatuses()
	if len(st) != 1 || st[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st[0].GetDurationUntilReset() == nil {
		t.Errorf("statuses = %v; want one OVER_LIMIT with duration_until_reset", st)
	}
}

// A call whose turn is far beyond a short grace is refused, not cut off, and the process still
// exits 0 soon after SIGTERM.
func TestBinaryGraceExpires(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", strings.Replace(throttleRules, "duration: 1s", "duration: 10s", 1))
	cfg := writeFile(t, dir, "extauthz.yaml", "shutdown_grace: 300ms\n")
	p := start(t, "--config", cfg, "--rules", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	rls := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	if got := rateLimit(t, rls, "POST:/slow", "s"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call = %v, want OK", got)
	}
	held := make(chan queuedAnswer, 1)
	go func() {
		// Its turn is 10s away: far beyond the grace period.
		resp, err := rls.ShouldRateLimit(context.Background(), rlRequest("POST:/slow", "s"))
		held <- queuedAnswer{resp: resp, err: err}
	}()
	eventually(t, "the call to be held", func() bool {
		_, body := p.Get(t, "/metrics")
		return strings.Contains(body, "extauthz_queue_wait_seconds_count 1\n")
	})
	begin := time.Now()
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("exit took %v with a 300ms grace", took)
	}
	a := <-held
	if a.err != nil || a.resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the held call = %v, %v; want OVER_LIMIT and no error", a.resp.GetOverallCode(), a.err)
	}
	checkShuttingDown(t, a.resp)
}
