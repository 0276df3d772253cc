package envoysim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// setRateLimit changes the ratelimit filter of m.
func setRateLimit(m *hcmv3.HttpConnectionManager, change func(*ratelimitv3.RateLimit)) {
	for _, f := range m.GetHttpFilters() {
		var rl ratelimitv3.RateLimit
		if f.GetTypedConfig().UnmarshalTo(&rl) != nil {
			continue
		}
		change(&rl)
		if packed, err := anypb.New(&rl); err == nil {
			f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: packed}
		}
	}
}

// limitsRoute is a route sending one generic_key descriptor per ds, each with its
// x_ratelimit_option.
func limitsRoute(t *testing.T, ds []Descriptor) *routev3.Route {
	per := &ratelimitv3.RateLimitPerRoute{}
	for i, d := range ds {
		per.RateLimits = append(per.RateLimits, &routev3.RateLimit{XRatelimitOption: d.XRateLimitOption,
			Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
				GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: "d", DescriptorValue: fmt.Sprint(i)}}}}})
	}
	a, err := anypb.New(per)
	if err != nil {
		t.Fatal(err)
	}
	return &routev3.Route{Name: "limits", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action:               &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "upstream"}}},
		TypedPerFilterConfig: map[string]*anypb.Any{RateLimitFilter: a}}
}

var xrlHeaders = []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}

// TestRealRateLimitHeaders runs TestRateLimitHeaders's cases through Envoy, with
// enable_x_ratelimit_headers DRAFT_VERSION_03 (listener "on") and OFF ("off"): the x-ratelimit-*
// headers the client gets on an allowed request are RateLimitHeaders's and the case's.
func TestRealRateLimitHeaders(t *testing.T) {
	cases := rlHeaderCases()
	var routes []*routev3.Route
	for _, c := range cases {
		routes = append(routes, limitsRoute(t, c.ds))
	}
	e := startReal(t, withCaseHosts("on", routes), withCaseHosts("off", routes), withHCM("off", func(m *hcmv3.HttpConnectionManager) {
		setRateLimit(m, func(rl *ratelimitv3.RateLimit) { rl.EnableXRatelimitHeaders = ratelimitv3.RateLimit_OFF })
	}))
	for i, c := range cases {
		for _, on := range []bool{true, false} {
			want, listener := c.enabled, "on"
			if !on {
				want, listener = c.default0, "off"
			}
			t.Run(fmt.Sprintf("%s %s", c.name, listener), func(t *testing.T) {
				x := e.at(listener)
				s := x.send(Request{Method: "GET", Path: "/", Host: fmt.Sprintf("case%d", i), Remote: localAddr}, nil,
					func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
						return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: c.statuses}
					})
				if s.status != 200 || len(s.limits) != 1 || len(s.limits[0].GetDescriptors()) != len(c.ds) {
					t.Fatalf("Envoy answers %d after %d rate-limit calls, want 200 after one with %d descriptors", s.status, len(s.limits), len(c.ds))
				}
				got := map[string]string{}
				for _, k := range xrlHeaders {
					if v := s.header.Values(k); len(v) > 0 {
						got[k] = strings.Join(v, "|")
					}
				}
				emu := RateLimitHeaders(c.ds, on, c.statuses)
				if len(got)+len(emu) > 0 && !reflect.DeepEqual(got, emu) {
					t.Errorf("Envoy %q, emulation %q", got, emu)
				}
				if len(got)+len(want) > 0 && !reflect.DeepEqual(got, want) {
					t.Errorf("Envoy %q, the case %q", got, want)
				}
			})
		}
	}
}

// compareReply checks that what the client saw (and the upstream got) is the emulation's
// reply: its status (0: the upstream answered), body, and every header it names; and that no
// header of watch it does not name reached the client.
func compareReply(t *testing.T, s seen, emu Reply, watch ...string) {
	t.Helper()
	if emu.Status == 0 {
		if s.upstream == nil || s.status != 200 {
			t.Fatalf("Envoy answers %d %q itself; the emulation lets the request through", s.status, s.body)
		}
		for k, v := range emu.UpstreamHeaders {
			if got := s.upstream.Header.Values(k); !reflect.DeepEqual(got, v) {
				t.Errorf("upstream %s: Envoy %q, emulation %q", k, got, v)
			}
		}
	} else if s.status != emu.Status || s.body != emu.Body {
		t.Errorf("Envoy %d %q, emulation %d %q", s.status, s.body, emu.Status, emu.Body)
	}
	for k, v := range emu.ClientHeaders {
		if got := s.header.Values(k); !reflect.DeepEqual(got, v) {
			t.Errorf("client %s: Envoy %q, emulation %q", k, got, v)
		}
	}
	for _, k := range watch {
		if _, ok := emu.ClientHeaders[k]; !ok && len(s.header.Values(k)) > 0 {
			t.Errorf("client %s: Envoy %q, emulation none", k, s.header.Values(k))
		}
	}
}

// TestRealReplies runs TestReplies's cases through Envoy: the answers of the service, and its
// failures, as the client (and the upstream) see them.
func TestRealReplies(t *testing.T) {
	e := startReal(t)
	c := e.conf
	watch := append([]string{"retry-after", "x-envoy-ratelimited"}, xrlHeaders...)
	item := external("GET", "/items?item_id=1")
	limitCases := []struct {
		name string
		resp *rlsv3.RateLimitResponse // nil: the call fails
	}{
		{"over limit", overLimit()},
		{"a failed call", nil},
		{"overall_code UNKNOWN", &rlsv3.RateLimitResponse{}},
	}
	for _, lc := range limitCases {
		t.Run("ratelimit: "+lc.name, func(t *testing.T) {
			s := e.send(item, nil, func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse { return lc.resp })
			emu, err := c.RateLimitReply([]Descriptor{{}}, lc.resp)
			if err != nil {
				t.Fatal(err)
			}
			compareReply(t, s, emu, watch...)
		})
	}
	checkCases := []struct {
		name string
		resp *authv3.CheckResponse // nil: the call fails
	}{
		{"denied", deniedCheck()},
		{"allowed", okCheck()},
		{"a failed call", nil},
	}
	for _, cc := range checkCases {
		t.Run("ext_authz: "+cc.name, func(t *testing.T) {
			s := e.send(item, func(*authv3.CheckRequest) *authv3.CheckResponse { return cc.resp }, nil)
			emu, err := c.CheckReply(cc.resp)
			if err != nil {
				t.Fatal(err)
			}
			compareReply(t, s, emu, watch...)
		})
	}
}
