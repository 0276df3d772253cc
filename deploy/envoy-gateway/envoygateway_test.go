package envoygateway

import (
	"os"
	"reflect"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/checks"
	"github.com/extauthz/extauthz/deploy/internal/manifest"
)

func decodeFile(t *testing.T, file string) manifest.Set {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.EnvoyGateway().DecodeAll(raw)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}

func TestSecurityPolicyExtAuth(t *testing.T) {
	objs := decodeFile(t, "securitypolicy.yaml")
	route, _ := objs.Find("HTTPRoute", "items").(*gwapiv1.HTTPRoute)
	sp, _ := objs.Find("SecurityPolicy", "items-extauthz").(*egv1a1.SecurityPolicy)
	grant, _ := objs.Find("ReferenceGrant", "extauthz-from-default").(*gwapiv1b1.ReferenceGrant)
	if route == nil || sp == nil || grant == nil {
		t.Fatalf("want an HTTPRoute, a SecurityPolicy and a ReferenceGrant, got %v", objs.Kinds())
	}
	if len(sp.Spec.TargetRefs) != 1 || string(sp.Spec.TargetRefs[0].Name) != route.Name || sp.Spec.TargetRefs[0].Kind != "HTTPRoute" {
		t.Errorf("policy targets %+v, want HTTPRoute %s", sp.Spec.TargetRefs, route.Name)
	}
	ea := sp.Spec.ExtAuth
	if ea == nil || ea.GRPC == nil || ea.HTTP != nil {
		t.Fatalf("extAuth %+v, want gRPC", ea)
	}
	if ea.FailOpen == nil || *ea.FailOpen {
		t.Error("ext auth fails open: authority rules would not hold while extauthz is down")
	}
	if len(ea.GRPC.BackendRefs) != 1 {
		t.Fatalf("backendRefs %+v", ea.GRPC.BackendRefs)
	}
	ref := ea.GRPC.BackendRefs[0]
	if ref.Name != "extauthz" || ref.Namespace == nil || *ref.Namespace != "extauthz" || ref.Port == nil || *ref.Port != 9001 {
		t.Errorf("backendRef %+v, want Service extauthz/extauthz port 9001", ref)
	}
	// The context extension names the resource, which a rule of the base must know.
	resource := ""
	for _, ce := range ea.ContextExtensions {
		if ce.Name == "resource" && ce.Value != nil {
			resource = *ce.Value
		}
	}
	known := false
	for _, r := range checks.BaseRules(t).ParamFlow {
		known = known || r.Resource == resource
	}
	if !known {
		t.Errorf("context extension resource %q is no rule's resource", resource)
	}
	// The grant admits exactly this policy's namespace to the Service.
	if grant.Namespace != string(*ref.Namespace) || len(grant.Spec.From) != 1 || string(grant.Spec.From[0].Namespace) != sp.Namespace ||
		grant.Spec.From[0].Kind != "SecurityPolicy" || len(grant.Spec.To) != 1 || grant.Spec.To[0].Kind != "Service" ||
		grant.Spec.To[0].Name == nil || string(*grant.Spec.To[0].Name) != "extauthz" {
		t.Errorf("ReferenceGrant %+v does not admit the policy to the Service", grant.Spec)
	}
}

func TestRateLimitPatch(t *testing.T) {
	objs := decodeFile(t, "ratelimit-patch.yaml")
	// Every document is for kubectl apply: the EnvoyGateway config is not a resource.
	if kinds := objs.Kinds(); len(objs) != 1 || kinds["EnvoyPatchPolicy"] != 1 {
		t.Fatalf("want only the EnvoyPatchPolicy, got %v", kinds)
	}
	epp, _ := objs.Find("EnvoyPatchPolicy", "extauthz-ratelimit").(*egv1a1.EnvoyPatchPolicy)
	if epp == nil {
		t.Fatalf("no EnvoyPatchPolicy extauthz-ratelimit")
	}
	if epp.Spec.Type != egv1a1.JSONPatchEnvoyPatchType {
		t.Errorf("patch type %s", epp.Spec.Type)
	}
	rules := checks.BaseRules(t)
	var filterCluster, clusterName string
	seen := map[string]bool{}
	for i, p := range epp.Spec.JSONPatches {
		seen[string(p.Type)] = true
		if p.Operation.Value == nil {
			t.Fatalf("patch %d has no value", i)
		}
		raw := p.Operation.Value.Raw
		switch p.Type {
		case "type.googleapis.com/envoy.config.listener.v3.Listener":
			f := &hcmv3.HttpFilter{}
			if err := manifest.DecodeProto(raw, f); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			rl := &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			checks.RateLimitFilter(t, rl, rules)
			filterCluster = rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		case "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":
			vh := &routev3.VirtualHost{}
			if err := manifest.DecodeProto(append(append([]byte(`{"name":"v","domains":["*"],"rate_limits":`), raw...), '}'), vh); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			checks.RateLimits(t, vh.GetRateLimits(), rules)
		case "type.googleapis.com/envoy.config.cluster.v3.Cluster":
			c := &clusterv3.Cluster{}
			if err := manifest.DecodeProto(raw, c); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			clusterName = c.GetName()
			sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() != "extauthz.extauthz.svc.cluster.local" || sa.GetPortValue() != 9001 {
				t.Errorf("cluster reaches %s:%d, want the extauthz Service's gRPC port", sa.GetAddress(), sa.GetPortValue())
			}
			if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
				t.Error("cluster does not speak HTTP/2: gRPC needs it")
			}
			if want := shippedCluster(t).GetCircuitBreakers(); !proto.Equal(c.GetCircuitBreakers(), want) {
				t.Errorf("circuit_breakers %v, want envoy-config/envoy.yaml's %v", c.GetCircuitBreakers(), want)
			}
		default:
			t.Errorf("patch %d: type %s not checked", i, p.Type)
		}
	}
	if len(seen) != 3 {
		t.Errorf("patched %v, want the listener, the route configuration and a cluster", seen)
	}
	if filterCluster == "" || filterCluster != clusterName {
		t.Errorf("the filter calls cluster %q, the patch adds %q", filterCluster, clusterName)
	}
}

// TestGatewayHelmValues: the values enable EnvoyPatchPolicy in Envoy Gateway's config (the
// chart renders config.envoyGateway as its EnvoyGateway document) and set nothing else.
func TestGatewayHelmValues(t *testing.T) {
	raw, err := os.ReadFile("gateway-helm-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Config struct {
			EnvoyGateway egv1a1.EnvoyGatewaySpec `json:"envoyGateway"`
		} `json:"config"`
	}
	if err := yaml.UnmarshalStrict(raw, &v); err != nil {
		t.Fatalf("gateway-helm-values.yaml: %v", err)
	}
	eg := v.Config.EnvoyGateway
	if eg.ExtensionAPIs == nil || !eg.ExtensionAPIs.EnableEnvoyPatchPolicy {
		t.Error("the values do not enable EnvoyPatchPolicy: ratelimit-patch.yaml would be ignored")
	}
	eg.ExtensionAPIs = nil
	if !reflect.DeepEqual(eg, egv1a1.EnvoyGatewaySpec{}) {
		t.Errorf("the values set more than extensionApis: %+v", eg)
	}
}

// shippedCluster is the extauthz cluster of envoy-config/envoy.yaml.
func shippedCluster(t *testing.T) *clusterv3.Cluster {
	t.Helper()
	raw, err := os.ReadFile("../../envoy-config/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		StaticResources struct {
			Clusters []map[string]any `json:"clusters"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range doc.StaticResources.Clusters {
		if c["name"] == "extauthz" {
			// Only the fields compared: the rest may hold extension types this module's
			// decoder does not register.
			out := &clusterv3.Cluster{}
			if err := manifest.DecodeProto(map[string]any{"name": c["name"], "circuit_breakers": c["circuit_breakers"]}, out); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatal("envoy-config/envoy.yaml has no extauthz cluster")
	return nil
}
