package istio

import (
	"encoding/json"
	"os"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
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
