package monitoring

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The name of the extauthz cluster in each shipped Envoy config: envoy-config/envoy.yaml's,
// the Istio example's (Istio's outbound|PORT||HOST) and the Envoy Gateway patch's.
var extauthzClusters = []string{"extauthz", "outbound|9001||extauthz.extauthz.svc.cluster.local", "extauthz-ratelimit"}

// TestEnvoyAlerts: envoy-alerts.yaml passes promtool, each of its alerts has a unit test in
// envoy-alerts_test.yaml, and the overflow alert selects every shipped name of the extauthz
// cluster and no other cluster. (e2e/envoy's TestActiveOverflow shows real Envoy exporting
// envoy_cluster_upstream_rq_active_overflow{envoy_cluster_name="extauthz"}.)
func TestEnvoyAlerts(t *testing.T) {
	out := promtool(t, "check", "rules", "envoy-alerts.yaml")
	if !strings.Contains(out, "SUCCESS: 1 rules found") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	if out := promtool(t, "test", "rules", "envoy-alerts_test.yaml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
	raw, err := os.ReadFile("envoy-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &r); err != nil {
		t.Fatalf("envoy-alerts.yaml: %v", err)
	}
	tests, err := os.ReadFile("envoy-alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if !strings.Contains(string(tests), "alertname: "+rule.Alert+"\n") {
				t.Errorf("envoy-alerts_test.yaml has no test of %s", rule.Alert)
			}
			if rule.Alert == "ExtauthzEnvoyCallsOverflow" {
				expr = rule.Expr
			}
		}
	}
	m := regexp.MustCompile("envoy_cluster_upstream_rq_active_overflow\\{envoy_cluster_name=~`([^`]*)`\\}").FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("ExtauthzEnvoyCallsOverflow: no envoy_cluster_name matcher on the overflow counter in %q", expr)
	}
	re := regexp.MustCompile("^(?:" + m[1] + ")$") // Prometheus anchors label regexes
	for _, name := range extauthzClusters {
		if !re.MatchString(name) {
			t.Errorf("the alert does not select the cluster %q", name)
		}
	}
	for _, name := range []string{"upstream", "extauthz-old", "outbound|9001||other.extauthz.svc.cluster.local"} {
		if re.MatchString(name) {
			t.Errorf("the alert selects the cluster %q", name)
		}
	}
}
