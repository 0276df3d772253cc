package observe

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/internal/audit"
)

// fakeAPI stands in for the decision path and its handlers: it decides what the test says,
// answers allowed or refused to match, and reports the call to obs as the handlers do.
type fakeAPI struct {
	authv3.UnimplementedAuthorizationServer
	rlsv3.UnimplementedRateLimitServiceServer
	obs    *Observer               // nil: no report (a benchmark's baseline)
	decide func(d *audit.Decision) // nil decides nothing
	err    error
}

// decision is what the test says was decided.
func (f *fakeAPI) decision() (audit.Decision, bool) {
	var d audit.Decision
	if f.decide != nil {
		f.decide(&d)
	}
	return d, d.Result == "" || !blocks(&d) || d.Shadow
}

func (f *fakeAPI) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	d, ok := f.decision()
	var resp *authv3.CheckResponse
	if f.err == nil {
		code := codes.OK
		if !ok {
			code = codes.PermissionDenied
		}
		resp = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code)}}
	}
	if f.obs != nil {
		f.obs.report(ctx, req, resp, &d, f.err)
	}
	return resp, f.err
}

func (f *fakeAPI) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	d, ok := f.decision()
	var resp *rlsv3.RateLimitResponse
	if f.err == nil {
		code := rlsv3.RateLimitResponse_OK
		if !ok {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp = &rlsv3.RateLimitResponse{OverallCode: code}
	}
	if f.obs != nil {
		f.obs.report(ctx, req, resp, &d, f.err)
	}
	return resp, f.err
}

type client struct {
	authz authv3.AuthorizationClient
	rls   rlsv3.RateLimitServiceClient
}

// serve runs api behind o's interceptor, reporting to o, on a loopback gRPC server for the
// test's life.
func serve(t *testing.T, o *Observer, api *fakeAPI) client {
	t.Helper()
	api.obs = o
	return serveWith(t, []grpc.ServerOption{grpc.UnaryInterceptor(o.Unary)}, api)
}

// serveWith runs api on a loopback gRPC server with opts for the test's life.
func serveWith(t testing.TB, opts []grpc.ServerOption, api *fakeAPI) client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	authv3.RegisterAuthorizationServer(srv, api)
	rlsv3.RegisterRateLimitServiceServer(srv, api)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client{authz: authv3.NewAuthorizationClient(conn), rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// checkRequest is a CheckRequest with headers; streamID is the HTTP request's id, where Envoy
// puts its stream id.
func checkRequest(headers map[string]string, streamID string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Id: streamID, Method: "GET", Path: "/reports", Headers: headers},
	}}}
}

func limitRequest(kv ...string) *rlsv3.RateLimitRequest {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}}
}

func hashed(param, value string) string {
	if param == "api_key" {
		return "hmac:" + value[:2]
	}
	return value
}

// The decision log carries exactly these fields for a block, with the request id from each
// place Envoy sends it and the sensitive value redacted.
func TestDecisionLogFields(t *testing.T) {
	block := func(d *audit.Decision) {
		d.Resource, d.Origin = "GET:/reports", "ops"
		d.Result, d.Reason, d.Rule = "blocked", "qps", "param_flow[3]"
		d.Param, d.Value = "api_key", "sk-live-42"
	}
	tests := []struct {
		name string
		call func(ctx context.Context, c client) error
		md   []string
		want map[string]any
	}{
		{
			name: "check, id in the header, stream id in the HTTP request's id",
			call: func(ctx context.Context, c client) error {
				_, err := c.authz.Check(ctx, checkRequest(map[string]string{"x-request-id": "from-header"}, "4242"))
				return err
			},
			want: map[string]any{"api": "check", "request_id": "from-header", "result": "blocked", "reason": "qps",
				"resource": "GET:/reports", "rule": "param_flow[3]", "origin": "ops", "param": "api_key", "value": "hmac:sk"},
		},
		{
			name: "check, id in a raw header",
			call: func(ctx context.Context, c client) error {
				r := checkRequest(nil, "")
				r.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
					{Key: "X-Request-Id", RawValue: []byte("from-raw")}}}
				_, err := c.authz.Check(ctx, r)
				return err
			},
			want: map[string]any{"api": "check", "request_id": "from-raw", "result": "blocked", "reason": "qps",
				"resource": "GET:/reports", "rule": "param_flow[3]", "origin": "ops", "param": "api_key", "value": "hmac:sk"},
		},
		{
			name: "ratelimit, id in the metadata",
			md:   []string{"x-request-id", "from-metadata"},
			call: func(ctx context.Context, c client) error {
				_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "GET:/reports", "lease_id", "from-lease"))
				return err
			},
			want: map[string]any{"api": "ratelimit", "request_id": "from-metadata", "result": "blocked", "reason": "qps",
				"resource": "GET:/reports", "rule": "param_flow[3]", "origin": "ops", "param": "api_key", "value": "hmac:sk"},
		},
		{
			name: "ratelimit, id in the lease entry",
			call: func(ctx context.Context, c client) error {
				_, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "GET:/reports", "lease_id", "from-lease"))
				return err
			},
			want: map[string]any{"api": "ratelimit", "request_id": "from-lease", "result": "blocked", "reason": "qps",
				"resource": "GET:/reports", "rule": "param_flow[3]", "origin": "ops", "param": "api_key", "value": "hmac:sk"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			c := serve(t, New(Options{Log: zap.New(core), Redact: hashed}), &fakeAPI{decide: block})
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			if err := tt.call(ctx, c); err != nil {
				t.Fatal(err)
			}
			got := logs.AllUntimed()
			if len(got) != 1 {
				t.Fatalf("%d entries logged, want 1: %v", len(got), got)
			}
			if got[0].Message != "decision" || got[0].Level != zapcore.InfoLevel {
				t.Errorf("logged %s %q, want info \"decision\"", got[0].Level, got[0].Message)
			}
			if m := got[0].ContextMap(); !reflect.DeepEqual(m, tt.want) {
				t.Errorf("fields\n got %v\nwant %v", m, tt.want)
			}
		})
	}
}

// The decision path's own api and request id win; the api and id are filled in when it left
// them empty, and a call it recorded nothing for is judged by its answer.
func TestDecisionCompleted(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	api := &fakeAPI{}
	c := serve(t, New(Options{Log: zap.New(core), AllowedEvery: 1}), api)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "md-id")

	api.decide = func(d *audit.Decision) { d.RequestID, d.Result = "own-id", "allowed" }
	if _, err := c.rls.ShouldRateLimit(ctx, limitRequest("resource", "r")); err != nil {
		t.Fatal(err)
	}
	api.decide = func(d *audit.Decision) { d.Result, d.Reason = "dry_run", "authority" }
	if _, err := c.authz.Check(ctx, checkRequest(nil, "4242")); err != nil { // a stream id is no request id
		t.Fatal(err)
	}
	api.decide = nil // nothing recorded: the answer says allowed
	if _, err := c.rls.ShouldRateLimit(context.Background(), limitRequest("resource", "r")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 10000)
	api.decide = func(d *audit.Decision) { d.Result = "blocked" }
	if _, err := c.authz.Check(ctx, checkRequest(map[string]string{"x-request-id": long}, "")); err != nil {
		t.Fatal(err)
	}
	api.decide = nil
	api.err = status.Error(codes.InvalidArgument, "bad")
	if _, err := c.authz.Check(context.Background(), checkRequest(nil, "")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v, want InvalidArgument", err)
	}
	type line struct{ api, id, result, code string }
	var got []line
	for _, e := range logs.AllUntimed() {
		m := e.ContextMap()
		code, _ := m["code"].(string)
		got = append(got, line{m["api"].(string), m["request_id"].(string), m["result"].(string), code})
	}
	want := []line{
		{"ratelimit", "own-id", "allowed", ""},
		{"check", "md-id", "dry_run", ""},
		{"ratelimit", "", "allowed", ""},
		{"check", long[:MaxRequestIDLen], "blocked", ""},
		{"check", "", "error", "InvalidArgument"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("logged\n got %v\nwant %v", got, want)
	}
}

// Every block and would-be block is logged; allows one in AllowedEvery, or none.
func TestAllowedSampling(t *testing.T) {
	for _, tt := range []struct{ every uint64 }{{0}, {1}, {3}, {5}, {11}} {
		core, logs := observer.New(zapcore.InfoLevel)
		api := &fakeAPI{}
		c := serve(t, New(Options{Log: zap.New(core), AllowedEvery: tt.every}), api)
		results := []struct {
			result string
			shadow bool
		}{{"allowed", false}, {"blocked", false}, {"throttled", false}, {"allowed", true}}
		blocked := 0
		for i := range 10 {
			r := results[i%len(results)]
			if r.result == "blocked" || r.shadow {
				blocked++
			}
			api.decide = func(d *audit.Decision) { d.Result, d.Shadow = r.result, r.shadow; d.Wait = time.Millisecond }
			if _, err := c.rls.ShouldRateLimit(context.Background(), limitRequest("resource", "r")); err != nil {
				t.Fatal(err)
			}
		}
		allowed := 0
		for _, e := range logs.AllUntimed() {
			if m := e.ContextMap(); !blocks(&audit.Decision{Result: m["result"].(string), Shadow: m["shadow"] == true}) {
				allowed++
			}
		}
		if got := logs.Len() - allowed; got != blocked {
			t.Errorf("every %d: %d blocks logged, want %d", tt.every, got, blocked)
		}
		// 10 calls, 5 of them blocks (2 by a shadow rule): 5 allows.
		if want := sampled(uint64(10-blocked), tt.every); allowed != want {
			t.Errorf("every %d: %d allows logged, want %d", tt.every, allowed, want)
		}
	}
}

// sampled is how many of n allows one in every is: the first, then each every-th.
func sampled(n, every uint64) int {
	if every == 0 {
		return 0
	}
	return int((n + every - 1) / every)
}

// Other methods pass through with their context as it came, without a span.
func TestOtherMethods(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	o := New(Options{Tracer: tp.Tracer("test")})
	ctx := context.Background()
	var got context.Context
	_, err := o.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"},
		func(c context.Context, _ any) (any, error) { got = c; return nil, nil })
	if err != nil || got != ctx {
		t.Errorf("health check got context %v (err %v), want the one it came with", got, err)
	}
}
