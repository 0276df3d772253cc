package descriptors

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/hotparam"
)

// req describes a check request briefly.
type req struct {
	method, path, host string
	headers            map[string]string
	raw                [][2]string // raw header map (encode_raw_headers)
	addr, principal    string
	ext                map[string]string
}

func (r req) build() *authv3.CheckRequest {
	h := &authv3.AttributeContext_HttpRequest{Method: r.method, Path: r.path, Host: r.host, Headers: r.headers}
	if r.raw != nil {
		h.HeaderMap = &corev3.HeaderMap{}
		for _, kv := range r.raw {
			h.HeaderMap.Headers = append(h.HeaderMap.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
		}
	}
	src := &authv3.AttributeContext_Peer{Principal: r.principal}
	if r.addr != "" {
		src.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: r.addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 5555}},
		}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:            src,
		Request:           &authv3.AttributeContext_Request{Http: h},
		ContextExtensions: r.ext,
	}}
}

func p(name string, values ...string) hotparam.Param {
	return hotparam.Param{Name: name, Values: values}
}

func TestCheck(t *testing.T) {
	full := Config{Authz: AuthzConfig{
		Origin: []Source{{From: "principal"}, {From: "header", Name: "X-Origin"}, {From: "client_ip"}},
		Params: map[string]Source{
			"item_id": {From: "query", Name: "itemId"},
			"user":    {From: "header", Name: "x-user-id", Split: ","},
			"ip":      {From: "client_ip"},
		},
	}}
	one := func(s Source) Config { return Config{Authz: AuthzConfig{Params: map[string]Source{"v": s}}} }
	hops := func(n int) Config {
		return Config{Authz: AuthzConfig{TrustedHops: n, Params: map[string]Source{"ip": {From: "client_ip"}}}}
	}
	tests := []struct {
		name string
		cfg  Config
		req  req
		want Entry
	}{
		{"template and every default", full,
			req{method: "POST", path: "/order?itemId=42&x=1", addr: "10.0.0.7", principal: "spiffe://a/b",
				headers: map[string]string{"x-user-id": "u1, u2,,u3", "x-origin": "svcA"}},
			Entry{Entry: hotparam.Entry{Resource: "POST:/order", Params: []hotparam.Param{
				p("ip", "10.0.0.7"), p("item_id", "42"), p("user", "u1", "u2", "u3")}}, Origin: "spiffe://a/b"}},
		{"origin falls to header, absent params left out", full,
			req{method: "GET", path: "/hello", headers: map[string]string{"x-origin": "svcA"}},
			Entry{Entry: hotparam.Entry{Resource: "GET:/hello"}, Origin: "svcA"}},
		{"origin falls to client ip", full,
			req{method: "GET", path: "/hello", addr: "192.0.2.1"},
			Entry{Entry: hotparam.Entry{Resource: "GET:/hello", Params: []hotparam.Param{p("ip", "192.0.2.1")}}, Origin: "192.0.2.1"}},
		{"no origin at all", full, req{method: "GET", path: "/"}, Entry{Entry: hotparam.Entry{Resource: "GET:/"}}},
		{"context extension names the resource", full,
			req{method: "GET", path: "/x", ext: map[string]string{"resource": "orders"}},
			Entry{Entry: hotparam.Entry{Resource: "orders"}}},
		{"empty context extension falls back to the template", full,
			req{method: "GET", path: "/x", ext: map[string]string{"resource": ""}},
			Entry{Entry: hotparam.Entry{Resource: "GET:/x"}}},
		{"host template", Config{Authz: AuthzConfig{Resource: "{host}{path}"}},
			req{method: "GET", host: "api.example.com", path: "/a/b?c=d#f"}, Entry{Entry: hotparam.Entry{Resource: "api.example.com/a/b"}}},
		{"literal template", Config{Authz: AuthzConfig{Resource: "all"}}, req{method: "GET", path: "/a"}, Entry{Entry: hotparam.Entry{Resource: "all"}}},
		{"header case-insensitive config", one(Source{From: "header", Name: "X-Tenant"}),
			req{headers: map[string]string{"x-tenant": "t1"}}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "t1")}}}},
		{"header mixed-case key in the map", one(Source{From: "header", Name: "x-tenant"}),
			req{headers: map[string]string{"X-Tenant": "t1"}}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "t1")}}}},
		{"repeated header joined, no split", one(Source{From: "header", Name: "x-a"}),
			req{headers: map[string]string{"x-a": "1,2"}}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "1,2")}}}},
		{"raw header map, repeated, split", one(Source{From: "header", Name: "x-a", Split: ","}),
			req{raw: [][2]string{{"X-A", "1"}, {"other", "z"}, {"x-a", "2,3"}}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "1", "2", "3")}}}},
		{"empty header absent", one(Source{From: "header", Name: "x-a"}),
			req{headers: map[string]string{"x-a": ""}}, Entry{Entry: hotparam.Entry{Resource: ":"}}},
		{"query repeated and escaped", one(Source{From: "query", Name: "id"}),
			req{path: "/p?id=1&id=a%20b&i%64=3&idx=9&id=&id=x+y#id=frag"},
			Entry{Entry: hotparam.Entry{Resource: ":/p", Params: []hotparam.Param{p("v", "1", "a b", "3", "x y")}}}},
		{"query bad escape kept raw", one(Source{From: "query", Name: "id"}),
			req{path: "/p?id=%zz"}, Entry{Entry: hotparam.Entry{Resource: ":/p", Params: []hotparam.Param{p("v", "%zz")}}}},
		{"query with split", one(Source{From: "query", Name: "ids", Split: ","}),
			req{path: "/p?ids=a,b"}, Entry{Entry: hotparam.Entry{Resource: ":/p", Params: []hotparam.Param{p("v", "a", "b")}}}},
		{"no query", one(Source{From: "query", Name: "id"}), req{path: "/p"}, Entry{Entry: hotparam.Entry{Resource: ":/p"}}},
		{"cookie", one(Source{From: "cookie", Name: "sid"}),
			req{headers: map[string]string{"cookie": "a=1; sid=\"abc\";SID=no; sid=def; broken"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "abc", "def")}}}},
		{"no cookie", one(Source{From: "cookie", Name: "sid"}),
			req{headers: map[string]string{"cookie": "a=1"}}, Entry{Entry: hotparam.Entry{Resource: ":"}}},
		{"host", one(Source{From: "host"}), req{host: "h:8080"}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "h:8080")}}}},
		{"method", one(Source{From: "method"}), req{method: "PUT"}, Entry{Entry: hotparam.Entry{Resource: "PUT:", Params: []hotparam.Param{p("v", "PUT")}}}},
		{"path without query", one(Source{From: "path"}), req{path: "/a?b"}, Entry{Entry: hotparam.Entry{Resource: ":/a", Params: []hotparam.Param{p("v", "/a")}}}},
		{"principal", one(Source{From: "principal"}), req{principal: "spiffe://x"}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "spiffe://x")}}}},
		{"context extension", one(Source{From: "context_extension", Name: "tenant"}),
			req{ext: map[string]string{"tenant": "acme"}}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("v", "acme")}}}},
		// The x-forwarded-for the service sees is Envoy's: the one Envoy received with the peer
		// (10.0.0.1) appended; trusted_hops N picks what xff_num_trusted_hops N makes Envoy pick
		// (ConnectionManagerUtility::mutateRequestHeaders, Utility::getLastAddressFromXFF).
		{"client ip, no hops: the peer, never xff", hops(0),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "1.1.1.1,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "10.0.0.1")}}}},
		{"client ip, one hop: the last entry Envoy received", hops(1),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "6.6.6.6, 1.1.1.1,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "1.1.1.1")}}}},
		{"client ip, two hops", hops(2),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "6.6.6.6,2001:db8::1 , 1.1.1.1,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "2001:db8::1")}}}},
		{"client ip, fewer entries than hops", hops(2),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "1.1.1.1,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "10.0.0.1")}}}},
		{"client ip, xff entry not an IP", hops(1),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "evil,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "10.0.0.1")}}}},
		{"client ip, xff entry with a zone", hops(1),
			req{addr: "10.0.0.1", headers: map[string]string{"x-forwarded-for": "fe80::1%eth0,10.0.0.1"}},
			Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "10.0.0.1")}}}},
		{"client ip, no xff", hops(1), req{addr: "10.0.0.1"}, Entry{Entry: hotparam.Entry{Resource: ":", Params: []hotparam.Param{p("ip", "10.0.0.1")}}}},
		{"client ip, no address", hops(0), req{}, Entry{Entry: hotparam.Entry{Resource: ":"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			got, err := m.Check(tt.req.build())
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if len(got.Params) == 0 {
				got.Params = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Check =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestCheckErrors(t *testing.T) {
	m, err := New(Config{Authz: AuthzConfig{
		Origin: []Source{{From: "header", Name: "x-origin"}},
		Params: map[string]Source{"user": {From: "header", Name: "x-user", Split: ","}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", MaxLen+1)
	tests := []struct {
		name   string
		req    *authv3.CheckRequest
		field  string
		reason error
	}{
		{"nil request", nil, "attributes.request.http", ErrNoAttributes},
		{"nil attributes", &authv3.CheckRequest{}, "attributes.request.http", ErrNoAttributes},
		{"nil http", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}},
			"attributes.request.http", ErrNoAttributes},
		{"resource too long", req{method: "GET", path: "/" + long}.build(), "resource", ErrValueTooLong},
		{"origin too long", req{headers: map[string]string{"x-origin": long}}.build(), "origin", ErrValueTooLong},
		{"value too long", req{headers: map[string]string{"x-user": "a," + long}}.build(), "params.user", ErrValueTooLong},
		{"too many values", req{headers: map[string]string{"x-user": strings.Repeat("u,", 10000)}}.build(), "params.user", ErrTooManyValues},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Check(tt.req)
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("Check error = %v, want a *RequestError", err)
			}
			if re.Field != tt.field || !errors.Is(err, tt.reason) {
				t.Errorf("error = %q (field %q), want field %q reason %v", err, re.Field, tt.field, tt.reason)
			}
			if got, want := ClientFault(err), tt.reason == ErrValueTooLong || tt.reason == ErrTooManyValues; got != want {
				t.Errorf("ClientFault = %v, want %v", got, want)
			}
		})
	}
	// Exactly MaxValues values pass.
	e, err := m.Check(req{headers: map[string]string{"x-user": strings.Repeat("u,", MaxValues)}}.build())
	if err != nil || len(e.Params) != 1 || len(e.Params[0].Values) != MaxValues {
		t.Errorf("Check with %d values = %+v, %v; want them all", MaxValues, e, err)
	}
}

// TestCheckIntoReuse maps different requests into one Entry: nothing of an earlier request
// may show through.
func TestCheckIntoReuse(t *testing.T) {
	m, err := New(Config{Authz: AuthzConfig{Params: map[string]Source{
		"a": {From: "header", Name: "x-a", Split: ","}, "b": {From: "header", Name: "x-b"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	steps := []struct {
		headers map[string]string
		want    []hotparam.Param
	}{
		{map[string]string{"x-a": "1,2,3", "x-b": "b"}, []hotparam.Param{p("a", "1", "2", "3"), p("b", "b")}},
		{map[string]string{"x-b": "c"}, []hotparam.Param{p("b", "c")}},
		{map[string]string{"x-a": "9"}, []hotparam.Param{p("a", "9")}},
		{nil, nil},
		{map[string]string{"x-a": "4,5", "x-b": "d"}, []hotparam.Param{p("a", "4", "5"), p("b", "d")}},
	}
	for i, s := range steps {
		if err := m.CheckInto(&e, req{method: "GET", path: "/", headers: s.headers}.build()); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := e.Params
		if len(got) == 0 {
			got = nil
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("step %d: params = %v, want %v", i, got, s.want)
		}
	}
}

func BenchmarkCheckInto(b *testing.B) {
	m, err := New(Config{Authz: AuthzConfig{
		Origin: []Source{{From: "principal"}, {From: "header", Name: "x-origin"}},
		Params: map[string]Source{
			"item_id": {From: "query", Name: "itemId"},
			"user":    {From: "header", Name: "x-user-id", Split: ","},
			"ip":      {From: "client_ip"},
		},
	}})
	if err != nil {
		b.Fatal(err)
	}
	r := req{method: "POST", path: "/order?itemId=42", addr: "10.0.0.7",
		headers: map[string]string{"x-user-id": "u1,u2", "x-origin": "svcA", "accept": "*/*", "user-agent": "bench"}}.build()
	var e Entry
	b.ReportAllocs()
	for b.Loop() {
		if err := m.CheckInto(&e, r); err != nil {
			b.Fatal(err)
		}
	}
}
