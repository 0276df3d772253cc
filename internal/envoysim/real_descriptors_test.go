package envoysim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// withCaseHosts adds a listener called name whose route table has, before the shipped virtual
// host, one virtual host per route, "case0" to "caseN", routing to the upstream.
func withCaseHosts(name string, routes []*routev3.Route) variant {
	return withListener(name, func(m *hcmv3.HttpConnectionManager) {
		var vhs []*routev3.VirtualHost
		for i, r := range routes {
			r = proto.Clone(r).(*routev3.Route)
			r.GetRoute().ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: "upstream"}
			vhs = append(vhs, &routev3.VirtualHost{Name: fmt.Sprintf("case%d", i), Domains: []string{fmt.Sprintf("case%d", i)}, Routes: []*routev3.Route{r}})
		}
		rc := m.GetRouteConfig()
		rc.VirtualHosts = append(vhs, rc.GetVirtualHosts()...)
	})
}

// emulatedLimits is what the emulation says the ratelimit filter sends for s: the request
// path's descriptors in one call, then those sent at stream end in another.
func (e *real) emulatedLimits(s *Stream) ([]*rlsv3.RateLimitRequest, error) {
	ds, err := e.conf.Descriptors(s)
	if err != nil {
		return nil, err
	}
	_, rl, err := e.conf.Filters()
	if err != nil {
		return nil, err
	}
	var out []*rlsv3.RateLimitRequest
	for _, done := range []bool{false, true} {
		r := &rlsv3.RateLimitRequest{Domain: rl.GetDomain()}
		for _, d := range ds {
			if d.OnStreamDone == done {
				r.Descriptors = append(r.Descriptors, d.Proto())
			}
		}
		if len(r.Descriptors) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// normLimits writes the x-request-id Envoy generated, where a descriptor carries it, as
// generatedID.
func normLimits(ls []*rlsv3.RateLimitRequest, id string) []*rlsv3.RateLimitRequest {
	var out []*rlsv3.RateLimitRequest
	for _, l := range ls {
		l = proto.Clone(l).(*rlsv3.RateLimitRequest)
		for _, d := range l.GetDescriptors() {
			for _, en := range d.GetEntries() {
				if id != "" && en.GetValue() == id {
					en.Value = generatedID
				}
			}
		}
		out = append(out, l)
	}
	return out
}

func limitsText(ls []*rlsv3.RateLimitRequest) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString("{" + (prototext.MarshalOptions{}).Format(l) + "} ")
	}
	return b.String()
}

// compareLimits sends r through e and compares the rate-limit calls Envoy makes with the
// emulation's; it returns the emulation's descriptors.
func (e *real) compareLimits(t *testing.T, r Request) []Descriptor {
	t.Helper()
	return e.compareLimitsWith(t, r, nil)
}

// compareLimitsWith is compareLimits with the service's Check answered as check answers it
// (nil: OK), and the emulated stream given the dynamic metadata that answer carries.
func (e *real) compareLimitsWith(t *testing.T, r Request, check func(*authv3.CheckRequest) *authv3.CheckResponse) []Descriptor {
	t.Helper()
	s := e.send(r, check, nil)
	st, err := e.conf.Accept(r)
	if err != nil {
		t.Fatalf("the emulation refuses it (Envoy answers %d): %v", s.status, err)
	}
	if check != nil {
		if cr, err := e.conf.CheckRequest(st, time.Now()); err == nil && cr != nil {
			if md := check(cr).GetDynamicMetadata(); md != nil {
				st.Request.DynamicMetadata = map[string]*structpb.Struct{ExtAuthzFilter: md}
			}
		}
	}
	want, err := e.emulatedLimits(st)
	if err != nil {
		t.Fatalf("the emulation refuses it (Envoy answers %d): %v", s.status, err)
	}
	got := normLimits(s.limits, s.requestID())
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = proto.Equal(got[i], want[i])
	}
	if !same {
		t.Errorf("rate-limit calls:\nEnvoy     %s\nemulation %s", limitsText(got), limitsText(want))
	}
	ds, _ := e.conf.Descriptors(st)
	return ds
}

// TestRealDescriptors runs TestDescriptorsActions's cases through Envoy, each rate limit on a
// route of its own virtual host: the calls Envoy makes are the emulation's, and the case's.
func TestRealDescriptors(t *testing.T) {
	cases := actionCases()
	var routes []*routev3.Route
	for _, c := range cases {
		routes = append(routes, oneLimit(t, c.extra, c.actions))
	}
	e := startReal(t, withCaseHosts("actions", routes)).at("actions")
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.req
			r.Host = fmt.Sprintf("case%d", i)
			got := e.compareLimits(t, r)
			if !descriptorsEqual(got, c.want) {
				t.Errorf("the emulation through the connection manager %+v, the case %+v", got, c.want)
			}
		})
	}
}

// descriptorsEqual compares descriptors as Envoy sends them (a nil and an empty list alike).
func descriptorsEqual(a, b []Descriptor) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i].Proto(), b[i].Proto()) || a[i].OnStreamDone != b[i].OnStreamDone || a[i].XRateLimitOption != b[i].XRateLimitOption {
			return false
		}
	}
	return true
}

// TestRealDescriptorsUnmodelled: what Envoy does with each rate limit Descriptors refuses.
// Envoy must refuse to load those the emulation says it refuses; the others it runs, and the
// test logs what it sends.
func TestRealDescriptorsUnmodelled(t *testing.T) {
	for _, c := range unmodelledCases {
		t.Run(c.name, func(t *testing.T) {
			route := oneLimit(t, c.extra, c.actions)
			add := withCaseHosts("case", []*routev3.Route{route})
			out, ok := validate(t, withProxyProtocol, add)
			refuses := strings.HasPrefix(c.want, "envoy refuses it")
			switch {
			case refuses && ok:
				t.Errorf("the emulation says Envoy refuses it; Envoy loads it")
			case refuses:
				t.Logf("Envoy refuses it: %s", lastLine(out))
			case !ok:
				t.Errorf("Envoy refuses it, the emulation says only that it does not model it: %s", lastLine(out))
			default:
				e := startReal(t, add).at("case")
				r := Request{Method: "GET", Path: "/", Host: "case0", Remote: localAddr, Headers: map[string][]string{"a": {"b"}}}
				s := e.send(r, nil, nil)
				if s.status != 200 || len(s.limits) != 1 {
					t.Errorf("Envoy answers %d after %d rate-limit calls, want 200 after 1", s.status, len(s.limits))
				}
				t.Logf("Envoy runs it: %d, rate-limit calls %s", s.status, limitsText(s.limits))
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRealSamples sends TestSampleDescriptors's samples through Envoy on the shipped routes: the
// rate-limit calls are the emulation's, and a request no route takes gets 404 and no call.
func TestRealSamples(t *testing.T) {
	e := startReal(t)
	mapper, err := descriptors.New(loadMapping(t, shippedDir+"extauthz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The service's allowed Check: its identity as dynamic metadata, which the shipped
	// rate-limit actions read the origin from.
	identity := func(cr *authv3.CheckRequest) *authv3.CheckResponse {
		return &authv3.CheckResponse{Status: &status.Status{}, DynamicMetadata: envoytest.Identity(mapper, cr)}
	}
	for _, c := range samples() {
		t.Run(c.name, func(t *testing.T) {
			got := e.compareLimitsWith(t, c.req, identity)
			if !descriptorsEqual(got, c.want) {
				t.Errorf("the emulation %+v, the case %+v", got, c.want)
			}
			if c.route == "" {
				s := e.send(c.req, nil, nil)
				if s.status != 404 || len(s.checks)+len(s.limits) > 0 {
					t.Errorf("no route: Envoy answers %d after %d Checks and %d rate-limit calls, want 404 and none", s.status, len(s.checks), len(s.limits))
				}
			}
		})
	}
}

// TestRealStreamDescriptors runs TestStreamDescriptors's cases through Envoy: remote_address is
// the trusted x-forwarded-for client, the lease the generated x-request-id; and what Envoy does
// with rate limits on the virtual host, which the emulation refuses.
func TestRealStreamDescriptors(t *testing.T) {
	vhLimit := &routev3.RateLimit{Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
		GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: "from", DescriptorValue: "virtual host"}}}}}
	e := startReal(t, withListener("hops1", func(m *hcmv3.HttpConnectionManager) { m.XffNumTrustedHops = 1 }),
		withListener("vhlimits", func(m *hcmv3.HttpConnectionManager) {
			m.GetRouteConfig().GetVirtualHosts()[0].RateLimits = []*routev3.RateLimit{vhLimit}
		}))
	t.Run("remote_address after trusted hops", func(t *testing.T) {
		ds := e.at("hops1").compareLimits(t, external("GET", "/search?q=x", "x-forwarded-for", "198.51.100.7"))
		if len(ds) == 0 {
			t.Fatal("no descriptors")
		}
		if v, _ := ds[0].Value("remote_address"); v != "198.51.100.7" {
			t.Errorf("remote_address = %q, want the trusted client", v)
		}
	})
	t.Run("the lease is the generated x-request-id", func(t *testing.T) {
		ds := e.compareLimits(t, external("GET", "/downloads/f", "x-user-id", "u1"))
		for _, d := range ds {
			if v, _ := d.Value("lease_id"); v != generatedID {
				t.Errorf("lease_id = %q, want the generated x-request-id (stream done %v)", v, d.OnStreamDone)
			}
		}
	})
	t.Run("virtual host rate_limits", func(t *testing.T) {
		x := e.at("vhlimits")
		r := external("GET", "/items?item_id=1")
		s := x.send(r, nil, nil)
		st, err := x.conf.Accept(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.conf.Descriptors(st); err == nil {
			t.Error("the emulation derives descriptors with virtual host rate_limits")
		}
		t.Logf("Envoy: %d, rate-limit calls %s", s.status, limitsText(s.limits))
	})
}
