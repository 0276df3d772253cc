package descriptors

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// withMetadata is a check request for GET /x whose metadata_context holds ns -> fields.
func withMetadata(t *testing.T, header map[string]string, ns map[string]map[string]any) *authv3.CheckRequest {
	t.Helper()
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for name, fields := range ns {
		st, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		md.FilterMetadata[name] = st
	}
	r := req{method: "GET", path: "/x", headers: header}.build()
	r.Attributes.MetadataContext = md
	return r
}

func TestMetadataSource(t *testing.T) {
	const jwt = "envoy.filters.http.jwt_authn"
	cfg := Config{Authz: AuthzConfig{
		Origin: []Source{
			{From: "metadata", Namespace: jwt, Path: []string{"payload", "sub"}},
			{From: "header", Name: "x-origin"},
		},
		Params: map[string]Source{
			"tenant": {From: "metadata", Namespace: jwt, Path: []string{"payload", "tenant"}},
			"groups": {From: "metadata", Namespace: jwt, Path: []string{"payload", "groups"}, Split: ","},
		},
	}}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	payload := func(p map[string]any) map[string]map[string]any {
		return map[string]map[string]any{jwt: {"payload": p}}
	}
	for _, tc := range []struct {
		name       string
		md         map[string]map[string]any
		wantOrigin string
		wantParams string
	}{
		{"verified claims", payload(map[string]any{"sub": "alice", "tenant": "acme", "groups": "a, b"}), "alice", "groups=a|b tenant=acme"},
		{"no metadata: the next origin source", nil, "header-origin", ""},
		{"another namespace only", map[string]map[string]any{"other": {"payload": map[string]any{"sub": "mallory"}}}, "header-origin", ""},
		{"missing key", payload(map[string]any{"tenant": "acme"}), "header-origin", "tenant=acme"},
		{"a number is no value", payload(map[string]any{"sub": 42.0, "tenant": true}), "header-origin", ""},
		{"a struct is no value", payload(map[string]any{"sub": map[string]any{"x": "y"}}), "header-origin", ""},
		{"a list is no value", payload(map[string]any{"sub": []any{"alice"}}), "header-origin", ""},
		{"path through a string", map[string]map[string]any{jwt: {"payload": "sub"}}, "header-origin", ""},
		{"empty string", payload(map[string]any{"sub": ""}), "header-origin", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := m.Check(withMetadata(t, map[string]string{"x-origin": "header-origin"}, tc.md))
			if err != nil {
				t.Fatal(err)
			}
			if e.Origin != tc.wantOrigin {
				t.Errorf("origin = %q, want %q", e.Origin, tc.wantOrigin)
			}
			var got []string
			for _, p := range e.Params {
				got = append(got, p.Name+"="+strings.Join(p.Values, "|"))
			}
			if g := strings.Join(got, " "); g != tc.wantParams {
				t.Errorf("params = %q, want %q", g, tc.wantParams)
			}
		})
	}
}

func TestMetadataSourceOverLimit(t *testing.T) {
	m, err := New(Config{Authz: AuthzConfig{Origin: []Source{{From: "metadata", Namespace: "ns", Path: []string{"k"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Check(withMetadata(t, nil, map[string]map[string]any{"ns": {"k": strings.Repeat("x", MaxLen+1)}}))
	if err == nil || !strings.Contains(err.Error(), "origin: value too long") {
		t.Errorf("an origin over MaxLen from metadata: err = %v, want value too long", err)
	}
}

func TestMetadataSourceErrors(t *testing.T) {
	long := make([]string, MaxMetadataPath+1)
	for i := range long {
		long[i] = "k"
	}
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{From: "metadata", Path: []string{"sub"}}, "authz.params.v.namespace: required for from: metadata"},
		{Source{From: "metadata", Namespace: "ns"}, "authz.params.v.path: required for from: metadata"},
		{Source{From: "metadata", Namespace: "ns", Path: []string{"a", ""}}, "authz.params.v.path[1]: empty key"},
		{Source{From: "metadata", Namespace: "ns", Path: long}, "authz.params.v.path: more than 16 keys"},
		{Source{From: "metadata", Namespace: "ns", Path: []string{"a"}, Name: "x"}, "authz.params.v.name: not used by from: metadata"},
		{Source{From: "header", Name: "x", Namespace: "ns"}, "authz.params.v.namespace: used only by from: metadata"},
		{Source{From: "query", Name: "x", Path: []string{"a"}}, "authz.params.v.path: used only by from: metadata"},
	} {
		_, err := New(Config{Authz: AuthzConfig{Params: map[string]Source{"v": tc.src}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.src, err, tc.want)
		}
	}
}
