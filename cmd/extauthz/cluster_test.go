package main

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// Two replicas configured with the same Redis share the state of a cluster rule: the limit holds
// across them, while a local rule counts on each replica alone.
func TestBinaryClusterRules(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - resource: "POST:/order"
    param: item_id
    grade: qps
    count: 3
    duration: 1h
    cluster: true
  - resource: "POST:/local"
    param: item_id
    grade: qps
    count: 1
    duration: 1h
`)
	replicas := startReplicas(t, dir, srv.Addr(), rules, 2)
	a := rlsv3.NewRateLimitServiceClient(dial(t, replicas[0].GRPCAddr))
	b := rlsv3.NewRateLimitServiceClient(dial(t, replicas[1].GRPCAddr))

	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	steps := []struct {
		client   rlsv3.RateLimitServiceClient
		resource string
		want     rlsv3.RateLimitResponse_Code
	}{
		{a, "POST:/order", ok},
		{b, "POST:/order", ok},
		{a, "POST:/order", ok},
		{b, "POST:/order", over}, // the fourth across both replicas
		{a, "POST:/order", over},
		{a, "POST:/local", ok},
		{b, "POST:/local", ok}, // local state: each replica has its own token
		{a, "POST:/local", over},
	}
	for i, st := range steps {
		if got := rateLimit(t, st.client, st.resource, "7"); got != st.want {
			t.Errorf("step %d %s = %v, want %v", i, st.resource, got, st.want)
		}
	}

	_, body := replicas[0].Get(t, "/metrics")
	if !strings.Contains(body, `extauthz_redis_calls_total{result="ok"}`) {
		t.Error("/metrics has no Redis calls")
	}
	for i, p := range replicas {
		if code := p.Stop(t); code != 0 {
			t.Errorf("replica %d exit code = %d, want 0", i, code)
		}
	}
}

// A cluster rule without a configured store is refused at load.
func TestBinaryClusterRuleWithoutStore(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "rules.yaml", "param_flow:\n  - {resource: r, param: p, grade: qps, count: 1, duration: 1s, cluster: true}\n")
	out, _, err := runValidate(t, rules)
	if err == nil || !strings.Contains(out, "cluster") {
		t.Errorf("validate of a cluster rule without store = %v\n%s", err, out)
	}
	cfg := writeFile(t, t.TempDir(), "c.yaml", "store: {redis: {addrs: [\"127.0.0.1:1\"]}}\n")
	if out, _, err := runValidate(t, "--config", cfg, rules); err != nil {
		t.Errorf("validate of a cluster rule with a store = %v\n%s", err, out)
	}
}

// startReplicas starts n processes serving the rules file, sharing the Redis at redisAddr
// (fallback deny, so that a test sees a Redis failure rather than a local answer), with the
// store.redis options given (lines of YAML, "key: value").
func startReplicas(t *testing.T, dir, redisAddr, rules string, n int, redisOptions ...string) []*proc {
	t.Helper()
	extra := ""
	for _, o := range redisOptions {
		extra += "    " + o + "\n"
	}
	cfg := writeFile(t, dir, "replicas.yaml", `
store:
  redis:
    addrs: ["`+redisAddr+`"]
    timeout: 1s
    fallback: deny
`+extra)
	var procs []*proc
	for range n {
		procs = append(procs, start(t, "--config", cfg, "--rules", rules,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"))
	}
	return procs
}
