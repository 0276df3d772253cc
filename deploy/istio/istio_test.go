package istio

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/checks"
	"github.com/extauthz/extauthz/deploy/internal/manifest"
)

// The Service of deploy/kubernetes and of the chart installed as release extauthz in
// namespace extauthz.
const (
	serviceHost = "extauthz.extauthz.svc.cluster.local"
	grpcPort    = 9001
)

func decodeFile(t *testing.T, file string) manifest.Set {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Istio().DecodeAll(raw)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}

func meshConfig(t *testing.T) *meshv1alpha1.MeshConfig {
	t.Helper()
	raw, err := os.ReadFile("meshconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var outer struct {
		MeshConfig json.RawMessage `json:"meshConfig"`
	}
	if err := yaml.UnmarshalStrict(raw, &outer); err != nil {
		t.Fatalf("meshconfig.yaml: %v", err)
	}
	mc := &meshv1alpha1.MeshConfig{}
	if err := manifest.DecodeProto([]byte(outer.MeshConfig), mc); err != nil {
		t.Fatalf("meshconfig.yaml: %v", err)
	}
	return mc
}

func TestMeshConfigProvider(t *testing.T) {
	mc := meshConfig(t)
	if len(mc.GetExtensionProviders()) != 1 {
		t.Fatalf("extensionProviders %v, want 1", mc.GetExtensionProviders())
	}
	p := mc.GetExtensionProviders()[0]
	g := p.GetEnvoyExtAuthzGrpc()
	if g == nil {
		t.Fatalf("provider %s is not envoyExtAuthzGrpc", p.GetName())
	}
	if g.GetService() != serviceHost || g.GetPort() != grpcPort {
		t.Errorf("provider calls %s:%d, want %s:%d", g.GetService(), g.GetPort(), serviceHost, grpcPort)
	}
	if g.GetFailOpen() {
		t.Error("ext_authz fails open: authority rules would not hold while extauthz is down")
	}
}

func TestAuthorizationPolicyIsCustom(t *testing.T) {
	objs := decodeFile(t, "authorizationpolicy.yaml")
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	ap := objs[0].Value.(manifest.IstioSpec).Spec().(*securityv1beta1.AuthorizationPolicy)
	if ap.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM {
		t.Errorf("action %v, want CUSTOM", ap.GetAction())
	}
	want := meshConfig(t).GetExtensionProviders()[0].GetName()
	if ap.GetProvider().GetName() != want {
		t.Errorf("provider %q, want the mesh's %q", ap.GetProvider().GetName(), want)
	}
	if len(ap.GetSelector().GetMatchLabels()) == 0 {
		t.Error("no workload selector: the policy would apply to every workload of istio-system")
	}
}

func TestEnvoyFilterRateLimit(t *testing.T) {
	objs := decodeFile(t, "envoyfilter-ratelimit.yaml")
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	ef := objs[0].Value.(manifest.IstioSpec).Spec().(*networkingv1alpha3.EnvoyFilter)
	rules := checks.BaseRules(t)
	var sawFilter, sawLimits bool
	for i, cp := range ef.GetConfigPatches() {
		value := cp.GetPatch().GetValue().AsMap()
		switch cp.GetApplyTo() {
		case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
			sawFilter = true
			if cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
				cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				t.Errorf("patch %d: the filter must go before the router (after ext_authz)", i)
			}
			f := &hcmv3.HttpFilter{}
			if err := manifest.DecodeProto(value, f); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			rl := &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatalf("patch %d: typed_config is not a RateLimit: %v", i, err)
			}
			checks.RateLimitFilter(t, rl, rules)
			want := "outbound|9001||" + serviceHost
			if got := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != want {
				t.Errorf("rate-limit service cluster %q, want Istio's %q", got, want)
			}
		case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
			sawLimits = true
			// A MERGE into the generated virtual host: give the fields it has already, so
			// that Envoy's validation of the message passes on the merged result.
			value["name"], value["domains"] = "generated", []any{"*"}
			vh := &routev3.VirtualHost{}
			if err := manifest.DecodeProto(value, vh); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			checks.RateLimits(t, vh.GetRateLimits(), rules)
		default:
			t.Errorf("patch %d: applyTo %v not checked", i, cp.GetApplyTo())
		}
	}
	if !sawFilter || !sawLimits {
		t.Errorf("filter patch %v, rate_limits patch %v: want both", sawFilter, sawLimits)
	}
}

// TestEnvoyFilterCheckHeaders: the patch merges into the ext_authz filter of the CUSTOM policy
// an allowed_headers list equal to envoy-config/envoy.yaml's, so that the gateway sends the
// service what the shipped Envoy does and no other header (no cookie, no authorization).
func TestEnvoyFilterCheckHeaders(t *testing.T) {
	objs := decodeFile(t, "envoyfilter-extauthz-headers.yaml")
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	ef := objs[0].Value.(manifest.IstioSpec).Spec().(*networkingv1alpha3.EnvoyFilter)
	if len(ef.GetConfigPatches()) != 1 {
		t.Fatalf("%d patches, want 1", len(ef.GetConfigPatches()))
	}
	cp := ef.GetConfigPatches()[0]
	if cp.GetApplyTo() != networkingv1alpha3.EnvoyFilter_HTTP_FILTER || cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_MERGE ||
		cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.ext_authz" {
		t.Fatalf("patch %v: want a MERGE into the HTTP filter envoy.filters.http.ext_authz", cp)
	}
	f := &hcmv3.HttpFilter{}
	if err := manifest.DecodeProto(cp.GetPatch().GetValue().AsMap(), f); err != nil {
		t.Fatal(err)
	}
	got := &extauthzv3.ExtAuthz{}
	if err := f.GetTypedConfig().UnmarshalTo(got); err != nil {
		t.Fatalf("typed_config is not an ExtAuthz: %v", err)
	}
	if want := shippedAllowedHeaders(t); !proto.Equal(got.GetAllowedHeaders(), want) {
		t.Errorf("allowed_headers %v, envoy-config/envoy.yaml has %v", got.GetAllowedHeaders(), want)
	}
	for _, h := range []string{"cookie", "authorization"} {
		for _, p := range got.GetAllowedHeaders().GetPatterns() {
			if p.GetExact() == h || (p.GetPrefix() != "" && strings.HasPrefix(h, p.GetPrefix())) {
				t.Errorf("allowed_headers lets %s through", h)
			}
		}
	}
	// Nothing else is merged: the provider settings stay meshconfig.yaml's.
	got.AllowedHeaders = nil
	if !proto.Equal(got, &extauthzv3.ExtAuthz{}) {
		t.Errorf("the patch sets more than allowed_headers: %v", got)
	}
}

// shippedAllowedHeaders is the allowed_headers of envoy-config/envoy.yaml's ext_authz filter.
func shippedAllowedHeaders(t *testing.T) *matcherv3.ListStringMatcher {
	t.Helper()
	raw, err := os.ReadFile("../../envoy-config/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							HTTPFilters []struct {
								Name        string `json:"name"`
								TypedConfig struct {
									AllowedHeaders map[string]any `json:"allowed_headers"`
								} `json:"typed_config"`
							} `json:"http_filters"`
						} `json:"typed_config"`
					} `json:"filters"`
				} `json:"filter_chains"`
			} `json:"listeners"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, l := range doc.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, nf := range fc.Filters {
				for _, hf := range nf.TypedConfig.HTTPFilters {
					if hf.Name != "envoy.filters.http.ext_authz" {
						continue
					}
					m := &matcherv3.ListStringMatcher{}
					if err := manifest.DecodeProto(hf.TypedConfig.AllowedHeaders, m); err != nil {
						t.Fatal(err)
					}
					return m
				}
			}
		}
	}
	t.Fatal("envoy-config/envoy.yaml has no ext_authz filter")
	return nil
}
