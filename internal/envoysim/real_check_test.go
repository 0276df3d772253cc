package envoysim

import (
	"strconv"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// setExtAuthz changes the ext_authz filter of m.
func setExtAuthz(m *hcmv3.HttpConnectionManager, change func(*extauthzv3.ExtAuthz)) {
	for _, f := range m.GetHttpFilters() {
		var a extauthzv3.ExtAuthz
		if f.GetTypedConfig().UnmarshalTo(&a) != nil {
			continue
		}
		change(&a)
		if packed, err := anypb.New(&a); err == nil {
			f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: packed}
		}
	}
}

// normCheck is c with what differs by chance left out: the time, the stream id (a random
// uint64: its form is checked), and an x-request-id Envoy generated (written generatedID).
func normCheck(t *testing.T, c *authv3.CheckRequest, sent Request) *authv3.CheckRequest {
	t.Helper()
	c = proto.Clone(c).(*authv3.CheckRequest)
	h := c.GetAttributes().GetRequest().GetHttp()
	if id, err := strconv.ParseUint(h.GetId(), 10, 64); err != nil || id == 0 {
		t.Errorf("stream id %q, want a decimal uint64", h.GetId())
	}
	h.Id = ""
	c.Attributes.Request.Time = nil
	sentID := ""
	if v := sent.Headers["x-request-id"]; len(v) > 0 {
		sentID = v[0]
	}
	if v, ok := h.GetHeaders()["x-request-id"]; ok {
		h.Headers["x-request-id"] = generated(v, sentID)
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		if hv.GetKey() == "x-request-id" {
			hv.RawValue = []byte(generated(string(hv.GetRawValue()), sentID))
		}
	}
	return c
}

// compareCheck sends r through e and compares the one CheckRequest Envoy sends with build's
// (the emulation's) for the stream Accept makes of r; nil from build: no Check.
func (e *real) compareCheck(t *testing.T, r Request, build func(*Stream) (*authv3.CheckRequest, error)) {
	t.Helper()
	r = withLocal(r)
	s := e.send(r, nil, nil)
	st, err := e.conf.Accept(r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := build(st)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case want == nil && len(s.checks) == 0:
		return
	case want == nil || len(s.checks) != 1:
		t.Fatalf("Envoy sent %d Checks, the emulation %v", len(s.checks), want)
	}
	got, emu := normCheck(t, s.checks[0], r), normCheck(t, want, r)
	if !proto.Equal(got, emu) {
		t.Errorf("CheckRequest:\nEnvoy     %s\nemulation %s", prototext.Format(got), prototext.Format(emu))
	}
}

// TestRealCheckRequest runs TestStreamCheckRequest's, TestCheckRequestPerRoute's and
// TestCheckRequest's cases through Envoy.
func TestRealCheckRequest(t *testing.T) {
	vhExt, err := anypb.New(vhContext())
	if err != nil {
		t.Fatal(err)
	}
	off, err := anypb.New(&extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_Disabled{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	e := startReal(t,
		withListener("raw", func(m *hcmv3.HttpConnectionManager) {
			setExtAuthz(m, func(f *extauthzv3.ExtAuthz) {
				f.EncodeRawHeaders = true
				f.AllowedHeaders = &matcherv3.ListStringMatcher{Patterns: []*matcherv3.StringMatcher{{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "x-api-key"}}}}
			})
		}),
		withListener("allheaders", func(m *hcmv3.HttpConnectionManager) {
			setExtAuthz(m, func(f *extauthzv3.ExtAuthz) { f.AllowedHeaders = nil })
		}),
		withListener("vhctx", func(m *hcmv3.HttpConnectionManager) {
			m.GetRouteConfig().GetVirtualHosts()[0].TypedPerFilterConfig = map[string]*anypb.Any{ExtAuthzFilter: vhExt}
		}),
		withListener("off", func(m *hcmv3.HttpConnectionManager) {
			for _, r := range m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
				r.TypedPerFilterConfig[ExtAuthzFilter] = off
			}
		}))
	stream := func(c *Config) func(*Stream) (*authv3.CheckRequest, error) {
		return func(s *Stream) (*authv3.CheckRequest, error) { return c.CheckRequest(s, time.Now()) }
	}
	t.Run("stream", func(t *testing.T) {
		x := e.at("ingress")
		x.compareCheck(t, streamCheckCase(), stream(x.conf))
	})
	t.Run("encode_raw_headers", func(t *testing.T) {
		x := e.at("raw")
		x.compareCheck(t, streamCheckCase(), stream(x.conf))
	})
	t.Run("virtual host context_extensions", func(t *testing.T) {
		x := e.at("vhctx")
		x.compareCheck(t, external("GET", "/items"), stream(x.conf))
	})
	t.Run("disabled", func(t *testing.T) {
		x := e.at("off")
		x.compareCheck(t, external("GET", "/items"), stream(x.conf))
	})
	t.Run("package CheckRequest", func(t *testing.T) {
		x := e.at("allheaders")
		x.compareCheck(t, checkRequestCase(), func(s *Stream) (*authv3.CheckRequest, error) {
			return CheckRequest(s.Route, s.Request, time.Now())
		})
	})
}
