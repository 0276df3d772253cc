package envoy

import (
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/envoysim"
	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// Each test here settles one place where what we believed of Envoy (the emulation in
// internal/envoysim, the comments of envoy-config/envoy.yaml, the README) could differ from
// Envoy 1.40, by running Envoy; where a test also asks the emulation, the two must agree.

// sim is the emulation of bootstrap (a variant), or of the shipped envoy.yaml when nil.
func sim(t *testing.T, bootstrap []byte) *envoysim.Config {
	t.Helper()
	var c *envoysim.Config
	var err error
	if bootstrap == nil {
		c, err = envoysim.Load(envoyYAML)
	} else {
		c, err = envoysim.Parse("variant of "+envoyYAML, bootstrap)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// simStream is what the emulation's connection manager makes of a request from a public
// address (the emulation does not model loopback peers).
func simStream(t *testing.T, c *envoysim.Config, method, path string, kv ...string) *envoysim.Stream {
	t.Helper()
	h := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	st, err := c.Accept(envoysim.Request{Method: method, Path: path, Host: "api.example", Headers: h,
		Remote: netip.MustParseAddrPort("192.0.2.9:1000")})
	if err != nil {
		t.Fatalf("envoysim: %s %s: %v", method, path, err)
	}
	return st
}

// overLimit answers every descriptor OVER_LIMIT.
func overLimit(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT})
	}
	return resp
}

// TestOverallCodeUnknown: a rate-limit answer whose overall_code is UNKNOWN (the zero value: an
// answer that forgot to say) is an allow for Envoy's ratelimit filter, counted as ok, with
// failure_mode_deny false as shipped and with it true: Envoy does not read it as an error.
func TestOverallCodeUnknown(t *testing.T) {
	for _, deny := range []bool{false, true} {
		name := "shipped"
		var bootstrap []byte
		if deny {
			// Variant: the ratelimit filter's failure_mode_deny set to true.
			name = "failure_mode_deny"
			bootstrap = variant(t, func(root map[string]any) {
				httpFilter(root, "envoy.filters.http.ratelimit")["failure_mode_deny"] = true
			})
		}
		t.Run(name, func(t *testing.T) {
			s, rec := newRecordedStack(t, bootstrap)
			rec.answer(func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
				return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_UNKNOWN}
			})
			a := s.do(h1, "GET", "/items?item_id=1", seqHeader, "unknown")
			if _, limits := rec.take(); len(limits) != 1 {
				t.Fatalf("%d ShouldRateLimit calls, want 1", len(limits))
			}
			if a.status != http.StatusOK || len(s.reached("unknown")) != 1 {
				t.Errorf("overall_code UNKNOWN: the client got %d %q (upstream reached %d times), want 200 and the upstream once",
					a.status, a.body, len(s.reached("unknown")))
			}
			st := s.envoy.Stats(t)
			for k, want := range map[string]int64{"ok": 1, "error": 0, "over_limit": 0, "failure_mode_allowed": 0} {
				if got := st["cluster.upstream.ratelimit.extauthz_rl."+k]; got != want {
					t.Errorf("ratelimit %s = %d, want %d", k, got, want)
				}
			}
			// The emulation says the same.
			r, err := sim(t, bootstrap).RateLimitReply(nil, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_UNKNOWN})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != 0 {
				t.Errorf("envoysim answers UNKNOWN with %d, Envoy lets the request through", r.Status)
			}
		})
	}
}

// TestQueryParameterParsing: what a query_parameters action (GET /items: item_id) sends for
// query strings that are not plain key=value pairs. Envoy splits on '&' only (';' is part of
// a value), decodes valid percent-escapes in keys and values and leaves a bad one as written,
// leaves '+' alone, and takes the first of repeated keys; without an item_id the route's one
// descriptor is not produced and Envoy makes no rate-limit call at all. The emulation must
// derive the same.
func TestQueryParameterParsing(t *testing.T) {
	const absent = "(no descriptor)"
	s, rec := newRecordedStack(t, nil)
	items := sim(t, nil).Route("items")
	cases := []struct {
		query string
		want  string // the item_id entry Envoy sends
	}{
		{"item_id=a", "a"},
		{"item_id=a;b", "a;b"},
		{"x=1;item_id=b", absent},
		{"x=1&item_id=b", "b"},
		{"item_id=%41%2F", "A/"},
		{"item_id=a%zz", "a%zz"},
		{"item_id=a%", "a%"},
		{"item_id=%zz%41", "%zzA"},
		{"item_id=a+b", "a+b"},
		{"item_id=a%2Bb", "a+b"},
		{"item_id=1&item_id=2", "1"},
		{"item_id=", ""},
		{"item_id", ""},
		{"ITEM_ID=1", absent},
		{"item%5Fid=1", "1"},
		{"&&item_id=x&", "x"},
		{"item_id=a=b", "a=b"},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			a := s.raw("/items?" + c.query)
			if a.status != http.StatusOK {
				t.Fatalf("GET /items?%s: %d %q", c.query, a.status, a.body)
			}
			_, limits := rec.take()
			got := absent
			switch len(limits) {
			case 0:
			case 1:
				for _, d := range limits[0].GetDescriptors() {
					for _, e := range d.GetEntries() {
						if e.GetKey() == "item_id" {
							got = e.GetValue()
						}
					}
				}
				if got == absent {
					t.Errorf("Envoy called with descriptors %v and no item_id", descriptors(limits[0]))
				}
			default:
				t.Fatalf("%d ShouldRateLimit calls, want at most 1", len(limits))
			}
			if got != c.want {
				t.Errorf("Envoy sent item_id %q, want %q", got, c.want)
			}
			ds, err := envoysim.Descriptors(items, envoysim.Request{Method: "GET", Path: "/items?" + c.query, Host: "api.example",
				Remote: netip.MustParseAddrPort("192.0.2.9:1000")})
			if err != nil {
				t.Fatal(err)
			}
			emulated := absent
			for _, d := range ds {
				if v, ok := d.Value("item_id"); ok {
					emulated = v
				}
			}
			if emulated != got {
				t.Errorf("envoysim derives item_id %q, Envoy sent %q", emulated, got)
			}
		})
	}
}

// TestPerRouteMostSpecificFirst: a route's typed_per_filter_config and its virtual host's.
// Variant: the virtual host gets an ExtAuthzPerRoute with context_extensions {resource:
// VH, vh_only: yes} and a RateLimitPerRoute with one generic_key descriptor.
func TestPerRouteMostSpecificFirst(t *testing.T) {
	bootstrap := variant(t, func(root map[string]any) {
		vhost(root)["typed_per_filter_config"] = map[string]any{
			"envoy.filters.http.ext_authz": map[string]any{
				"@type":          "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
				"check_settings": map[string]any{"context_extensions": map[string]any{"resource": "VH", "vh_only": "yes"}},
			},
			"envoy.filters.http.ratelimit": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
				"rate_limits": []any{map[string]any{"actions": []any{
					map[string]any{"generic_key": map[string]any{"descriptor_key": "from", "descriptor_value": "vh"}},
				}}},
			},
		}
	})
	s, rec := newRecordedStack(t, bootstrap)

	// A route with both of its own: ext_authz's context_extensions are merged (the route's
	// value wins, the virtual host's other keys stay); the route's rate_limits replace the
	// virtual host's.
	if a := s.do(h1, "GET", "/items?item_id=7"); a.status != http.StatusOK {
		t.Fatalf("GET /items: %d %q", a.status, a.body)
	}
	checks, limits := rec.take()
	if len(checks) != 1 || len(limits) != 1 {
		t.Fatalf("%d Check and %d ShouldRateLimit calls, want 1 and 1", len(checks), len(limits))
	}
	wantExt := map[string]string{"resource": "GET:/items", "vh_only": "yes"}
	if got := checks[0].GetAttributes().GetContextExtensions(); !reflect.DeepEqual(got, wantExt) {
		t.Errorf("GET /items: context_extensions %v, want %v", got, wantExt)
	}
	if got, want := descriptors(limits[0]), []string{"resource=GET:/items,item_id=7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("GET /items: descriptors %v, want the route's %v", got, want)
	}

	// A route without a RateLimitPerRoute (reports): the virtual host's applies.
	if a := s.do(h1, "GET", "/reports"); a.status != http.StatusOK {
		t.Fatalf("GET /reports: %d %q", a.status, a.body)
	}
	checks, limits = rec.take()
	if len(checks) != 1 || len(limits) != 1 {
		t.Fatalf("%d Check and %d ShouldRateLimit calls, want 1 and 1", len(checks), len(limits))
	}
	if got, want := descriptors(limits[0]), []string{"from=vh"}; !reflect.DeepEqual(got, want) {
		t.Errorf("GET /reports: descriptors %v, want the virtual host's %v", got, want)
	}
	wantExt = map[string]string{"resource": "GET:/reports", "vh_only": "yes"}
	if got := checks[0].GetAttributes().GetContextExtensions(); !reflect.DeepEqual(got, wantExt) {
		t.Errorf("GET /reports: context_extensions %v, want %v", got, wantExt)
	}

	// The emulation resolves both the same way.
	c := sim(t, bootstrap)
	for _, r := range []struct {
		path string
		ext  map[string]string
		ds   []string
	}{
		{"/items?item_id=7", map[string]string{"resource": "GET:/items", "vh_only": "yes"}, []string{"resource=GET:/items,item_id=7"}},
		{"/reports", map[string]string{"resource": "GET:/reports", "vh_only": "yes"}, []string{"from=vh"}},
	} {
		st := simStream(t, c, "GET", r.path)
		cr, err := c.CheckRequest(st, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := cr.GetAttributes().GetContextExtensions(); !reflect.DeepEqual(got, r.ext) {
			t.Errorf("envoysim: GET %s: context_extensions %v, Envoy %v", r.path, got, r.ext)
		}
		ds, err := c.Descriptors(st)
		if err != nil {
			t.Fatal(err)
		}
		if got := simDescriptors(ds); !reflect.DeepEqual(got, r.ds) {
			t.Errorf("envoysim: GET %s: descriptors %v, Envoy %v", r.path, got, r.ds)
		}
	}
}

// simDescriptors writes the emulation's descriptors as descriptors writes Envoy's.
func simDescriptors(ds []envoysim.Descriptor) []string {
	var req rlsv3.RateLimitRequest
	for _, d := range ds {
		req.Descriptors = append(req.Descriptors, d.Proto())
	}
	return descriptors(&req)
}

// TestPrivatePeerIsExternal: a request from a loopback (or private) peer without
// x-forwarded-for is external by Envoy 1.40's default (no internal_address_config: no address
// is internal): Envoy sets x-envoy-external-address to the peer, strips the client's
// x-envoy-* control headers, and replaces its x-request-id.
func TestPrivatePeerIsExternal(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			seq := "peer-" + p.name
			a := s.do(p.c, "GET", "/reports", "x-origin", "web", "x-api-key", seq, seqHeader, seq,
				"x-envoy-internal", "true", "x-envoy-retry-on", "5xx", "x-envoy-upstream-rq-timeout-ms", "1",
				"x-envoy-force-trace", "true", "x-request-id", "chosen-by-the-client")
			if a.status != http.StatusOK {
				t.Fatalf("GET /reports: %d %q", a.status, a.body)
			}
			got := s.reached(seq)
			if len(got) != 1 {
				t.Fatalf("the upstream saw %v", got)
			}
			h := got[0].Header
			if v := h.Get("x-envoy-external-address"); v != "127.0.0.1" {
				t.Errorf("x-envoy-external-address %q, want the peer 127.0.0.1 (an external request)", v)
			}
			for _, k := range []string{"x-envoy-internal", "x-envoy-retry-on", "x-envoy-upstream-rq-timeout-ms", "x-envoy-force-trace"} {
				if v := h.Get(k); v != "" {
					t.Errorf("the upstream got the client's %s: %q", k, v)
				}
			}
			if v := h.Get("x-request-id"); v == "" || v == "chosen-by-the-client" {
				t.Errorf("x-request-id %q: an edge request's id is Envoy's own", v)
			}
		})
	}
	// The emulation takes a private peer without x-forwarded-for as external too.
	c := sim(t, nil)
	for _, peer := range []string{"10.1.2.3:4000", "192.168.0.9:4000", "172.16.5.5:4000"} {
		st, err := c.Accept(envoysim.Request{Method: "GET", Path: "/reports", Host: "api.example",
			Headers: map[string][]string{"x-envoy-internal": {"true"}}, Remote: netip.MustParseAddrPort(peer)})
		if err != nil {
			t.Errorf("envoysim, peer %s: %v", peer, err)
			continue
		}
		addr, _, _ := strings.Cut(peer, ":")
		if got := st.Request.Headers["x-envoy-external-address"]; !st.Edge || len(got) != 1 || got[0] != addr || st.Request.Headers["x-envoy-internal"] != nil {
			t.Errorf("envoysim, peer %s: edge %v, headers %v; want an external request", peer, st.Edge, st.Request.Headers)
		}
	}
}

// TestRateLimitedStatusBelow400: rate_limited_status under 400 is not used; Envoy answers 429.
// Variants: the ratelimit filter's rate_limited_status set to 200, then to 503.
func TestRateLimitedStatusBelow400(t *testing.T) {
	for _, c := range []struct {
		code int
		name string
		want int
	}{{200, "OK", 429}, {302, "Found", 429}, {503, "ServiceUnavailable", 503}} {
		t.Run(c.name, func(t *testing.T) {
			bootstrap := variant(t, func(root map[string]any) {
				httpFilter(root, "envoy.filters.http.ratelimit")["rate_limited_status"] = map[string]any{"code": c.name}
			})
			s, rec := newRecordedStack(t, bootstrap)
			rec.answer(overLimit)
			a := s.do(h1, "GET", "/items?item_id=1", seqHeader, "status")
			if a.status != c.want {
				t.Errorf("rate_limited_status %d: the client got %d, want %d", c.code, a.status, c.want)
			}
			if len(s.reached("status")) != 0 {
				t.Error("a request over its limit reached the upstream")
			}
			r, err := sim(t, bootstrap).RateLimitReply(nil, overLimit(&rlsv3.RateLimitRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != c.want {
				t.Errorf("envoysim answers %d for rate_limited_status %d, Envoy %d", r.Status, c.code, c.want)
			}
		})
	}
}

// TestFilterEnabledEnforced: the dry run envoy.yaml's comment describes. Variants: the
// ratelimit filter's filter_enforced at 0% (called, never enforced), then filter_enabled at
// 0% (never called).
func TestFilterEnabledEnforced(t *testing.T) {
	zero := map[string]any{"default_value": map[string]any{"numerator": 0, "denominator": "HUNDRED"}, "runtime_key": "ratelimit.extauthz_enforced"}
	for _, c := range []struct {
		field     string
		wantCalls int
	}{{"filter_enforced", 1}, {"filter_enabled", 0}} {
		t.Run(c.field, func(t *testing.T) {
			bootstrap := variant(t, func(root map[string]any) {
				httpFilter(root, "envoy.filters.http.ratelimit")[c.field] = zero
			})
			s, rec := newRecordedStack(t, bootstrap)
			rec.answer(overLimit)
			a := s.do(h1, "GET", "/items?item_id=1", seqHeader, c.field)
			_, limits := rec.take()
			if len(limits) != c.wantCalls {
				t.Errorf("%s 0%%: %d ShouldRateLimit calls, want %d", c.field, len(limits), c.wantCalls)
			}
			if a.status != http.StatusOK || len(s.reached(c.field)) != 1 {
				t.Errorf("%s 0%%: an over-limit answer gave the client %d, want 200 and the upstream reached", c.field, a.status)
			}
			// The emulation: no descriptors without filter_enabled, no refusal without
			// filter_enforced.
			emu := sim(t, bootstrap)
			ds, err := emu.Descriptors(simStream(t, emu, "GET", "/items?item_id=1"))
			if err != nil {
				t.Fatal(err)
			}
			if got := min(len(ds), 1); got != c.wantCalls {
				t.Errorf("envoysim: %d descriptors, Envoy made %d calls", len(ds), c.wantCalls)
			}
			if len(ds) == 0 {
				return
			}
			r, err := emu.RateLimitReply(ds, overLimit(&rlsv3.RateLimitRequest{Descriptors: simProtos(ds)}))
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != 0 {
				t.Errorf("envoysim refuses with %d, Envoy lets the request through", r.Status)
			}
		})
	}
}

func simProtos(ds []envoysim.Descriptor) []*ratelimitcommonv3.RateLimitDescriptor {
	var out []*ratelimitcommonv3.RateLimitDescriptor
	for _, d := range ds {
		out = append(out, d.Proto())
	}
	return out
}

// TestMinimumVersion: envoy.yaml says it needs Envoy 1.38, the release that added
// hits_addend.is_negative_hits (Envoy's changelogs/1.38.0.yaml, new_features, ratelimit). Only
// 1.40 runs here, so what is shown is why an older Envoy refuses the file: Envoy 1.40 accepts
// it, and refuses the same file when that one field has a name it does not know, as an Envoy
// from before the field (1.37 or older) sees the shipped one.
func TestMinimumVersion(t *testing.T) {
	bin := envoytest.Binary(t)
	src, err := os.ReadFile(envoyYAML)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "needs Envoy 1.38 or newer") {
		t.Error("envoy.yaml does not state its minimum Envoy, 1.38")
	}
	validate := func(name string, b []byte) (bool, string) {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
		return err == nil, string(out)
	}
	if ok, out := validate("envoy.yaml", src); !ok {
		t.Fatalf("Envoy %s refuses envoy.yaml:\n%s", envoytest.Version, out)
	}
	const field = "is_negative_hits: true"
	if strings.Count(string(src), field) != 1 {
		t.Fatalf("envoy.yaml has %d %q, want 1", strings.Count(string(src), field), field)
	}
	older := strings.Replace(string(src), field, "is_negative_hits_unknown: true", 1)
	ok, out := validate("older.yaml", []byte(older))
	if ok || !strings.Contains(out, "is_negative_hits_unknown") {
		t.Errorf("Envoy accepted a hits_addend field it does not know (ok %v):\n%s", ok, out)
	}
}
