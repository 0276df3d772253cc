package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/testbin"
)

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

// TestSensitiveParam: GET:/reports is limited by api_key (x-api-key), a param named like a
// credential. Its value, blocked and counted, shows up nowhere in clear: not in /hot, not in
// the console's data, not in the log; it shows as a keyed hash.
func TestSensitiveParam(t *testing.T) {
	s := newService(t, readRules(t))
	const secret = "sk-live-e2e-5f3a"
	r := req("GET", "/reports", "192.0.2.4", "x-origin", "ops", "x-api-key", secret)
	var codes []int
	for range 3 {
		codes = append(codes, checkCode(t, s.check(t, r)))
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

// TestDecisionLog: a block of either API is logged once at info with Envoy's x-request-id (from
// the CheckRequest, and for ShouldRateLimit from the lease entry envoy.yaml sends it in);
// allowed calls are not logged by default.
func TestDecisionLog(t *testing.T) {
	s := newService(t, readRules(t))
	stranger := req("GET", "/items?item_id=d-1", "192.0.2.1", "x-origin", "stranger")
	stranger.Headers["x-request-id"] = []string{"rid-check-403"}
	if got := checkCode(t, s.check(t, stranger)); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	friend := req("GET", "/items?item_id=d-1", "192.0.2.1", "x-origin", "web")
	friend.Headers["x-request-id"] = []string{"rid-check-200"}
	if got := checkCode(t, s.check(t, friend)); got != 200 {
		t.Fatalf("friend's Check = %d, want 200", got)
	}
	for i, id := range []string{"rid-dl-1", "rid-dl-2", "rid-dl-3"} {
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := s.limit(t, limitRequest(t, downloadReq("dec-1", id), false)).GetOverallCode(); got != want {
			t.Fatalf("download %s: %v, want %v", id, got, want)
		}
	}
	var rules struct {
		ParamFlow []struct{ Resource string } `json:"param_flow"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, s, "/rules")), &rules); err != nil {
		t.Fatal(err)
	}
	downloads := -1
	for i, r := range rules.ParamFlow {
		if r.Resource == "GET:/downloads" {
			downloads = i
		}
	}
	want := map[string]map[string]any{
		"rid-check-403": {"level": "info", "api": "check", "result": "blocked"},
		"rid-dl-3":      {"level": "info", "api": "ratelimit", "result": "blocked"},
	}
	// What the decision path records of each block (package policy fills the call's
	// audit.Decision); until it does, the interceptor knows only the answer.
	recorded := map[string]map[string]any{
		"rid-check-403": {"resource": "GET:/items", "origin": "stranger", "rule": "authority[0]",
			"reason": "authority", "param": "", "value": ""},
		"rid-dl-3": {"resource": "GET:/downloads", "origin": "web", "rule": fmt.Sprintf("param_flow[%d]", downloads),
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

// otlpReceiver is an in-process OpenTelemetry collector: the OTLP/gRPC trace service, keeping
// every span it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// span returns the one span received whose parent is parent (hex), or nil.
func (r *otlpReceiver) span(parent string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if hex.EncodeToString(s.GetParentSpanId()) == parent {
			return s
		}
	}
	return nil
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// startWithEnv runs the binary on a copy of rules.yaml and envoy-config/extauthz.yaml, with
// env added to its environment; it is killed when t ends.
func startWithEnv(t *testing.T, env ...string) (*testbin.Proc, *service) {
	t.Helper()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, readRules(t), 0o644); err != nil {
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

// TestDecisionLogSettings: decision_log.allowed_every logs one allow in N; decision_log.enabled
// false logs nothing; sensitive.params and sensitive.key hash a configured param's values with
// the configured key, the same hash on every replica.
func TestDecisionLogSettings(t *testing.T) {
	const key = "a key shared by every replica"
	_, s := startWithEnv(t, "EXTAUTHZ_DECISION_LOG_ALLOWED_EVERY=2",
		"EXTAUTHZ_SENSITIVE_PARAMS=user", "EXTAUTHZ_SENSITIVE_KEY="+key)
	offProc, off := startWithEnv(t, "EXTAUTHZ_DECISION_LOG_ENABLED=false")
	for _, svc := range []*service{s, off} {
		for i := range 5 {
			friend := req("GET", "/items?item_id=set-"+strconv.Itoa(i), "192.0.2.1", "x-origin", "web")
			friend.Headers["x-request-id"] = []string{"rid-allow-" + strconv.Itoa(i)}
			if got := checkCode(t, svc.check(t, friend)); got != 200 {
				t.Fatalf("friend's Check = %d, want 200", got)
			}
		}
		for i, id := range []string{"rid-user-1", "rid-user-2", "rid-user-3"} {
			want := rlsv3.RateLimitResponse_OK
			if i == 2 {
				want = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if got := svc.limit(t, limitRequest(t, downloadReq("alice", id), false)).GetOverallCode(); got != want {
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
// the span Envoy sent: a traceparent in the CheckRequest's headers, B3 headers in the gRPC
// metadata of ShouldRateLimit. The block's span carries its result.
func TestTracing(t *testing.T) {
	rcv := newOTLPReceiver(t)
	p, s := startWithEnv(t, "EXTAUTHZ_TRACING_ENDPOINT="+rcv.addr, "EXTAUTHZ_TRACING_INSECURE=true")

	const (
		w3cTrace, w3cSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		b3Trace, b3Span   = "80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1"
	)
	stranger := req("GET", "/items?item_id=t-1", "192.0.2.1", "x-origin", "stranger",
		"traceparent", "00-"+w3cTrace+"-"+w3cSpan+"-01")
	if got := checkCode(t, s.check(t, stranger)); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	rr := limitRequest(t, downloadReq("trace-1", "rid-trace-1"), false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1")
	if resp, err := s.rls.ShouldRateLimit(ctx, rr); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("download: %v %v, want OK", resp.GetOverallCode(), err)
	}

	if code := p.Stop(t); code != 0 { // the spans still buffered are sent on the way out
		t.Fatalf("exit code %d", code)
	}
	for _, w := range []struct{ trace, parent, api, result string }{
		{w3cTrace, w3cSpan, "check", "blocked"},
		{b3Trace, b3Span, "ratelimit", "allowed"},
	} {
		sp := rcv.span(w.parent)
		if sp == nil {
			t.Errorf("no span with parent %s (the %s call)", w.parent, w.api)
			continue
		}
		if got := hex.EncodeToString(sp.GetTraceId()); got != w.trace {
			t.Errorf("%s span: trace %s, want %s", w.api, got, w.trace)
		}
		if a, r := spanAttr(sp, "extauthz.api"), spanAttr(sp, "extauthz.result"); a != w.api || r != w.result {
			t.Errorf("%s span: api %q result %q, want %q %q", w.api, a, r, w.api, w.result)
		}
	}
}
