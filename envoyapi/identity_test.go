package envoyapi

import (
	"reflect"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/hotparam"
)

// TestCheckIdentityMetadata: an allowed Check carries the resolved resource, origin and the
// params the resource's rules read as dynamic metadata, sensitive ones hashed, and removes the
// origin's header before the upstream.
func TestCheckIdentityMetadata(t *testing.T) {
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Resource: "{method}:{path}",
			Origin:   []descriptors.Source{{From: "principal"}, {From: "header", Name: "X-Origin"}},
			Params: map[string]descriptors.Source{
				"user":    {From: "header", Name: "x-user"},
				"tags":    {From: "header", Name: "x-tags", Split: ","},
				"api_key": {From: "header", Name: "x-api-key"},
				"unread":  {From: "header", Name: "x-unread"},
			},
			RemoveHeaders: []string{"X-Debug"},
		}},
		authority: []authority.Rule{{Resource: "GET:/a", Strategy: authority.White, Origins: []string{"web"}}},
		paramFlow: []hotparam.Rule{oneToken("GET:/a", "user"), oneToken("GET:/a", "tags"), oneToken("GET:/a", "api_key"), oneToken("GET:/b", "unread")},
	})
	r.srv.redactFn = func(param, value string) string {
		if param == "api_key" {
			return "hmac:" + value[:1]
		}
		return value
	}
	resp, err := r.auth.Check(ctx(t), httpReq{method: "GET", path: "/a", headers: map[string]string{
		"x-origin": "web", "x-user": "alice", "x-tags": "t1, t2", "x-api-key": "secret", "x-unread": "u",
	}}.build())
	if err != nil {
		t.Fatal(err)
	}
	ok := resp.GetOkResponse()
	if ok == nil {
		t.Fatalf("answer %v, want OK", resp)
	}
	got := decoded(t, resp).GetDynamicMetadata().AsMap()
	want := map[string]any{
		"resource": "GET:/a", "origin": "web", "user": "alice", "tags": []any{"t1", "t2"}, "api_key": "hmac:s",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dynamic metadata = %v, want %v", got, want)
	}
	if rm := ok.GetHeadersToRemove(); !reflect.DeepEqual(rm, []string{"x-debug", "x-origin"}) {
		t.Errorf("headers_to_remove = %q, want [x-debug x-origin]", rm)
	}

	// No origin: the key is left out; a refused Check carries no metadata.
	resp, err = r.auth.Check(ctx(t), httpReq{method: "GET", path: "/c"}.build())
	if err != nil {
		t.Fatal(err)
	}
	if got := decoded(t, resp).GetDynamicMetadata().AsMap(); !reflect.DeepEqual(got, map[string]any{"resource": "GET:/c"}) {
		t.Errorf("no origin, no rules: metadata = %v, want only the resource", got)
	}
	resp, err = r.auth.Check(ctx(t), httpReq{method: "GET", path: "/a", headers: map[string]string{"x-origin": "stranger"}}.build())
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDeniedResponse() == nil || decoded(t, resp).GetDynamicMetadata() != nil {
		t.Errorf("a refused Check: %v, want a denial without metadata", resp)
	}
}

// TestKeepOriginHeaders: with keep_origin_headers the origin's header reaches the upstream.
func TestKeepOriginHeaders(t *testing.T) {
	r := newRig(t, rigConfig{mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
		Origin: []descriptors.Source{{From: "header", Name: "x-origin"}}, KeepOriginHeaders: true,
	}}})
	resp, err := r.auth.Check(ctx(t), httpReq{method: "GET", path: "/a", headers: map[string]string{"x-origin": "web"}}.build())
	if err != nil {
		t.Fatal(err)
	}
	if rm := resp.GetOkResponse().GetHeadersToRemove(); len(rm) != 0 {
		t.Errorf("headers_to_remove = %q, want none", rm)
	}
}

// decoded is resp as Envoy reads it: encoded by the service's codec, decoded again.
func decoded(t *testing.T, resp *authv3.CheckResponse) *authv3.CheckResponse {
	t.Helper()
	bs, err := wire.NewCodec().Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	out := &authv3.CheckResponse{}
	if err := proto.Unmarshal(bs.Materialize(), out); err != nil {
		t.Fatalf("the answer does not decode: %v", err)
	}
	return out
}

// TestIdentityEncoding: the hand-written encoding decodes to what structpb would have made,
// for strings of any length, lists, and bytes that are not UTF-8 (written as U+FFFD, so that
// the answer stays one Envoy decodes; Go's decoder checks UTF-8 as Envoy's does).
func TestIdentityEncoding(t *testing.T) {
	long := strings.Repeat("x", 300)
	r := newRig(t, rigConfig{
		mapping: descriptors.Config{Authz: descriptors.AuthzConfig{
			Resource: "all",
			Origin:   []descriptors.Source{{From: "header", Name: "x-origin"}},
			Params: map[string]descriptors.Source{
				"a": {From: "header", Name: "x-a"},
				"b": {From: "header", Name: "x-b", Split: ","},
				"c": {From: "query", Name: "c"},
			},
		}},
		paramFlow: []hotparam.Rule{{Resource: "all", Param: "a", Count: 100, Duration: 3600e9}, {Resource: "all", Param: "b", Count: 100, Duration: 3600e9}, {Resource: "all", Param: "c", Count: 100, Duration: 3600e9}},
	})
	resp, err := r.auth.Check(ctx(t), httpReq{method: "GET", path: "/x?c=%FFz", headers: map[string]string{
		"x-origin": long, "x-a": "", "x-b": "1," + long + ",3",
	}}.build())
	if err != nil {
		t.Fatal(err)
	}
	got := decoded(t, resp).GetDynamicMetadata()
	want, err := structpb.NewStruct(map[string]any{"resource": "all", "origin": long, "b": []any{"1", long, "3"}, "c": "\uFFFDz"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("metadata = %v, want %v", got, want)
	}
}
