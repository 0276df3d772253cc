package e2e

// The tests of what operators see of each decision: sensitive values hashed, the decision log,
// traces. They send the CheckRequests and RateLimitRequests Envoy sends, built here field by
// field, on rules of their own, so that they depend on neither the shipped rules nor the
// request helpers of the other tests.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/testkit/otlptest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// observeRules: GET:/items white-lists web; GET:/reports allows 2 a second per api_key (a
// param named like a credential); GET:/downloads allows 2 in flight per user.
const observeRules = `
authority:
  - resource: "GET:/items"
    strategy: white
    origins: [web]
param_flow:
  - resource: "GET:/reports"
    param: api_key
    grade: qps
    count: 2
    duration: 1s
  - resource: "GET:/downloads"
    param: user
    grade: concurrency
    count: 2
    lease: 60s
`

// streamIDs numbers the Check calls as Envoy numbers its streams.
var streamIDs atomic.Uint64

// envoyCheck is the CheckRequest Envoy's ext_authz filter sends for a GET of path (query
// included) with headers (lower-case names, x-request-id among them): the HTTP request's id is
// Envoy's stream id, not the request id (CheckRequestUtils::setHttpRequest).
func envoyCheck(path string, headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":method": "GET", ":path": path, ":authority": "api.example:8080"}
	maps.Copy(h, headers)
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{
			Id: strconv.FormatUint(1000+streamIDs.Add(1), 10), Method: "GET", Path: path,
			Host: "api.example:8080", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		},
	}}}
}

// downloadAcquire is the RateLimitRequest of a download by user, with Envoy's x-request-id in
// the lease entry (as envoy.yaml's rate_limits send it).
func downloadAcquire(user, requestID string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "extauthz", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: "GET:/downloads"}, {Key: "origin", Value: "web"},
			{Key: "user", Value: user}, {Key: "lease_id", Value: requestID},
		},
	}}}
}

func (s *service) checkStatus(t *testing.T, ctx context.Context, cr *authv3.CheckRequest) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.authz.Check(ctx, cr)
	if err != nil {
		t.Fatalf("Check %s: %v", cr.GetAttributes().GetRequest().GetHttp().GetPath(), err)
	}
	return checkCode(t, resp)
}

func (s *service) limitCode(t *testing.T, ctx context.Context, rr *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.rls.ShouldRateLimit(ctx, rr)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetOverallCode()
}

// adminGet returns the body of GET path on s's admin listener.
func adminGet(t *testing.T, s *service, path string) string {
	t.Helper()
	resp, err := http.Get(s.adminURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %v: %s", path, resp.StatusCode, err, body)
	}
	return string(body)
}

// startWithEnv runs the binary on observeRules and envoy-config/extauthz.yaml, with env added
// to its environment; it is killed when t ends.
func startWithEnv(t *testing.T, env ...string) (*testbin.Proc, *service) {
	t.Helper()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(observeRules), 0o644); err != nil {
		t.Fatal(err)
	}
	config, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	p := testbin.Start(t, testbin.Options{
		Binary: binary,
		Args: []string{"serve", "--config", config, "--rules", rulesPath,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Dir:    dir,
		Env:    env,
		Output: logs,
	})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, &service{proc: p, grpcAddr: p.GRPCAddr, adminURL: "http://" + p.AdminAddr, logs: logs,
		authz: authv3.NewAuthorizationClient(conn), rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// decisions are the decision log's entries in s's log so far, by request id.
func decisions(s *service) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["logger"] != "decision" || e["msg"] != "decision" {
			continue
		}
		id, _ := e["request_id"].(string)
		out[id] = append(out[id], e)
	}
	return out
}

// TestSensitiveParam: GET:/reports is limited by api_key (x-api-key), a param named like a
// credential. Its value, blocked and counted, shows up nowhere in clear: not in /hot, not in
// the console's data, not in the log; it shows as a keyed hash.
func TestSensitiveParam(t *testing.T) {
	_, s := startWithEnv(t)
	const secret = "sk-live-e2e-5f3a"
	var codes []int
	for i := range 3 {
		codes = append(codes, s.checkStatus(t, context.Background(), envoyCheck("/reports",
			map[string]string{"x-origin": "ops", "x-api-key": secret, "x-request-id": "rid-key-" + strconv.Itoa(i)})))
	}
	if codes[2] != 429 {
		t.Fatalf("Check codes = %v, want the third refused with 429", codes)
	}
	for _, path := range []string{"/hot", "/console/data"} {
		body := adminGet(t, s, path)
		if strings.Contains(body, secret) {
			t.Errorf("GET %s shows the API key in clear: %s", path, body)
		}
		if !strings.Contains(body, `"hmac:`) {
			t.Errorf("GET %s shows no hashed value: %s", path, body)
		}
	}
	if !eventually(5*time.Second, func() bool { return strings.Contains(s.logs.String(), `"value":"hmac:`) }) {
		t.Errorf("no block logged with a hashed value:\n%s", s.logs.String())
	}
	if strings.Contains(s.logs.String(), secret) {
		t.Errorf("the log carries the API key in clear:\n%s", s.logs.String())
	}
}

// TestDecisionLog: a block of either API is logged once at info with Envoy's x-request-id (from
// the CheckRequest's headers, and for ShouldRateLimit from the lease entry envoy.yaml sends it
// in); allowed calls are not logged by default.
func TestDecisionLog(t *testing.T) {
	_, s := startWithEnv(t)
	ctx := context.Background()
	if got := s.checkStatus(t, ctx, envoyCheck("/items?item_id=d-1", map[string]string{"x-origin": "stranger", "x-request-id": "rid-check-403"})); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	if got := s.checkStatus(t, ctx, envoyCheck("/items?item_id=d-1", map[string]string{"x-origin": "web", "x-request-id": "rid-check-200"})); got != 200 {
		t.Fatalf("friend's Check = %d, want 200", got)
	}
	for i, id := range []string{"rid-dl-1", "rid-dl-2", "rid-dl-3"} {
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := s.limitCode(t, ctx, downloadAcquire("dec-1", id)); got != want {
			t.Fatalf("download %s: %v, want %v", id, got, want)
		}
	}
	want := map[string]map[string]any{
		"rid-check-403": {"level": "info", "api": "check", "result": "blocked"},
		"rid-dl-3":      {"level": "info", "api": "ratelimit", "result": "blocked"},
	}
	// What the decision path records of each block (the audit record policy builds from the
	// verdict and the handler reports).
	recorded := map[string]map[string]any{
		"rid-check-403": {"resource": "GET:/items", "origin": "stranger", "rule": "authority[0]",
			"reason": "authority", "param": "", "value": ""},
		"rid-dl-3": {"resource": "GET:/downloads", "origin": "web", "rule": "param_flow[1]",
			"reason": "concurrency", "param": "user", "value": "dec-1"},
	}
	var got map[string][]map[string]any
	eventually(5*time.Second, func() bool { got = decisions(s); return len(got) >= len(want) })
	for id, fields := range want {
		if len(got[id]) != 1 {
			t.Errorf("request %s: %d decisions logged, want 1; log:\n%s", id, len(got[id]), s.logs.String())
			continue
		}
		if got[id][0]["resource"] != "" {
			maps.Copy(fields, recorded[id])
		}
		for k, v := range fields {
			if got[id][0][k] != v {
				t.Errorf("request %s: %s = %v, want %v", id, k, got[id][0][k], v)
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("request %q logged, want only the blocks: %v", id, got[id])
		}
	}
}

// TestDecisionLogSettings: decision_log.allowed_every logs one allow in N; decision_log.enabled
// false logs nothing; sensitive.params and sensitive.key hash a configured param's values with
// the configured key, the same hash on every replica.
func TestDecisionLogSettings(t *testing.T) {
	const key = "a key shared by every replica"
	_, s := startWithEnv(t, "EXTAUTHZ_DECISION_LOG_ALLOWED_EVERY=2",
		"EXTAUTHZ_SENSITIVE_PARAMS=user", "EXTAUTHZ_SENSITIVE_KEY="+key)
	offProc, off := startWithEnv(t, "EXTAUTHZ_DECISION_LOG_ENABLED=false")
	ctx := context.Background()
	for _, svc := range []*service{s, off} {
		for i := range 5 {
			cr := envoyCheck("/items?item_id=set-"+strconv.Itoa(i), map[string]string{"x-origin": "web", "x-request-id": "rid-allow-" + strconv.Itoa(i)})
			if got := svc.checkStatus(t, ctx, cr); got != 200 {
				t.Fatalf("friend's Check = %d, want 200", got)
			}
		}
		for i, id := range []string{"rid-user-1", "rid-user-2", "rid-user-3"} {
			want := rlsv3.RateLimitResponse_OK
			if i == 2 {
				want = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if got := svc.limitCode(t, ctx, downloadAcquire("alice", id)); got != want {
				t.Fatalf("download %s: %v, want %v", id, got, want)
			}
		}
	}
	var got map[string][]map[string]any
	eventually(5*time.Second, func() bool { got = decisions(s); return len(got) >= 5 })
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// 7 allows of both APIs (5 Checks, 2 downloads), the 1st, 3rd, 5th and 7th logged.
	if want := []string{"rid-allow-0", "rid-allow-2", "rid-allow-4", "rid-user-2", "rid-user-3"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("every 2nd allow and the block: logged %v, want %v", ids, want)
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("alice"))
	hash := "hmac:" + hex.EncodeToString(m.Sum(nil))[:32]
	if b := got["rid-user-3"]; len(b) == 1 && b[0]["param"] == "user" && b[0]["value"] != hash {
		t.Errorf("blocked user logged as %v, want %s", b[0]["value"], hash)
	}
	if hot := adminGet(t, s, "/hot"); !strings.Contains(hot, hash) || strings.Contains(hot, `"alice"`) {
		t.Errorf("/hot shows user alice as something else than %s: %s", hash, hot)
	}
	// Every line the other process wrote comes before its last one, "stopped".
	offProc.Stop(t)
	if !eventually(5*time.Second, func() bool { return strings.Contains(off.logs.String(), `"msg":"stopped"`) }) {
		t.Fatalf("decision_log.enabled false: no \"stopped\" logged:\n%s", off.logs.String())
	}
	if n := len(decisions(off)); n != 0 {
		t.Errorf("decision_log.enabled false: %d decisions logged", n)
	}
}

// TestTracing: with tracing.endpoint set, each call's span reaches the collector as a child of
// the span Envoy sent: in the gRPC metadata (where Envoy's gRPC client puts its egress span's
// context: W3C traceparent for a Check, B3 for a ShouldRateLimit), or in the CheckRequest's
// headers when the metadata has none. The block's span carries its result.
func TestTracing(t *testing.T) {
	rcv := otlptest.Start(t)
	p, s := startWithEnv(t, "EXTAUTHZ_TRACING_ENDPOINT="+rcv.Addr(), "EXTAUTHZ_TRACING_INSECURE=true")

	const (
		w3cTrace, w3cSpan   = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		hdrTrace, hdrSpan   = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		b3Trace, b3Span     = "80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1"
		clientTraceparent   = "00-" + hdrTrace + "-" + hdrSpan + "-01"
		envoyTraceparent    = "00-" + w3cTrace + "-" + w3cSpan + "-01"
		strangerFromClient  = "rid-trace-header"
		strangerFromEnvoy   = "rid-trace-metadata"
		downloadFromEnvoyB3 = "rid-trace-b3"
	)
	withMD := func(kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), kv...)
	}
	stranger := func(id string) *authv3.CheckRequest {
		return envoyCheck("/items?item_id=t-1", map[string]string{"x-origin": "stranger", "x-request-id": id,
			"traceparent": clientTraceparent})
	}
	if got := s.checkStatus(t, withMD("traceparent", envoyTraceparent), stranger(strangerFromEnvoy)); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	if got := s.checkStatus(t, context.Background(), stranger(strangerFromClient)); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	if got := s.limitCode(t, withMD("x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"),
		downloadAcquire("trace-1", downloadFromEnvoyB3)); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("download: %v, want OK", got)
	}

	if code := p.Stop(t); code != 0 { // the spans still buffered are sent on the way out
		t.Fatalf("exit code %d", code)
	}
	for _, w := range []struct{ trace, parent, api, id, result string }{
		{w3cTrace, w3cSpan, "check", strangerFromEnvoy, "blocked"},
		{hdrTrace, hdrSpan, "check", strangerFromClient, "blocked"},
		{b3Trace, b3Span, "ratelimit", downloadFromEnvoyB3, "allowed"},
	} {
		sp := rcv.ChildOf(w.parent)
		if sp == nil {
			t.Errorf("no span with parent %s (request %s)", w.parent, w.id)
			continue
		}
		if got := hex.EncodeToString(sp.GetTraceId()); got != w.trace {
			t.Errorf("request %s: trace %s, want %s", w.id, got, w.trace)
		}
		for k, v := range map[string]string{"extauthz.api": w.api, "extauthz.result": w.result, "extauthz.request_id": w.id} {
			if got := otlptest.Attr(sp, k); got != v {
				t.Errorf("request %s: span attribute %s = %q, want %q", w.id, k, got, v)
			}
		}
	}
}
