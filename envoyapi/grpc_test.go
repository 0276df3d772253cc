package envoyapi

import (
	"testing"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

// TestCheckGRPCStatus: a gRPC call refused for a limit carries grpc-status RESOURCE_EXHAUSTED,
// which Envoy's local reply keeps (e2e/envoy TestGRPCStatusThroughEnvoy); an HTTP request's
// refusal does not.
func TestCheckGRPCStatus(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		want        string
	}{
		{"application/grpc", "8"},
		{"application/grpc+proto", "8"},
		{"application/json", ""},
		{"", ""},
	} {
		r := newRig(t, rigConfig{
			mapping:   descriptors.Config{Authz: descriptors.AuthzConfig{Resource: "all", Params: map[string]descriptors.Source{"u": {From: "header", Name: "x-u"}}}},
			paramFlow: []hotparam.Rule{oneToken("all", "u")},
		})
		h := map[string]string{"x-u": "a"}
		if tc.contentType != "" {
			h["content-type"] = tc.contentType
		}
		for i := 0; i < 2; i++ {
			resp, err := r.auth.Check(ctx(t), httpReq{method: "POST", path: "/svc/M", headers: h}.build())
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, o := range resp.GetDeniedResponse().GetHeaders() {
				if o.GetHeader().GetKey() == HeaderGRPCStatus {
					got = o.GetHeader().GetValue()
				}
			}
			want := tc.want
			if i == 0 {
				want = "" // allowed
			}
			if got != want {
				t.Errorf("content-type %q, call %d: grpc-status %q, want %q", tc.contentType, i+1, got, want)
			}
		}
	}
}
