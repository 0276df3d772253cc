package main

// Tests of the built binary: started as a process on free ports, called over real gRPC, reloaded
// through its rules file, and stopped with SIGTERM.

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const binaryConfig = `
log: {level: info, format: json}
shutdown_grace: 10s
authz:
  origin:
    - {from: header, name: x-origin}
`

func rulesV1(origin string) string {
	return `
authority:
  - resource: "GET:/hello"
    strategy: white
    origins: [` + origin + `]
param_flow:
  - resource: "POST:/order"
    param: item_id
    grade: qps
    count: 2
    duration: 1h
  - resource: "POST:/slow"
    param: item_id
    grade: qps
    count: 1
    duration: 1s
    behavior: throttle
    max_queueing_time: 5s
`
}

func TestBinary(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeAtomic(t, rulesPath, rulesV1("serviceA"))
	cfgPath := writeFile(t, dir, "extauthz.yaml", binaryConfig)

	// No subcommand: serve.
	p := start(t, "--config", cfgPath, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	conn := dial(t, p.GRPCAddr)
	authz := authv3.NewAuthorizationClient(conn)
	rls := rlsv3.NewRateLimitServiceClient(conn)

	// Health and readiness.
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "envoy.service.auth.v3.Authorization", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, resp.GetStatus(), err)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := p.Get(t, path); code != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, code, body)
		}
	}

	// Both APIs with the first rules.
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.OK {
		t.Errorf("Check serviceA = %v, want OK", got)
	}
	if got := checkCode(t, authz, "GET", "/hello?x=1", "serviceB"); got != codes.PermissionDenied {
		t.Errorf("Check serviceB = %v, want PermissionDenied", got)
	}
	wantRL := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i, want := range wantRL {
		if got := rateLimit(t, rls, "POST:/order", "42"); got != want {
			t.Errorf("ShouldRateLimit #%d = %v, want %v", i+1, got, want)
		}
	}
	if got := rateLimit(t, rls, "POST:/order", "43"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit other value = %v, want OK", got)
	}
	ri := rulesOf(t, p)
	if ri.Version != 1 || ri.LastError != nil || ri.File != rulesPath {
		t.Fatalf("/rules = %+v, want version 1 from %s, no error", ri, rulesPath)
	}

	// A changed rules file is applied.
	writeAtomic(t, rulesPath, rulesV1("serviceB"))
	eventually(t, "rules version 2", func() bool { return rulesOf(t, p).Version == 2 })
	if got := checkCode(t, authz, "GET", "/hello", "serviceB"); got != codes.OK {
		t.Errorf("after reload: Check serviceB = %v, want OK", got)
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.PermissionDenied {
		t.Errorf("after reload: Check serviceA = %v, want PermissionDenied", got)
	}
	// The hot-param rule kept its state: value 42 is still out of tokens.
	if got := rateLimit(t, rls, "POST:/order", "42"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after reload: ShouldRateLimit 42 = %v, want OVER_LIMIT", got)
	}

	// A broken rules file is rejected: the old rules stay, the error shows on /rules.
	writeAtomic(t, rulesPath, "param_flow:\n  - resource: \"POST:/order\"\n    param: item_id\n    grade: qps\n    count: -5\n")
	eventually(t, "last_error on /rules", func() bool { return rulesOf(t, p).LastError != nil })
	ri = rulesOf(t, p)
	if ri.Version != 2 || len(ri.Authority) != 1 || ri.Authority[0].Origins[0] != "serviceB" {
		t.Errorf("after a broken file /rules = %+v, want version 2 with origin serviceB", ri)
	}
	if msg := ri.LastError.Message; !strings.Contains(msg, "count") || !strings.Contains(msg, "rules.yaml") {
		t.Errorf("last_error %q does not name the file and field", msg)
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceB"); got != codes.OK {
		t.Errorf("after a broken file: Check serviceB = %v, want OK (old rules in force)", got)
	}
	if !p.Logged("rules rejected; the rules in force stay") {
		t.Error("the rejected load was not logged")
	}

	// Metrics and the busiest values.
	_, metricsBody := p.Get(t, "/metrics")
	for _, want := range []string{
		`extauthz_decisions_total{api="ratelimit",domain="edge",resource="POST:/order",result="param_flow"} 2`,
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/hello",result="authority"} 2`,
		`extauthz_rule_reloads_total{result="applied"} 2`,
		`extauthz_rule_reloads_total{result="failed"} 1`,
		`extauthz_hotparam_tracked_values{param="item_id",resource="POST:/order",rule="0"} 2`,
	} {
		if !strings.Contains(metricsBody, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, hot := p.Get(t, "/hot?n=1")
	if code != http.StatusOK || !strings.Contains(hot, `"value": "42"`) {
		t.Errorf("GET /hot?n=1 = %d %s, want value 42", code, hot)
	}

	// A throttled call in flight when SIGTERM arrives is answered before the process exits.
	if got := rateLimit(t, rls, "POST:/slow", "s"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first throttled call = %v, want OK", got)
	}
	type result struct {
		code rlsv3.RateLimitResponse_Code
		err  error
		took time.Duration
	}
	held := make(chan result, 1)
	go func() {
		begin := time.Now()
		resp, err := rls.ShouldRateLimit(context.Background(), rlRequest("POST:/slow", "s"))
		held <- result{resp.GetOverallCode(), err, time.Since(begin)}
	}()
	eventually(t, "the throttled call to be held", func() bool {
		_, body := p.Get(t, "/metrics")
		return strings.Contains(body, "extauthz_queue_wait_seconds_count 1")
	})
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	r := <-held
	if r.err != nil || r.code != rlsv3.RateLimitResponse_OK {
		t.Errorf("throttled call during shutdown = %v, %v; want OK", r.code, r.err)
	}
	if r.took < 500*time.Millisecond {
		t.Errorf("throttled call answered after %v; want it held about 1s", r.took)
	}
	if !p.Logged("stopped") {
		t.Error("no 'stopped' log entry")
	}
}

// Without a configured rules file, ./rules.yaml is used when present, and watched: creating it
// later applies it.
func TestBinaryDefaultRulesFile(t *testing.T) {
	dir := t.TempDir()
	p := startIn(t, dir, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	if ri := rulesOf(t, p); len(ri.Authority) != 0 || ri.LastError != nil {
		t.Fatalf("/rules without rules.yaml = %+v, want no rules and no error", ri)
	}
	writeAtomic(t, filepath.Join(dir, "rules.yaml"), rulesV1("serviceA"))
	eventually(t, "rules.yaml created after start to be applied", func() bool { return len(rulesOf(t, p).Authority) == 1 })
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}

	// Present at start.
	q := startIn(t, dir, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	ri := rulesOf(t, q)
	if ri.File != "rules.yaml" || len(ri.Authority) != 1 || ri.Authority[0].Origins[0] != "serviceA" {
		t.Errorf("/rules with ./rules.yaml = %+v", ri)
	}
	if code := q.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

func TestBinaryStartFailures(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing rules file", []string{"--rules", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"invalid config", []string{"--log-level", "loud"}, "log.level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary(t), append(tt.args, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit = %v, want code 1\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output does not mention %q:\n%s", tt.want, out)
			}
		})
	}
}
