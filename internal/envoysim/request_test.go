package envoysim

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// checkRequestCase is the request of TestCheckRequest (TestRealCheckRequest sends it through
// Envoy).
func checkRequestCase() Request {
	return Request{
		Method:  "GET",
		Path:    "/items?item_id=9",
		Host:    "api.example",
		Headers: map[string][]string{"X-Origin": {"web"}, "accept": {"a", "b"}, "x-request-id": {"rid-1"}},
		Remote:  netip.MustParseAddrPort("[::ffff:10.0.0.9]:1234"),
	}
}

func TestCheckRequest(t *testing.T) {
	c, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	r := checkRequestCase()
	r.Principal = "spiffe://example/web"
	route := c.Route("items")
	if route == nil {
		t.Fatal(`no route "items"`)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cr, err := CheckRequest(route, r, now)
	if err != nil {
		t.Fatal(err)
	}
	a := cr.GetAttributes()
	wantHeaders := map[string]string{
		":method": "GET", ":path": "/items?item_id=9", ":authority": "api.example", ":scheme": "http",
		"x-origin": "web", "accept": "a,b", "x-request-id": "rid-1",
	}
	if got := a.GetRequest().GetHttp().GetHeaders(); !reflect.DeepEqual(got, wantHeaders) {
		t.Errorf("headers = %v, want %v", got, wantHeaders)
	}
	if got := a.GetRequest().GetHttp().GetPath(); got != "/items?item_id=9" {
		t.Errorf("path = %q, want the path with its query", got)
	}
	if got := a.GetRequest().GetHttp().GetId(); got == "" || got == "rid-1" {
		t.Errorf("id = %q, want a stream id", got)
	}
	// A mapped peer stays mapped, as Envoy reports one a PROXY header gives.
	if got := a.GetSource().GetAddress().GetSocketAddress(); got.GetAddress() != "::ffff:10.0.0.9" || got.GetPortValue() != 1234 {
		t.Errorf("source = %v, want [::ffff:10.0.0.9]:1234", got)
	}
	if got := a.GetSource().GetPrincipal(); got != "spiffe://example/web" {
		t.Errorf("principal = %q", got)
	}
	if got := a.GetContextExtensions(); !reflect.DeepEqual(got, map[string]string{"resource": "GET:/items"}) {
		t.Errorf("context_extensions = %v, want resource GET:/items", got)
	}
	if got := a.GetRequest().GetTime().AsTime(); !got.Equal(now) {
		t.Errorf("time = %v, want %v", got, now)
	}
	// No route: no context extensions, the rest as before.
	cr, err = CheckRequest(nil, r, now)
	if err != nil || cr.GetAttributes().GetContextExtensions() != nil {
		t.Errorf("CheckRequest(nil route) = %v, %v; want no context extensions", cr.GetAttributes().GetContextExtensions(), err)
	}
}

// matchYAML is the route table of TestMatch (TestRealMatch serves it in Envoy).
const matchYAML = `
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 0.0.0.0, port_value: 1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: s
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
          route_config:
            virtual_hosts:
            - name: any
              domains: ["*"]
              routes:
              - {name: exact, match: {path: /a}, route: {cluster: c}}
              - {name: sep, match: {path_separated_prefix: /b}, route: {cluster: c}}
              - {name: re, match: {safe_regex: {regex: "/c/[0-9]+"}}, route: {cluster: c}}
              - {name: nocase, match: {prefix: /D, case_sensitive: false}, route: {cluster: c}}
              - {name: hdr, match: {prefix: /e, headers: [{name: x-k, present_match: true}]}, route: {cluster: c}}
              - {name: inv, match: {prefix: /f, headers: [{name: x-k, string_match: {exact: v}, invert_match: true}]}, route: {cluster: c}}
            - name: special
              domains: ["special.example"]
              routes:
              - {name: special, match: {prefix: /}, route: {cluster: c}}
  clusters:
  - name: c
    load_assignment: {cluster_name: c}
`

// matchCases are requests and the route TestMatch's table selects for each ("" none).
var matchCases = []struct {
	host, path string
	headers    map[string][]string
	want       string
}{
	{"x", "/a?q=1", nil, "exact"},
	{"x", "/a/", nil, ""},
	{"x", "/b", nil, "sep"},
	{"x", "/b/x", nil, "sep"},
	{"x", "/bx", nil, ""},
	{"x", "/c/12", nil, "re"},
	{"x", "/c/12x", nil, ""},
	{"x", "/d/any", nil, "nocase"},
	{"x", "/e", nil, ""},
	{"x", "/e", map[string][]string{"x-k": {""}}, "hdr"},
	{"x", "/f", map[string][]string{"x-k": {"w"}}, "inv"},
	{"x", "/f", map[string][]string{"x-k": {"v"}}, ""},
	{"x", "/f", nil, ""}, // a missing header does not match, inverted or not
	{"special.example", "/a", nil, "special"},
	{"Special.Example", "/a", nil, "special"},
	{"special.example:8080", "/a", nil, "exact"}, // the port is part of the host Envoy matches
}

func TestMatch(t *testing.T) {
	c, err := Parse("vh.yaml", []byte(matchYAML))
	if err != nil {
		t.Fatal(err)
	}
	tests := matchCases
	for _, tt := range tests {
		r, err := c.Match(Request{Method: "GET", Host: tt.host, Path: tt.path, Headers: tt.headers})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.GetName(); got != tt.want {
			t.Errorf("Match(%s %s %v) = %q, want %q", tt.host, tt.path, tt.headers, got, tt.want)
		}
	}
}
