package envoysim

import (
	"errors"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// catchAll adds a last route taking every path to the upstream, so that what the connection
// manager made of any path reaches it.
func catchAll(m *hcmv3.HttpConnectionManager) {
	vh := m.GetRouteConfig().GetVirtualHosts()[0]
	vh.Routes = append(vh.Routes, &routev3.Route{Name: "any",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "upstream"}}}})
}

// pathAnswer is what became of a path: the path the upstream got, or Envoy's own status.
func (e *real) pathAnswer(r Request) (realAns, emuAns string) {
	e.t.Helper()
	s := e.send(r, nil, nil)
	switch {
	case s.err != nil:
		realAns = "no answer: " + s.err.Error()
	case s.upstream != nil:
		realAns = s.upstream.Path
	default:
		realAns = fmt.Sprint(s.status)
	}
	st, err := e.conf.Accept(r)
	var lr *LocalReply
	switch {
	case errors.As(err, &lr):
		emuAns = fmt.Sprint(lr.Code)
	case err != nil:
		emuAns = "refused: " + err.Error()
	case st.Route == nil:
		emuAns = "404"
	default:
		emuAns = st.Request.Path
	}
	return realAns, emuAns
}

// TestRealPaths runs the path cases of TestCanonicalPath, TestAcceptPaths and the merged-slash
// cases through Envoy: the path the upstream receives (or Envoy's status) is what Accept makes of
// it.
func TestRealPaths(t *testing.T) {
	e := startReal(t,
		withListener("canonical", func(m *hcmv3.HttpConnectionManager) {
			m.MergeSlashes = false
			m.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
			catchAll(m)
		}),
		withListener("merge", func(m *hcmv3.HttpConnectionManager) {
			m.NormalizePath = wrapperspb.Bool(false)
			m.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
			catchAll(m)
		}),
		withListener("unescape", func(m *hcmv3.HttpConnectionManager) {
			m.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
			catchAll(m)
		}))
	run := func(listener, path, protocol string) {
		t.Helper()
		r := external("GET", path)
		r.Protocol = protocol
		got, want := e.at(listener).pathAnswer(r)
		if got != want {
			t.Errorf("%s %s %q: Envoy %q, emulation %q", listener, protocol, path, got, want)
		} else {
			t.Logf("%s %s %q: %q", listener, protocol, path, got)
		}
	}
	for in := range canonicalCases {
		run("canonical", in, "")
	}
	for _, in := range canonicalInvalid {
		run("canonical", in, "")
	}
	for in := range mergeCases {
		run("merge", in, "")
	}
	for in := range acceptPathCases {
		run("ingress", in, "")
	}
	for _, in := range acceptPathRejected {
		run("ingress", in, "")
	}
	run("ingress", "/items", "HTTP/1.0")
	run("ingress", "/items?next=%2Fhome", "")
	run("unescape", "/a%2Fb", "")
}

// TestRealMatch serves TestMatch's route table in Envoy (every route answering with its name in
// x-route) and sends its cases: the route Envoy picks is the one Match picks.
func TestRealMatch(t *testing.T) {
	mc, err := Parse("vh.yaml", []byte(matchYAML))
	if err != nil {
		t.Fatal(err)
	}
	rc := proto.Clone(mc.Managers[0].GetRouteConfig()).(*routev3.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			r.GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: "upstream"}
			r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, &corev3.HeaderValueOption{
				Header: &corev3.HeaderValue{Key: "x-route", Value: r.GetName()}})
		}
	}
	e := startReal(t, withListener("match", func(m *hcmv3.HttpConnectionManager) {
		m.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
	})).at("match")
	for _, tt := range matchCases {
		r := Request{Method: "GET", Host: tt.host, Path: tt.path, Headers: tt.headers, Remote: localAddr}
		s := e.send(r, nil, nil)
		got := s.header.Get("x-route")
		if got == "" && s.status != 404 {
			got = fmt.Sprintf("status %d", s.status)
		}
		st, err := e.conf.Accept(r)
		if err != nil {
			t.Fatal(err)
		}
		if emu := st.Route.GetName(); got != emu || got != tt.want {
			t.Errorf("%s %s %v: Envoy %q, emulation %q, the case %q", tt.host, tt.path, tt.headers, got, emu, tt.want)
		}
	}
}
