package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

func rlDesc(kv ...string) *ratelimitcommonv3.RateLimitDescriptor {
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestClientMistakesAreRefused: a malformed request is never answered with a gRPC error (which
// Envoy's failure_mode_deny: false turns into an allow): each is refused, OVER_LIMIT on the
// rate-limit API and 400 on ext_authz, with a body naming the problem, and consumes nothing.
func TestClientMistakesAreRefused(t *testing.T) {
	s := newService(t, []byte(`
param_flow:
  - {resource: "GET:/items", param: item_id, count: 1, duration: 1h}
`))
	item := func() *ratelimitcommonv3.RateLimitDescriptor {
		return rlDesc("resource", "GET:/items", "item_id", "m1")
	}
	long := strings.Repeat("k", 5000)
	many := make([]*ratelimitcommonv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = item()
	}
	huge := item()
	huge.HitsAddend = wrapperspb.UInt64(1 << 63)
	tests := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		wantErr string
	}{
		{"empty key", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", "", "x", "item_id", "m1")}}, "empty key"},
		{"key too long", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", long, "x", "item_id", "m1")}}, "key too long"},
		{"value too long", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", "item_id", long)}}, "value too long"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many}, "too many descriptors"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "d"}, "no descriptors"},
		{"huge hits", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{huge}}, "hits_addend too large"},
		{"domain too long", &rlsv3.RateLimitRequest{Domain: long, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{item()}}, "domain"},
	}
	for _, tt := range tests {
		resp, err := s.limitErr(tt.req)
		if err != nil {
			t.Errorf("%s: gRPC error %v, want an OVER_LIMIT answer", tt.name, err)
			continue
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: overall %v, want OVER_LIMIT", tt.name, resp.GetOverallCode())
		}
		if got, want := len(resp.GetStatuses()), len(tt.req.GetDescriptors()); got != want {
			t.Errorf("%s: %d statuses, want one per descriptor (%d)", tt.name, got, want)
		}
		var body struct{ Error string }
		if err := json.Unmarshal(resp.GetRawBody(), &body); err != nil || !strings.Contains(body.Error, tt.wantErr) {
			t.Errorf("%s: body %q, want an error saying %q", tt.name, resp.GetRawBody(), tt.wantErr)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, cr := range map[string]*authv3.CheckRequest{
		"no attributes": {},
		"no http":       {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}},
	} {
		resp, err := s.authz.Check(ctx, cr)
		if err != nil {
			t.Errorf("Check %s: gRPC error %v, want a 400 answer", name, err)
			continue
		}
		if got := checkCode(t, resp); got != 400 {
			t.Errorf("Check %s: %d, want 400", name, got)
		}
	}

	// None of the refused requests took the value's one token.
	resp := s.limit(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{item()}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("first valid request after the refused ones: %v, want OK (nothing consumed)", resp.GetOverallCode())
	}
	resp = s.limit(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{item()}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second valid request: %v, want OVER_LIMIT (one token an hour)", resp.GetOverallCode())
	}
}

// startWithEnv runs the binary on rules with extra environment variables, for settings the
// shared config does not set; it returns the process and a rate-limit client.
func startRulesWithEnv(t *testing.T, rules string, env ...string) (*testbin.Proc, rlsv3.RateLimitServiceClient, authv3.AuthorizationClient) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{
		Binary: binary,
		Args: []string{"serve", "--config", cfg, "--rules", path,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env:   env,
		Ready: 15 * time.Second,
	})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, rlsv3.NewRateLimitServiceClient(conn), authv3.NewAuthorizationClient(conn)
}

// metricValue reads one sample of /metrics whose line starts with prefix; -1 when absent.
func metricValue(t *testing.T, p *testbin.Proc, prefix string) float64 {
	t.Helper()
	code, body := p.Get(t, "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// TestMaxWaiting: with decision.max_waiting 2 (EXTAUTHZ_DECISION_MAX_WAITING), two requests
// held by a throttle rule fill the queues; the next one is refused at once (OVER_LIMIT,
// reason queue_full) and counted, instead of adding a goroutine and a wait.
func TestMaxWaiting(t *testing.T) {
	p, rls, _ := startRulesWithEnv(t, `
param_flow:
  - {resource: "T", param: user, count: 1, duration: 2s, behavior: throttle, max_queueing_time: 60s}
`, "EXTAUTHZ_DECISION_MAX_WAITING=2")
	req := func() *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "T", "user", "u")}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := rls.ShouldRateLimit(ctx, req()); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first: %v, %v; want OK at once", resp, err)
	}
	held, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range 2 { // held about 2s and 4s
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rls.ShouldRateLimit(held, req())
		}()
	}
	// The queue-wait histogram counts a wait when it starts: both are held once it counts 2.
	if !eventually(10*time.Second, func() bool {
		return metricValue(t, p, "extauthz_queue_wait_seconds_count") == 2
	}) {
		t.Fatalf("the two throttled requests never started waiting")
	}
	began := time.Now()
	resp, err := rls.ShouldRateLimit(ctx, req())
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("third waiter: %v, %v; want OVER_LIMIT", resp, err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("third waiter answered after %v, want at once", took)
	}
	var body struct{ Reason string }
	if err := json.Unmarshal(resp.GetRawBody(), &body); err != nil || body.Reason != "queue_full" {
		t.Errorf("body %q, want reason queue_full", resp.GetRawBody())
	}
	if n := metricValue(t, p, `extauthz_decisions_total{api="ratelimit",domain="d",resource="T",result="queue_full"}`); n != 1 {
		t.Errorf("queue_full decisions counted %v, want 1", n)
	}
	stop()
	wg.Wait()
}

// TestDryRun: with EXTAUTHZ_DECISION_DRY_RUN=true a request every rule would refuse (authority
// on Check, a used-up value and a malformed request on the rate-limit API) is allowed, logged
// and counted as dry_run under its resource.
func TestDryRun(t *testing.T) {
	p, rls, authz := startRulesWithEnv(t, `
authority:
  - {resource: "GET:/reports", strategy: white, origins: [ops]}
param_flow:
  - {resource: "GET:/items", param: item_id, count: 1, duration: 1h}
`, "EXTAUTHZ_DECISION_DRY_RUN=true")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cr := checkRequest(t, req("GET", "/reports", "192.0.2.9", "x-origin", "stranger"))
	resp, err := authz.Check(ctx, cr)
	if err != nil || checkCode(t, resp) != 200 {
		t.Fatalf("Check from a stranger in a dry run: %v, %v; want allowed", resp, err)
	}
	item := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", "item_id", "dry")}}
	for i := range 3 {
		r, err := rls.ShouldRateLimit(ctx, item)
		if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("item call %d in a dry run: %v, %v; want OK", i+1, r, err)
		}
		if i > 0 && r.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Errorf("item call %d: remaining %d, want the real 0", i+1, r.GetStatuses()[0].GetLimitRemaining())
		}
	}
	r, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", "", "x")}})
	if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("malformed request in a dry run: %v, %v; want OK", r, err)
	}

	for metric, want := range map[string]float64{
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/reports",result="dry_run"}`: 1,
		`extauthz_decisions_total{api="ratelimit",domain="d",resource="GET:/items",result="dry_run"}`:  2,
		`extauthz_decisions_total{api="ratelimit",domain="d",resource="GET:/items",result="ok"}`:       1,
		`extauthz_decisions_total{api="ratelimit",domain="d",resource="",result="dry_run"}`:            1,
	} {
		if got := metricValue(t, p, metric); got != want {
			t.Errorf("%s = %v, want %v", metric, got, want)
		}
	}
	// The decision log names what would have been refused.
	if e := waitEntries(p, 1, "decision", func(e map[string]any) bool {
		return e["result"] == "dry_run" && e["resource"] == "GET:/reports"
	}); len(e) != 1 || e[0]["reason"] != "authority" || e[0]["rule"] != "authority[0]" {
		t.Errorf("dry-run decision log entries %v, want one: the authority block of GET:/reports", e)
	}
}

// TestShadowAuthorityRule: an authority rule with shadow: true refuses nobody; what it would
// have refused is counted as shadow; an allowed request counts under its resource.
func TestShadowAuthorityRule(t *testing.T) {
	p, _, authz := startRulesWithEnv(t, `
authority:
  - {resource: "GET:/reports", strategy: white, origins: [ops], shadow: true}
  - {resource: "GET:/items", strategy: white, origins: [web]}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(path, origin string) int {
		r := req("GET", path, "192.0.2.9", "x-origin", origin)
		cr := checkRequest(t, r)
		resp, err := authz.Check(ctx, cr)
		if err != nil {
			t.Fatal(err)
		}
		return checkCode(t, resp)
	}
	if got := check("/reports", "stranger"); got != 200 {
		t.Errorf("shadow white list, stranger: %d, want 200", got)
	}
	if got := check("/items?item_id=1", "web"); got != 200 {
		t.Errorf("white list, web: %d, want 200", got)
	}
	if got := check("/items?item_id=1", "stranger"); got != 403 {
		t.Errorf("white list, stranger: %d, want 403", got)
	}
	for metric, want := range map[string]float64{
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/reports",result="shadow"}`:  1,
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/items",result="ok"}`:        1,
		`extauthz_decisions_total{api="ext_authz",domain="",resource="GET:/items",result="authority"}`: 1,
	} {
		if got := metricValue(t, p, metric); got != want {
			t.Errorf("%s = %v, want %v", metric, got, want)
		}
	}
	if e := waitEntries(p, 1, "decision", func(e map[string]any) bool { return e["shadow"] == true }); len(e) != 1 ||
		e[0]["resource"] != "GET:/reports" || e[0]["result"] != "allowed" || e[0]["rule"] != "authority[0]" {
		t.Errorf("shadow decision log entries %v, want one, allowed, for GET:/reports", e)
	}
}
