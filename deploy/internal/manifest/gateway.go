package manifest

import (
	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// EnvoyGateway returns a Decoder of the Gateway API's and Envoy Gateway's kinds used by the
// examples, into the types those projects publish.
func EnvoyGateway() *Decoder {
	d := NewDecoder()
	d.Register("gateway.networking.k8s.io/v1", "HTTPRoute", &gwapiv1.HTTPRoute{})
	d.Register("gateway.networking.k8s.io/v1beta1", "ReferenceGrant", &gwapiv1b1.ReferenceGrant{})
	d.Register("gateway.envoyproxy.io/v1alpha1", "SecurityPolicy", &egv1a1.SecurityPolicy{})
	d.Register("gateway.envoyproxy.io/v1alpha1", "EnvoyPatchPolicy", &egv1a1.EnvoyPatchPolicy{})
	d.Register("gateway.envoyproxy.io/v1alpha1", "EnvoyGateway", &egv1a1.EnvoyGateway{})
	return d
}
