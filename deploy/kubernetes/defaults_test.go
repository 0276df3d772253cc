package kubernetes

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/monitoring"
)

// TestBaseWithoutTheOperator: the base and the overlays render no object of the Prometheus
// Operator's CRDs, so that they apply on a cluster without it.
func TestBaseWithoutTheOperator(t *testing.T) {
	for _, dir := range []string{"base", "overlays/memory", "overlays/redis"} {
		for _, o := range render(t, dir, "") {
			if strings.HasPrefix(o.APIVersion, "monitoring.coreos.com/") {
				t.Errorf("%s renders %s %s, which needs the Prometheus Operator's CRDs: move it to components/monitoring", dir, o.Kind, o.Name)
			}
		}
	}
}

// TestMonitoringComponent: the component's PrometheusRule holds exactly the alerts of
// deploy/monitoring/alerts.yaml (gen.sh writes it).
func TestMonitoringComponent(t *testing.T) {
	objs := render(t, "user", "resources: [../overlays/redis]\ncomponents: [../components/monitoring]\n")
	pr, ok := objs.Find("PrometheusRule", "extauthz").(*monitoringv1.PrometheusRule)
	if !ok {
		t.Fatal("components/monitoring renders no PrometheusRule extauthz")
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(monitoring.Alerts, &want); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	// kustomize writes a folded expression's more-indented lines with a blank line between
	// them: the same PromQL, which ignores white space.
	got := pr.Spec
	for _, spec := range []*monitoringv1.PrometheusRuleSpec{&got, &want} {
		for i := range spec.Groups {
			for j := range spec.Groups[i].Rules {
				e := &spec.Groups[i].Rules[j].Expr
				*e = intstr.FromString(strings.Join(strings.Fields(e.String()), " "))
			}
		}
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(got, want) {
		t.Error("components/monitoring/prometheusrule.yaml differs from deploy/monitoring/alerts.yaml: run its gen.sh")
	}
}

// TestEnvoyDocNamesTheHeadlessService: the STRICT_DNS cluster of docs/envoy.md, on Kubernetes,
// points at the headless Service, which resolves to every pod.
func TestEnvoyDocNamesTheHeadlessService(t *testing.T) {
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`extauthz-headless\.extauthz\.svc\.cluster\.local`).Match(doc) {
		t.Error("docs/envoy.md: the STRICT_DNS example does not name extauthz-headless.extauthz.svc.cluster.local")
	}
	render(t, "overlays/memory", "").Find("Service", "extauthz-headless")
}
