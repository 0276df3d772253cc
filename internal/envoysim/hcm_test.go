package envoysim

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// shipped loads envoy.yaml with deterministic request ids ("rid-1", "rid-2", ...).
func shipped(t *testing.T) *Config {
	t.Helper()
	c, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	c.RequestID = func(Request) string { n++; return "rid-" + strconv.Itoa(n) }
	return c
}

func external(method, path string, kv ...string) Request {
	h := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return Request{Method: method, Path: path, Host: "api.example", Headers: h,
		Remote: netip.MustParseAddrPort("192.0.2.10:5000")}
}

// Cases of PathUtil::canonicalPath and PathUtil::mergeSlashes, each also sent through Envoy by
// TestRealPaths.
var (
	canonicalCases = map[string]string{
		"/xyz": "/xyz", "/x/y/z": "/x/y/z", "/a/b/../c": "/a/c", "/a/b/./c": "/a/b/c",
		"/a/b/../../../../c": "/c", "/a/..\\c": "/c", "/%c0%af": "/%c0%af", "/%5c%25": "/%5c%25",
		"/a/b/%2E%2E/c": "/a/c", "/a/b/%2E./c": "/a/c", "/a/b/%2E/c": "/a/b/c", "/../a/b": "/a/b",
		"/./a/b": "/a/b", "/A/B/C": "/A/B/C", "/a/b/%2e%2e/c": "/a/c", "/a/%2F%2f/c": "/a/%2F%2f/c",
	}
	canonicalInvalid = []string{"/xyz/.%00../abc", "/xyz/%00.%00./abc", "/xyz/AAAAA%%0000/abc"}
	mergeCases       = map[string]string{
		"/a//b/c/": "/a/b/c/", "/a": "/a", "//a/b/c": "/a/b/c",
		"/a/b/c//": "/a/b/c/", "/a///b/c": "/a/b/c", "/a////b/c": "/a/b/c",
	}
	// What the shipped connection manager makes of a path, and paths it refuses with 400.
	acceptPathCases = map[string]string{
		"/items?item_id=1":          "/items?item_id=1",
		"//items?q=a//b":            "/items?q=a//b",
		"/x/../items":               "/items",
		"/it%65ms":                  "/items",
		"/downloads/./a//b?x=../..": "/downloads/a/b?x=../..",
	}
	// Refused: an escaped slash (REJECT_REQUEST), a path that does not normalise, a fragment
	// (anywhere in :path), a path that does not start with a slash (the codec).
	acceptPathRejected = []string{"/admin%2Fusers", "/a%5cb", "/xyz/.%00../abc", "/items#frag",
		"/items?q=a#b", "a/b/../c", "..", ""}
)

// Cases from Envoy's test/common/http/path_utility_test.cc (PathUtilityTest.NormalizeValidPaths,
// NormalizeCasePath, InvalidPaths, MergeSlashes) for PathUtil::canonicalPath and
// PathUtil::mergeSlashes.
func TestCanonicalPath(t *testing.T) {
	for in, want := range canonicalCases {
		if got, ok := canonicalPath(in); !ok || got != want {
			t.Errorf("canonicalPath(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range canonicalInvalid {
		if got, ok := canonicalPath(in); ok {
			t.Errorf("canonicalPath(%q) = %q, want invalid", in, got)
		}
	}
	for in, want := range mergeCases {
		if got := mergeSlashes(in); got != want {
			t.Errorf("mergeSlashes(%q) = %q, want %q", in, got, want)
		}
	}
}

// Cases for Utility::getLastAddressFromXFF (test/common/http/utility_test.cc,
// GetLastAddressFromXFF): entries counted from the right, whitespace trimmed, a bad entry or too
// few entries give no address.
func TestLastAddressFromXFF(t *testing.T) {
	// TestRealTrustedHops sends these through Envoy with xff_num_trusted_hops skip+1.
	for skip, want := range xffSkips {
		if got := lastAddressFromXFF(xffEntries, skip); got.String() != want {
			t.Errorf("skip %d: %v, want %s", skip, got, want)
		}
	}
	for in, want := range xffScoped {
		if got := lastAddressFromXFF(in, 0); got.String() != want {
			t.Errorf("%q: %v, want %s", in, got, want)
		}
	}
	for _, bad := range xffBad {
		if got := lastAddressFromXFF(bad, 0); got.IsValid() {
			t.Errorf("%q: %v, want none", bad, got)
		}
	}
}

var (
	xffEntries = "192.0.2.10, 192.0.2.1 ,10.0.0.1"
	xffSkips   = map[int]string{0: "10.0.0.1", 1: "192.0.2.1", 2: "192.0.2.10", 3: "invalid IP"}
	xffBad     = []string{"", "bad", "1.2.3.4,", "fe80::1%no-such-interface"}
	// A zone names an interface; Envoy writes its index.
	xffScoped = map[string]string{"fe80::1%lo": "fe80::1%" + loIndex(), "fe80::1%7": "fe80::1%7"}
)

// loIndex is the index of the loopback interface, "lo".
func loIndex() string {
	ifc, err := net.InterfaceByName("lo")
	if err != nil {
		return "no lo"
	}
	return strconv.Itoa(ifc.Index)
}

// mutateCase is a request, the connection manager's xff_num_trusted_hops and
// preserve_external_request_id, and what the filters see of it.
type mutateCase struct {
	name       string
	hops       uint32
	preserve   bool
	req        Request
	wantClient string
	want       map[string][]string // headers checked; nil value: absent
}

func mutateCases() []mutateCase {
	return []mutateCase{
		{"no xff: the peer, appended", 0, false, external("GET", "/items"), "192.0.2.10",
			map[string][]string{"x-forwarded-for": {"192.0.2.10"}, "x-envoy-external-address": {"192.0.2.10"},
				"x-forwarded-proto": {"http"}, "x-request-id": {"rid-1"}}},
		{"hops 0 ignores xff, appends the peer", 0, false, external("GET", "/items", "x-forwarded-for", "203.0.113.1"), "192.0.2.10",
			map[string][]string{"x-forwarded-for": {"203.0.113.1,192.0.2.10"}, "x-envoy-external-address": {"192.0.2.10"}}},
		{"hops 1 trusts the last entry received", 1, false, external("GET", "/items", "x-forwarded-for", "203.0.113.1, 198.51.100.1"), "198.51.100.1",
			map[string][]string{"x-forwarded-for": {"203.0.113.1, 198.51.100.1,192.0.2.10"}, "x-envoy-external-address": {"198.51.100.1"}}},
		{"hops 2", 2, false, external("GET", "/items", "x-forwarded-for", "203.0.113.1, 198.51.100.1"), "203.0.113.1", nil},
		{"hops beyond the entries: the peer", 3, false, external("GET", "/items", "x-forwarded-for", "203.0.113.1, 198.51.100.1"), "192.0.2.10", nil},
		{"repeated xff headers are one list", 2, false, external("GET", "/items", "x-forwarded-for", "203.0.113.1", "x-forwarded-for", "198.51.100.1"), "203.0.113.1",
			map[string][]string{"x-forwarded-for": {"203.0.113.1,198.51.100.1,192.0.2.10"}}},
		{"hops 0: the client's x-forwarded-proto is replaced", 0, false, external("GET", "/items", "x-forwarded-proto", "https"), "192.0.2.10",
			map[string][]string{"x-forwarded-proto": {"http"}}},
		{"hops 1: a trusted proxy's x-forwarded-proto is kept", 1, false, external("GET", "/items", "x-forwarded-proto", "https", "x-forwarded-for", "198.51.100.1"), "198.51.100.1",
			map[string][]string{"x-forwarded-proto": {"https"}}},
		{"an edge request's x-request-id is replaced", 0, false, external("GET", "/items", "x-request-id", "mine"), "192.0.2.10",
			map[string][]string{"x-request-id": {"rid-1"}}},
		{"preserve_external_request_id keeps it", 0, true, external("GET", "/items", "x-request-id", "mine"), "192.0.2.10",
			map[string][]string{"x-request-id": {"mine"}}},
		{"hop-by-hop and internal-only headers are removed", 0, false,
			external("GET", "/items", "connection", "close", "x-envoy-internal", "true", "x-envoy-retry-on", "5xx",
				"x-envoy-downstream-service-cluster", "evil", "x-origin", "web"), "192.0.2.10",
			map[string][]string{"connection": nil, "x-envoy-internal": nil, "x-envoy-retry-on": nil,
				"x-envoy-downstream-service-cluster": nil, "x-origin": {"web"}}},
		{"a private peer without x-forwarded-for is external", 0, false,
			Request{Method: "GET", Path: "/items", Host: "h", Remote: netip.MustParseAddrPort("10.1.1.1:1"),
				Headers: map[string][]string{"x-envoy-retry-on": {"5xx"}}}, "10.1.1.1",
			map[string][]string{"x-envoy-external-address": {"10.1.1.1"}, "x-forwarded-for": {"10.1.1.1"}, "x-envoy-retry-on": nil}},
		{"HTTP/2 cookie crumbs are one header, joined with '; '", 0, false, func() Request {
			r := external("GET", "/items", "cookie", "a=1", "cookie", "b=2")
			r.Protocol = "HTTP/2"
			return r
		}(), "192.0.2.10", map[string][]string{"cookie": {"a=1; b=2"}}},
		{"other x-envoy headers and x-forwarded-client-cert", 0, false,
			external("GET", "/items", "x-forwarded-client-cert", "By=spiffe://evil", "x-envoy-original-path", "/a",
				"x-envoy-attempt-count", "3", "x-envoy-ratelimited", "true", "x-envoy-decorator-operation", "op",
				"x-envoy-expected-rq-timeout-ms", "1", "x-envoy-upstream-service-time", "2", "x-envoy-peer-metadata", "m",
				"x-envoy-original-dst-host", "1.2.3.4:80", "x-envoy-hedge-on-per-try-timeout", "true",
				"x-forwarded-host", "evil", "x-forwarded-port", "1", "x-real-ip", "1.1.1.1"), "192.0.2.10",
			map[string][]string{"x-forwarded-client-cert": nil, "x-envoy-original-path": nil,
				"x-envoy-attempt-count": {"3"}, "x-envoy-peer-metadata": {"m"}, "x-forwarded-host": {"evil"}}},
		{"HTTP/1.1 cookie headers stay apart", 0, false, external("GET", "/items", "cookie", "a=1", "cookie", "b=2"),
			"192.0.2.10", map[string][]string{"cookie": {"a=1", "b=2"}}},
	}
}

// Cases for ConnectionManagerUtility::mutateRequestHeaders with use_remote_address
// (test/common/http/conn_manager_utility_test.cc: UseRemoteAddressWithXFFTrustedHops,
// AppendXff, ExternalRequestPreserveExternalRequestId, EdgeRequestRegenerateRequestId...).
func TestAcceptMutatesHeaders(t *testing.T) {
	tests := mutateCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := shipped(t)
			c.Managers[0].XffNumTrustedHops = tt.hops
			c.Managers[0].PreserveExternalRequestId = tt.preserve
			s, err := c.Accept(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if s.Client.String() != tt.wantClient || !s.Edge {
				t.Errorf("client %v (edge %v), want %s (edge)", s.Client, s.Edge, tt.wantClient)
			}
			for k, want := range tt.want {
				if got := s.Request.Headers[k]; !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if _, ok := tt.req.Headers["x-envoy-external-address"]; ok {
				t.Error("Accept changed the caller's headers")
			}
		})
	}
}

func TestAcceptPaths(t *testing.T) {
	c := shipped(t) // normalize_path, merge_slashes, REJECT_REQUEST
	for in, want := range acceptPathCases {
		s, err := c.Accept(external("GET", in))
		if err != nil {
			t.Errorf("Accept(%q): %v", in, err)
			continue
		}
		if s.Request.Path != want {
			t.Errorf("Accept(%q): path %q, want %q", in, s.Request.Path, want)
		}
	}
	s, err := c.Accept(external("GET", "/x/../items?item_id=1"))
	if err != nil || s.Route.GetName() != "items" {
		t.Errorf("the route is matched on the normalised path: %v, %v", s.Route.GetName(), err)
	}
	// ConnectionManagerUtility::maybeNormalizePath: REJECT_REQUEST and an invalid path are
	// answered 400 before any filter.
	for _, in := range acceptPathRejected {
		var lr *LocalReply
		if _, err := c.Accept(external("GET", in)); !errors.As(err, &lr) || lr.Code != 400 {
			t.Errorf("Accept(%q) = %v, want a 400 local reply", in, err)
		}
	}
	// The HTTP/1 codec refuses HTTP/1.0 (426) unless accept_http_10.
	old := external("GET", "/items")
	old.Protocol = "HTTP/1.0"
	var lr *LocalReply
	if _, err := c.Accept(old); !errors.As(err, &lr) || lr.Code != 426 {
		t.Errorf("HTTP/1.0: %v, want a 426 local reply", err)
	}
	// The query is not part of the path: an encoded slash there passes.
	if _, err := c.Accept(external("GET", "/items?next=%2Fhome")); err != nil {
		t.Errorf("encoded slash in the query: %v", err)
	}
	c.Managers[0].PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
	if s, err := c.Accept(external("GET", "/a%2Fb")); err != nil || s.Request.Path != "/a/b" {
		t.Errorf("UNESCAPE_AND_FORWARD: %v, %v", s, err)
	}
}

func TestAcceptRefusesWhatItDoesNotModel(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*hcmv3.HttpConnectionManager)
		req    Request
		want   string
	}{
		{"use_remote_address false", func(m *hcmv3.HttpConnectionManager) { m.UseRemoteAddress = wrapperspb.Bool(false) }, external("GET", "/"), "use_remote_address"},
		{"via", func(m *hcmv3.HttpConnectionManager) { m.Via = "x" }, external("GET", "/"), "via"},
		{"redirect on escaped slashes", func(m *hcmv3.HttpConnectionManager) {
			m.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT
		}, external("GET", "/"), "UNESCAPE_AND_REDIRECT"},
		{"a loopback peer", func(*hcmv3.HttpConnectionManager) {}, Request{Method: "GET", Path: "/", Remote: netip.MustParseAddrPort("127.0.0.1:1")}, "loopback"},
		{"no peer", func(*hcmv3.HttpConnectionManager) {}, Request{Method: "GET", Path: "/"}, "peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := shipped(t)
			tt.mutate(c.Managers[0])
			if _, err := c.Accept(tt.req); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Accept error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// streamCheckCase is the request of TestStreamCheckRequest (TestRealCheckRequest sends it
// through Envoy).
func streamCheckCase() Request {
	r := external("GET", "/items?item_id=9", "x-origin", "caf\xe9", "x-api-key", "k1", "x-api-key", "k2",
		"cookie", "sid=secret", "x-forwarded-for", "203.0.113.5")
	r.Protocol = "HTTP/2"
	return r
}

// Cases for CheckRequestUtils::createHttpCheck / setHttpRequest / setAttrContextPeer.
func TestStreamCheckRequest(t *testing.T) {
	c := shipped(t)
	r := streamCheckCase()
	r.Principal = "spiffe://example/web"
	s, err := c.Accept(r)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cr, err := c.CheckRequest(s, now)
	if err != nil {
		t.Fatal(err)
	}
	a := cr.GetAttributes()
	h := a.GetRequest().GetHttp()
	// allowed_headers: not the cookie nor x-forwarded-for; repeated values joined with ",";
	// bytes that are not UTF-8 become '!' (MessageUtil::sanitizeUtf8String).
	if want := map[string]string{"x-origin": "caf!", "x-api-key": "k1,k2", "x-request-id": "rid-1"}; !reflect.DeepEqual(h.GetHeaders(), want) {
		t.Errorf("headers = %q, want %q", h.GetHeaders(), want)
	}
	if h.GetId() != strconv.FormatUint(s.ID, 10) || h.GetProtocol() != "HTTP/2" || h.GetScheme() != "http" || h.GetPath() != "/items?item_id=9" {
		t.Errorf("id %q protocol %q scheme %q path %q", h.GetId(), h.GetProtocol(), h.GetScheme(), h.GetPath())
	}
	// The source is the TCP peer, never x-forwarded-for.
	if got := a.GetSource().GetAddress().GetSocketAddress(); got.GetAddress() != "192.0.2.10" || got.GetPortValue() != 5000 {
		t.Errorf("source = %v, want the peer 192.0.2.10:5000", got)
	}
	if a.GetSource().GetPrincipal() != "spiffe://example/web" {
		t.Errorf("principal = %q", a.GetSource().GetPrincipal())
	}
	if got := a.GetContextExtensions(); !reflect.DeepEqual(got, map[string]string{"resource": "GET:/items"}) {
		t.Errorf("context_extensions = %v", got)
	}
	if !a.GetRequest().GetTime().AsTime().Equal(now) {
		t.Errorf("time = %v", a.GetRequest().GetTime().AsTime())
	}

	// encode_raw_headers: one header_map entry per value, bytes as sent.
	f, _, _ := c.Filters()
	f.EncodeRawHeaders = true
	f.AllowedHeaders = &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "x-api-key"}}}}
	setFilter(t, c, f)
	cr, err = c.CheckRequest(s, now)
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for _, hv := range cr.GetAttributes().GetRequest().GetHttp().GetHeaderMap().GetHeaders() {
		raw = append(raw, hv.GetKey()+"="+string(hv.GetRawValue()))
	}
	if want := []string{"x-api-key=k1", "x-api-key=k2"}; !reflect.DeepEqual(raw, want) {
		t.Errorf("header_map = %q, want %q", raw, want)
	}
}

// vhContext is the virtual host's ext_authz settings of TestCheckRequestPerRoute.
func vhContext() *extauthzv3.ExtAuthzPerRoute {
	return &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_CheckSettings{
		CheckSettings: &extauthzv3.CheckSettings{ContextExtensions: map[string]string{"tenant": "acme", "resource": "vh"}}}}
}

// FilterConfigPerRoute: context_extensions of the virtual host overlaid with the route's;
// disabled means no Check.
func TestCheckRequestPerRoute(t *testing.T) {
	c := shipped(t)
	vh := c.Managers[0].GetRouteConfig().GetVirtualHosts()[0]
	per, err := anypb.New(vhContext())
	if err != nil {
		t.Fatal(err)
	}
	vh.TypedPerFilterConfig = map[string]*anypb.Any{ExtAuthzFilter: per}
	s, err := c.Accept(external("GET", "/items"))
	if err != nil {
		t.Fatal(err)
	}
	cr, err := c.CheckRequest(s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cr.GetAttributes().GetContextExtensions(), map[string]string{"tenant": "acme", "resource": "GET:/items"}; !reflect.DeepEqual(got, want) {
		t.Errorf("context_extensions = %v, want %v", got, want)
	}
	off, err := anypb.New(&extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	s.Route.TypedPerFilterConfig[ExtAuthzFilter] = off
	if cr, err := c.CheckRequest(s, time.Now()); cr != nil || err != nil {
		t.Errorf("disabled route: %v, %v; want no Check", cr, err)
	}
}

// RemoteAddressAction uses the connection manager's address (after xff_num_trusted_hops), not
// the peer; rate limits from elsewhere than RateLimitPerRoute are refused.
func TestStreamDescriptors(t *testing.T) {
	c := shipped(t)
	c.Managers[0].XffNumTrustedHops = 1
	s, err := c.Accept(external("GET", "/search?q=x", "x-forwarded-for", "198.51.100.7"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Descriptors(s)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := ds[0].Value("remote_address"); v != "198.51.100.7" {
		t.Errorf("remote_address = %q, want the trusted client", v)
	}
	s, err = c.Accept(external("GET", "/downloads/f"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err = c.Descriptors(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if v, _ := d.Value("lease_id"); v != "rid-1" {
			t.Errorf("lease_id = %q, want the generated x-request-id rid-1 (stream done %v)", v, d.OnStreamDone)
		}
	}
	vh := c.Managers[0].GetRouteConfig().GetVirtualHosts()[0]
	vh.RateLimits = s.Route.GetRoute().GetRateLimits()
	vh.RateLimits = append(vh.RateLimits, nil)
	if _, err := c.Descriptors(s); err == nil || !strings.Contains(err.Error(), "virtual host") {
		t.Errorf("virtual host rate_limits: %v, want refused", err)
	}
}

// setFilter puts f back as the ext_authz filter of c.
func setFilter(t *testing.T, c *Config, f *extauthzv3.ExtAuthz) {
	t.Helper()
	for _, hf := range c.Managers[0].GetHttpFilters() {
		if hf.GetTypedConfig().MessageIs(f) {
			a, err := anypb.New(f)
			if err != nil {
				t.Fatal(err)
			}
			hf.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
			return
		}
	}
	t.Fatal("no ext_authz filter")
}
