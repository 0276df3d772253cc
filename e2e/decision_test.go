package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
