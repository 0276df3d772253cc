package manifest

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	networkingv1alpha3api "istio.io/api/networking/v1alpha3"
	securityv1beta1api "istio.io/api/security/v1beta1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Istio returns a Decoder of Istio's kinds used by the examples. Istio's client types decode
// their spec with unknown fields allowed, so the spec is decoded a second time, strictly, with
// protojson into the spec's message (istio.io/api), and the object's other fields strictly.
func Istio() *Decoder {
	d := NewDecoder()
	d.RegisterFunc("security.istio.io/v1", "AuthorizationPolicy", istioKind(func() (any, proto.Message) {
		o := &securityv1.AuthorizationPolicy{}
		return o, &securityv1beta1api.AuthorizationPolicy{}
	}))
	d.RegisterFunc("networking.istio.io/v1alpha3", "EnvoyFilter", istioKind(func() (any, proto.Message) {
		o := &networkingv1alpha3.EnvoyFilter{}
		return o, &networkingv1alpha3api.EnvoyFilter{}
	}))
	return d
}

// IstioSpec returns the strictly decoded spec of an object decoded by Istio().
type IstioSpec interface{ Spec() proto.Message }

type istioObject struct {
	obj  any
	spec proto.Message
}

func (o *istioObject) Spec() proto.Message { return o.spec }

func istioKind(newObj func() (any, proto.Message)) func([]byte) (any, error) {
	return func(doc []byte) (any, error) {
		var outer struct {
			TypeMeta `json:",inline"`
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     json.RawMessage   `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(doc, &outer); err != nil {
			return nil, err
		}
		obj, spec := newObj()
		if err := yaml.Unmarshal(doc, obj); err != nil {
			return nil, err
		}
		if err := DecodeProto([]byte(outer.Spec), spec); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
		return &istioObject{obj: obj, spec: spec}, nil
	}
}
