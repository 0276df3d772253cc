package envoysim

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// routerHeaders are the headers Envoy's router adds on the way to the upstream, after the
// filters: not part of what the connection manager hands the filters.
var routerHeaders = map[string]bool{"x-envoy-expected-rq-timeout-ms": true}

// upstreamHeaders is what reached the upstream, by lower-case name, the router's own headers
// left out and the x-request-id Envoy generated written generatedID.
func upstreamHeaders(s seen, sent Request) map[string][]string {
	out := map[string][]string{}
	for k, vs := range s.upstream.Header {
		k = strings.ToLower(k)
		if routerHeaders[k] {
			continue
		}
		for _, v := range vs {
			if k == "x-request-id" {
				v = generated(v, strings.Join(sent.Headers["x-request-id"], ","))
			}
			out[k] = append(out[k], v)
		}
	}
	return out
}

// hopsListeners are listeners with xff_num_trusted_hops 1 to 4 ("hops1"...) and one with
// preserve_external_request_id ("preserve").
func hopsListeners() []variant {
	var vs []variant
	for n := uint32(1); n <= 4; n++ {
		vs = append(vs, withListener(fmt.Sprintf("hops%d", n), func(m *hcmv3.HttpConnectionManager) { m.XffNumTrustedHops = n }))
	}
	return append(vs, withListener("preserve", func(m *hcmv3.HttpConnectionManager) { m.PreserveExternalRequestId = true }))
}

func (e *real) forHops(hops uint32, preserve bool) *real {
	switch {
	case preserve && hops == 0:
		return e.at("preserve")
	case preserve:
		e.t.Fatal("no listener with trusted hops and preserve_external_request_id")
	case hops == 0:
		return e.at("ingress")
	}
	return e.at(fmt.Sprintf("hops%d", hops))
}

// compareHeaders sends r through e and checks that the upstream gets the headers Accept says
// the filters see (the router adds none that matter), and x-envoy-external-address names the
// client Accept settled on. It returns what the upstream got.
func (e *real) compareHeaders(t *testing.T, r Request) map[string][]string {
	t.Helper()
	s := e.send(r, nil, nil)
	if s.upstream == nil {
		t.Fatalf("nothing reached the upstream: %d %v %q", s.status, s.err, s.body)
	}
	got := upstreamHeaders(s, r)
	st, err := e.conf.Accept(r)
	if err != nil {
		t.Fatalf("Envoy passes it, the emulation: %v", err)
	}
	if !reflect.DeepEqual(got, st.Request.Headers) {
		t.Errorf("headers:\nEnvoy     %q\nemulation %q", got, st.Request.Headers)
	}
	if v := got["x-envoy-external-address"]; len(v) != 1 || v[0] != st.Client.String() {
		t.Errorf("x-envoy-external-address %q, emulation's client %s", v, st.Client)
	}
	return got
}

// TestRealMutatesHeaders runs TestAcceptMutatesHeaders's and TestLastAddressFromXFF's cases
// through Envoy.
func TestRealMutatesHeaders(t *testing.T) {
	e := startReal(t, hopsListeners()...)
	for _, tt := range mutateCases() {
		t.Run(tt.name, func(t *testing.T) {
			got := e.forHops(tt.hops, tt.preserve).compareHeaders(t, tt.req)
			for k, want := range tt.want {
				if k == "x-request-id" && want[0] == "rid-1" {
					want = []string{generatedID}
				}
				if !reflect.DeepEqual(got[k], want) {
					t.Errorf("%s: Envoy %q, the case %q", k, got[k], want)
				}
			}
			if v := got["x-envoy-external-address"]; len(v) != 1 || v[0] != tt.wantClient {
				t.Errorf("client: Envoy %q, the case %s", v, tt.wantClient)
			}
		})
	}
	for skip, want := range xffSkips {
		t.Run(fmt.Sprintf("xff skip %d", skip), func(t *testing.T) {
			got := e.forHops(uint32(skip+1), false).compareHeaders(t, external("GET", "/items", "x-forwarded-for", xffEntries))
			if _, err := netip.ParseAddr(want); err != nil {
				want = "192.0.2.10" // no address: the peer
			}
			if v := got["x-envoy-external-address"]; len(v) != 1 || v[0] != want {
				t.Errorf("client: Envoy %q, the case %s", v, want)
			}
		})
	}
	for in, want := range xffScoped {
		t.Run(fmt.Sprintf("scoped xff %q", in), func(t *testing.T) {
			got := e.forHops(1, false).compareHeaders(t, external("GET", "/items", "x-forwarded-for", in))
			if v := got["x-envoy-external-address"]; len(v) != 1 || v[0] != want {
				t.Errorf("client: Envoy %q, the case %s", v, want)
			}
		})
	}
	for _, bad := range xffBad {
		t.Run(fmt.Sprintf("bad xff %q", bad), func(t *testing.T) {
			got := e.forHops(1, false).compareHeaders(t, external("GET", "/items", "x-forwarded-for", bad))
			if v := got["x-envoy-external-address"]; len(v) != 1 || v[0] != "192.0.2.10" {
				t.Errorf("client: Envoy %q, want the peer", v)
			}
		})
	}
}

// TestRealUnmodelled sends TestAcceptRefusesWhatItDoesNotModel's cases through Envoy: Envoy
// serves each, in a way the emulation would get wrong if it ignored the setting (which is why
// Accept refuses them). "No peer" is an argument check of Accept: no connection lacks one.
func TestRealUnmodelled(t *testing.T) {
	e := startReal(t,
		withListener("noremote", func(m *hcmv3.HttpConnectionManager) { m.UseRemoteAddress = nil }),
		withListener("via", func(m *hcmv3.HttpConnectionManager) { m.Via = "x" }),
		withListener("redirect", func(m *hcmv3.HttpConnectionManager) {
			m.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT
		}))
	cases := []struct {
		listener string
		req      Request
		envoy    func(s seen, up map[string][]string) bool // what Envoy does
	}{
		{"noremote", external("GET", "/items", "x-forwarded-for", "203.0.113.1"), func(_ seen, up map[string][]string) bool {
			return reflect.DeepEqual(up["x-forwarded-for"], []string{"203.0.113.1"}) && up["x-envoy-external-address"] == nil
		}},
		{"via", external("GET", "/items"), func(_ seen, up map[string][]string) bool {
			return reflect.DeepEqual(up["via"], []string{"x"})
		}},
		{"redirect", external("GET", "/items%2Fx"), func(s seen, _ map[string][]string) bool {
			return s.status == 307 && s.header.Get("location") == "/items/x"
		}},
		{"ingress", Request{Method: "GET", Path: "/items", Host: "h", Remote: netip.MustParseAddrPort("127.0.0.1:1")}, func(_ seen, up map[string][]string) bool {
			// The machine's own address, not the peer's.
			v := up["x-forwarded-for"]
			a, err := netip.ParseAddr(strings.Join(v, ""))
			return len(v) == 1 && err == nil && !a.IsLoopback()
		}},
	}
	for _, c := range cases {
		x := e.at(c.listener)
		s := x.send(c.req, nil, nil)
		var up map[string][]string
		if s.upstream != nil {
			up = upstreamHeaders(s, c.req)
		}
		_, err := x.conf.Accept(c.req)
		if err == nil {
			t.Errorf("%s %s from %s: the emulation does not refuse it", c.listener, c.req.Path, c.req.Remote)
		}
		if !c.envoy(s, up) {
			t.Errorf("%s %s from %s: Envoy %d, location %q, upstream %q", c.listener, c.req.Path, c.req.Remote, s.status, s.header.Get("location"), up)
		}
		t.Logf("%s %s from %s: Envoy %d location %q, upstream %q; emulation: %v", c.listener, c.req.Path, c.req.Remote, s.status, s.header.Get("location"), up, err)
	}
}

// TestRealBrokenConfigs has Envoy validate TestBrokenConfigsRejected's files and the shipped
// bootstraps of TestShippedConfigsLoad.
func TestRealBrokenConfigs(t *testing.T) {
	for _, tt := range brokenConfigs {
		t.Run(tt.file, func(t *testing.T) {
			doc, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			out, ok := validateDoc(t, doc)
			// Envoy loads these two: it ignores per-route settings for a filter it does not
			// run, and answers every request status_on_error (503) when the ext_authz cluster
			// does not exist. Load refuses both on purpose.
			lenient := tt.file == "per_filter_not_in_chain.yaml" || tt.file == "missing_cluster.yaml"
			switch {
			case ok && !lenient:
				t.Errorf("Envoy loads it; Load refuses it")
			case !ok && lenient:
				t.Errorf("Envoy refuses it too: %s", lastLine(out))
			case !ok:
				t.Logf("Envoy refuses it: %s", lastLine(out))
			}
		})
	}
	t.Run("not YAML", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(path, []byte(badYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(envoytest.Binary(t), "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
		if err == nil {
			t.Errorf("Envoy loads it: %s", out)
		}
	})
	t.Run("an Any of an unknown type", func(t *testing.T) {
		if out, ok := validateDoc(t, []byte(unknownAny)); ok {
			t.Errorf("Envoy loads it: %s", out)
		}
	})
	for _, f := range shippedConfigs(t) {
		t.Run(f, func(t *testing.T) {
			doc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if out, ok := validateDoc(t, doc); !ok {
				t.Errorf("Envoy refuses it: %s", out)
			}
		})
	}
}
