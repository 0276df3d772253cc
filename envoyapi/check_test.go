package envoyapi

import (
	"reflect"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// oneToken is a rule that lets one request per value through per hour.
func oneToken(resource, param string) hotparam.Rule {
	return hotparam.Rule{Resource: resource, Param: param, Count: 1, Duration: time.Hour}
}

// TestCheckSources drives every mapping source through the whole stack: a rule of one token on
// the param the source feeds lets the first request through and blocks the second, whose body
// names the value the source yielded.
func TestCheckSources(t *testing.T) {
	tests := []struct {
		name      string
		src       descriptors.Source
		hops      int
		req       httpReq
		wantValue string
	}{
		{"header", descriptors.Source{From: "header", Name: "X-User-Id"}, 0,
			httpReq{headers: map[string]string{"x-user-id": "u1"}}, "u1"},
		{"header split", descriptors.Source{From: "header", Name: "x-user-id", Split: ","}, 0,
			httpReq{headers: map[string]string{"x-user-id": "u1, u1"}}, "u1"},
		{"query", descriptors.Source{From: "query", Name: "itemId"}, 0,
			httpReq{path: "/order?itemId=42"}, "42"},
		{"cookie", descriptors.Source{From: "cookie", Name: "sid"}, 0,
			httpReq{headers: map[string]string{"cookie": "a=b; sid=s1"}}, "s1"},
		{"client_ip", descriptors.Source{From: "client_ip"}, 0,
			httpReq{addr: "10.1.2.3"}, "10.1.2.3"},
		{"client_ip trusted hop", descriptors.Source{From: "client_ip"}, 1,
			httpReq{addr: "10.1.2.3", headers: map[string]string{"x-forwarded-for": "9.9.9.9, 203.0.113.9,10.1.2.3"}}, "203.0.113.9"},
		{"host", descriptors.Source{From: "host"}, 0, httpReq{host: "shop.example"}, "shop.example"},
		{"method", descriptors.Source{From: "method"}, 0, httpReq{method: "DELETE"}, "DELETE"},
		{"path", descriptors.Source{From: "path"}, 0, httpReq{path: "/a/b?c=d"}, "/a/b"},
		{"principal", descriptors.Source{From: "principal"}, 0, httpReq{principal: "spiffe://td/ns/a"}, "spiffe://td/ns/a"},
		{"context_extension", descriptors.Source{From: "context_extension", Name: "tenant"}, 0,
			httpReq{ext: map[string]string{"tenant": "acme"}}, "acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, rigConfig{
				mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
					Resource: "all", Params: map[string]descriptors.Source{"p": tt.src}, TrustedHops: tt.hops,
				}},
				paramFlow: []hotparam.Rule{oneToken("all", "p")},
			})
			resp, err := r.auth.Check(ctx(t), tt.req.build())
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "header split" {
				// Both values are the same value: the request asks it twice, and one token is
				// not enough.
				if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) {
					t.Fatalf("first request: status %v, want PERMISSION_DENIED (value checked twice)", resp.GetStatus())
				}
			} else {
				if resp.GetStatus().GetCode() != int32(codes.OK) {
					t.Fatalf("first request: status %v, want OK", resp.GetStatus())
				}
				resp, err = r.auth.Check(ctx(t), tt.req.build())
				if err != nil {
					t.Fatal(err)
				}
			}
			dr := resp.GetDeniedResponse()
			if got, want := dr.GetStatus().GetCode(), typev3.StatusCode_TooManyRequests; got != want {
				t.Fatalf("second request: HTTP %v, want %v", got, want)
			}
			b := decodeBody(t, dr.GetBody())
			if b.Param != "p" || b.Value != tt.wantValue {
				t.Errorf("blocked param %q value %q, want p %q", b.Param, b.Value, tt.wantValue)
			}
		})
	}
}

func TestCheckAnswers(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Origin: []descriptors.Source{{From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{"item": {From: "query", Name: "item"}},
		}},
		paramFlow: []hotparam.Rule{{Resource: "GET:/buy", Param: "item", Count: 2, Duration: 10 * time.Second}},
	})
	req := httpReq{method: "GET", path: "/buy?item=7", headers: map[string]string{"x-origin": "shop"}}

	// A request no rule applies to: OK, no headers.
	resp, err := r.auth.Check(ctx(t), httpReq{method: "GET", path: "/other?item=7"}.build())
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil || len(resp.GetOkResponse().GetResponseHeadersToAdd()) != 0 {
		t.Errorf("unruled request: %v, want OK without headers", resp)
	}
	if got, want := r.rec.last(), (decision{policy.APICheck, "", "", policy.Allowed}); got != want {
		t.Errorf("recorded %+v, want %+v", got, want)
	}

	steps := []struct {
		advance     time.Duration
		wantHTTP    typev3.StatusCode // 0: allowed
		wantHeaders map[string]string
	}{
		// Two tokens per 10s: one token comes back every 5s; the bucket is full 5s after each.
		{0, 0, map[string]string{HeaderLimit: "2", HeaderRemaining: "1", HeaderReset: "5"}},
		{time.Second, 0, map[string]string{HeaderLimit: "2", HeaderRemaining: "0", HeaderReset: "9"}},
		{0, typev3.StatusCode_TooManyRequests, map[string]string{
			HeaderRetryAfter: "4", HeaderLimit: "2", HeaderRemaining: "0", HeaderReset: "9", HeaderContentType: "application/json"}},
		{4*time.Second - time.Nanosecond, typev3.StatusCode_TooManyRequests, map[string]string{
			HeaderRetryAfter: "1", HeaderLimit: "2", HeaderRemaining: "0", HeaderReset: "6", HeaderContentType: "application/json"}},
		{time.Nanosecond, 0, map[string]string{HeaderLimit: "2", HeaderRemaining: "0", HeaderReset: "10"}},
	}
	for i, s := range steps {
		r.clock.Advance(s.advance)
		resp, err := r.auth.Check(ctx(t), req.build())
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if s.wantHTTP == 0 {
			if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil {
				t.Fatalf("step %d: %v, want OK", i, resp)
			}
			if got := headers(t, resp.GetOkResponse().GetResponseHeadersToAdd()); !reflect.DeepEqual(got, s.wantHeaders) {
				t.Errorf("step %d: client headers %v, want %v", i, got, s.wantHeaders)
			}
			if h := resp.GetOkResponse().GetHeaders(); len(h) != 0 {
				t.Errorf("step %d: headers %v sent upstream, want none", i, h)
			}
			if got, want := r.rec.last(), (decision{policy.APICheck, "", "GET:/buy", policy.Allowed}); got != want {
				t.Errorf("step %d: recorded %+v, want %+v", i, got, want)
			}
			continue
		}
		if got, want := resp.GetStatus().GetCode(), int32(codes.PermissionDenied); got != want {
			t.Errorf("step %d: status %d, want %d", i, got, want)
		}
		dr := resp.GetDeniedResponse()
		if got := dr.GetStatus().GetCode(); got != s.wantHTTP {
			t.Errorf("step %d: HTTP %v, want %v", i, got, s.wantHTTP)
		}
		if got := headers(t, dr.GetHeaders()); !reflect.DeepEqual(got, s.wantHeaders) {
			t.Errorf("step %d: headers %v, want %v", i, got, s.wantHeaders)
		}
		got := decodeBody(t, dr.GetBody())
		want := body{Blocked: "param_flow", Rule: 0, Resource: "GET:/buy", Origin: "shop", Param: "item", Value: "7", Reason: "qps"}
		if got != want {
			t.Errorf("step %d: body %+v, want %+v", i, got, want)
		}
		if got, want := r.rec.last(), (decision{policy.APICheck, "", "GET:/buy", policy.ParamFlow}); got != want {
			t.Errorf("step %d: recorded %+v, want %+v", i, got, want)
		}
	}
}

// TestCheckAuthority: an authority block answers 403 before any token is spent.
func TestCheckAuthority(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Origin: []descriptors.Source{{From: "principal"}, {From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{"user": {From: "header", Name: "x-user"}},
		}},
		authority: []authority.Rule{
			{Resource: "POST:/pay", Strategy: authority.White, Origins: []string{"checkout", "10.0.0.0/8"}},
			{Resource: "GET:/admin", Strategy: authority.Black, Origins: []string{"intruder"}},
		},
		paramFlow: []hotparam.Rule{oneToken("POST:/pay", "user")},
	})
	tests := []struct {
		name     string
		req      httpReq
		wantHTTP typev3.StatusCode // 0: allowed
		want     body
	}{
		{"origin not listed", httpReq{method: "POST", path: "/pay", headers: map[string]string{"x-origin": "stranger", "x-user": "u"}},
			typev3.StatusCode_Forbidden, body{Blocked: "authority", Rule: 0, Resource: "POST:/pay", Origin: "stranger", Reason: "not_in_white_list"}},
		{"no origin", httpReq{method: "POST", path: "/pay", headers: map[string]string{"x-user": "u"}},
			typev3.StatusCode_Forbidden, body{Blocked: "authority", Rule: 0, Resource: "POST:/pay", Reason: "missing_origin"}},
		{"black listed", httpReq{method: "GET", path: "/admin", headers: map[string]string{"x-origin": "intruder"}},
			typev3.StatusCode_Forbidden, body{Blocked: "authority", Rule: 1, Resource: "GET:/admin", Origin: "intruder", Reason: "in_black_list"}},
		{"black list lets others in", httpReq{method: "GET", path: "/admin", headers: map[string]string{"x-origin": "ops"}}, 0, body{}},
		// The blocks above spent nothing: the one token is still there.
		{"listed origin by principal", httpReq{method: "POST", path: "/pay", principal: "checkout", headers: map[string]string{"x-origin": "stranger", "x-user": "u"}}, 0, body{}},
		{"token spent", httpReq{method: "POST", path: "/pay", headers: map[string]string{"x-origin": "checkout", "x-user": "u"}},
			typev3.StatusCode_TooManyRequests, body{Blocked: "param_flow", Resource: "POST:/pay", Origin: "checkout", Param: "user", Value: "u", Reason: "qps"}},
	}
	for _, tt := range tests {
		resp, err := r.auth.Check(ctx(t), tt.req.build())
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.wantHTTP == 0 {
			if resp.GetStatus().GetCode() != int32(codes.OK) {
				t.Errorf("%s: %v, want OK", tt.name, resp)
			}
			continue
		}
		dr := resp.GetDeniedResponse()
		if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) || dr.GetStatus().GetCode() != tt.wantHTTP {
			t.Errorf("%s: status %v HTTP %v, want PERMISSION_DENIED %v", tt.name, resp.GetStatus(), dr.GetStatus(), tt.wantHTTP)
			continue
		}
		if got := decodeBody(t, dr.GetBody()); got != tt.want {
			t.Errorf("%s: body %+v, want %+v", tt.name, got, tt.want)
		}
		if tt.wantHTTP == typev3.StatusCode_Forbidden {
			h := headers(t, dr.GetHeaders())
			if h[HeaderContentType] != "application/json" || h[HeaderRetryAfter] != "" {
				t.Errorf("%s: headers %v, want content-type only", tt.name, h)
			}
			if got, want := r.rec.last(), (decision{policy.APICheck, "", tt.want.Resource, policy.Authority}); got != want {
				t.Errorf("%s: recorded %+v, want %+v", tt.name, got, want)
			}
		}
	}
}

// TestCheckShadow: a shadow rule that would block is logged and recorded, and the answer is OK.
func TestCheckShadow(t *testing.T) {
	rule := oneToken("all", "user")
	rule.Shadow = true
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{Resource: "all",
			Params: map[string]descriptors.Source{"user": {From: "header", Name: "x-user"}}}},
		paramFlow: []hotparam.Rule{rule},
	})
	req := httpReq{headers: map[string]string{"x-user": "u9"}}
	for i, want := range []policy.Outcome{policy.Allowed, policy.Shadow, policy.Shadow} {
		resp, err := r.auth.Check(ctx(t), req.build())
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil {
			t.Fatalf("request %d: %v, want OK", i, resp)
		}
		if got := r.rec.last().result; got != want {
			t.Errorf("request %d: recorded %q, want %q", i, got, want)
		}
	}
}

func TestCheckMalformed(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Params: map[string]descriptors.Source{"user": {From: "header", Name: "x-user", Split: ","}},
		}},
		paramFlow: []hotparam.Rule{oneToken("GET:/", "user")},
	})
	tests := []struct {
		name     string
		req      *authv3.CheckRequest
		wantCode codes.Code        // gRPC error code; OK means an answer
		wantHTTP typev3.StatusCode // of the answer
	}{
		{"empty request", &authv3.CheckRequest{}, codes.OK, typev3.StatusCode_BadRequest},
		{"no request attributes", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{}}, codes.OK, typev3.StatusCode_BadRequest},
		{"no http", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}}, codes.OK, typev3.StatusCode_BadRequest},
		{"value too long", httpReq{method: "GET", path: "/", headers: map[string]string{"x-user": strings.Repeat("u", descriptors.MaxLen+1)}}.build(),
			codes.OK, typev3.StatusCode_BadRequest},
		{"too many values", httpReq{method: "GET", path: "/", headers: map[string]string{"x-user": strings.Repeat("u,", 5000)}}.build(),
			codes.OK, typev3.StatusCode_BadRequest},
		{"path too long", httpReq{method: "GET", path: "/" + strings.Repeat("p", descriptors.MaxLen)}.build(),
			codes.OK, typev3.StatusCode_BadRequest},
	}
	for _, tt := range tests {
		resp, err := r.auth.Check(ctx(t), tt.req)
		if got := status.Code(err); got != tt.wantCode {
			t.Errorf("%s: error %v, want code %v", tt.name, err, tt.wantCode)
			continue
		}
		if got, want := r.rec.last(), (decision{policy.APICheck, "", "", policy.Invalid}); got != want {
			t.Errorf("%s: recorded %+v, want %+v", tt.name, got, want)
		}
		if err != nil {
			continue
		}
		dr := resp.GetDeniedResponse()
		if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) || dr.GetStatus().GetCode() != tt.wantHTTP {
			t.Errorf("%s: %v, want denied %v", tt.name, resp, tt.wantHTTP)
		}
		if b := decodeBody(t, dr.GetBody()); !strings.Contains(b.Error, "too") && !strings.Contains(b.Error, "no HTTP") {
			t.Errorf("%s: body %q, want an error naming the problem", tt.name, dr.GetBody())
		}
	}
	// The handler itself survives a nil request, and refuses it.
	if resp, err := r.srv.Check(ctx(t), nil); err != nil || resp.GetDeniedResponse().GetStatus().GetCode() != typev3.StatusCode_BadRequest {
		t.Errorf("Check(nil) = %v, %v; want a 400", resp, err)
	}
}

func TestCheckNoRules(t *testing.T) {
	r := newRig(t, rigConfig{noRules: true})
	resp, err := r.auth.Check(ctx(t), httpReq{method: "GET", path: "/"}.build())
	if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Errorf("Check with no rule set = %v, %v; want OK", resp, err)
	}
}

// TestCheckSkipsConcurrency: ext_authz has no completion signal, so concurrency rules are left
// out of Check; the same rule limits the rate-limit path.
func TestCheckSkipsConcurrency(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{Resource: "c",
			Params: map[string]descriptors.Source{"k": {From: "header", Name: "x-k"}}}},
		paramFlow: []hotparam.Rule{{Resource: "c", Param: "k", Grade: hotparam.Concurrency, Count: 1}},
	})
	req := httpReq{headers: map[string]string{"x-k": "v"}}.build()
	for i := range 3 {
		resp, err := r.auth.Check(ctx(t), req)
		if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
			t.Fatalf("check %d: %v, %v; want OK", i, resp, err)
		}
		if h := resp.GetOkResponse(); len(h.GetHeaders())+len(h.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("check %d: headers %v, want none (no rule applied)", i, h)
		}
	}
	for i, want := range []bool{true, false} {
		resp, err := r.rls.ShouldRateLimit(ctx(t), rlReq("d", desc("resource", "c", "k", "v")))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetOverallCode() == ok; got != want {
			t.Errorf("ratelimit %d: %v, want OK %v", i, resp.GetOverallCode(), want)
		}
	}
}
