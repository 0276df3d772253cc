package helm

import (
	"bytes"
	"os"
	"path"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/checks"
	"github.com/extauthz/extauthz/deploy/internal/manifest"
	"github.com/extauthz/extauthz/deploy/monitoring"
)

func TestMain(m *testing.M) {
	code := m.Run()
	checks.Cleanup()
	os.Exit(code)
}

const chartDir = "extauthz"

// render renders the chart with values (YAML, over values.yaml) as release "extauthz" in
// namespace "extauthz", with Helm's engine, and decodes every object strictly.
func render(t *testing.T, values string) (manifest.Set, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "extauthz", Namespace: "extauthz", IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var all bytes.Buffer
	for _, name := range names {
		if path.Ext(name) != ".yaml" {
			continue
		}
		all.WriteString("\n---\n" + files[name])
	}
	objs, err := manifest.Kubernetes().DecodeAll(all.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, all.String())
	}
	return objs, nil
}

func mustRender(t *testing.T, values string) manifest.Set {
	t.Helper()
	objs, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestChart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		kinds  map[string]int
		redis  bool
		mtls   bool
	}{
		{
			name:   "defaults (memory mode)",
			values: "",
			kinds: map[string]int{"ServiceAccount": 1, "ConfigMap": 2, "Service": 2, "Deployment": 1, "PodDisruptionBudget": 1,
				"NetworkPolicy": 1, "Pod": 1},
		},
		{
			name: "redis, autoscaling, mtls, monitoring",
			values: `
redis: {mode: cluster, addrs: [redis-0.redis:6379, redis-1.redis:6379], existingSecret: redis-auth}
autoscaling: {enabled: true}
mtls: {enabled: true}
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
`,
			kinds: map[string]int{"ServiceAccount": 1, "ConfigMap": 3, "Service": 2, "Deployment": 1, "PodDisruptionBudget": 1,
				"NetworkPolicy": 1, "HorizontalPodAutoscaler": 1, "ServiceMonitor": 1, "PrometheusRule": 1, "Pod": 1},
			redis: true,
			mtls:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, tc.values)
			got := objs.Kinds()
			if len(got) != len(tc.kinds) {
				t.Errorf("kinds %v, want %v", got, tc.kinds)
			}
			for k, n := range tc.kinds {
				if got[k] != n {
					t.Errorf("kinds %v, want %v", got, tc.kinds)
					break
				}
			}
			for _, o := range objs {
				if ns := checks.Meta(o.Value).Namespace; ns != "extauthz" {
					t.Errorf("%s %s in namespace %q", o.Kind, o.Name, ns)
				}
			}
			dep := objs.Find("Deployment", "extauthz").(*appsv1.Deployment)
			c := checks.Chart{
				Deployment:     dep,
				Service:        objs.Find("Service", "extauthz").(*corev1.Service),
				Headless:       objs.Find("Service", "extauthz-headless").(*corev1.Service),
				PDB:            objs.Find("PodDisruptionBudget", "extauthz").(*policyv1.PodDisruptionBudget),
				NetworkPolicy:  objs.Find("NetworkPolicy", "extauthz").(*networkingv1.NetworkPolicy),
				RulesConfigMap: objs.Find("ConfigMap", "extauthz-rules").(*corev1.ConfigMap),
				ConfigMap:      objs.Find("ConfigMap", "extauthz-config").(*corev1.ConfigMap),
				ConfigFile:     "extauthz.yaml",
				MTLS:           tc.mtls,
			}
			if sm, ok := objs.Find("ServiceMonitor", "extauthz").(*monitoringv1.ServiceMonitor); ok {
				c.ServiceMonitor = sm
			} else {
				// Not rendered by default (it needs the operator's CRDs): check the one of a
				// rendering with it, against this rendering's Service.
				c.ServiceMonitor = mustRender(t, "serviceMonitor: {enabled: true}").Find("ServiceMonitor", "extauthz").(*monitoringv1.ServiceMonitor)
			}
			if hpa, ok := objs.Find("HorizontalPodAutoscaler", "extauthz").(*autoscalingv2.HorizontalPodAutoscaler); ok {
				c.HPA = hpa
				if dep.Spec.Replicas != nil {
					t.Error("with autoscaling the Deployment still sets replicas, which every upgrade would reset")
				}
			}
			c.Check(t)

			env := checks.Env(dep)
			if tc.redis {
				if env["EXTAUTHZ_STORE_REDIS_ADDRS"] != "redis-0.redis:6379,redis-1.redis:6379" {
					t.Errorf("EXTAUTHZ_STORE_REDIS_ADDRS = %q", env["EXTAUTHZ_STORE_REDIS_ADDRS"])
				}
				pw := checks.EnvVar(dep, "EXTAUTHZ_STORE_REDIS_PASSWORD")
				if pw == nil || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "redis-auth" {
					t.Errorf("password %+v, want from Secret redis-auth", pw)
				}
			} else if _, ok := env["EXTAUTHZ_STORE_REDIS_ADDRS"]; ok {
				t.Error("memory mode sets a Redis address")
			}
		})
	}
}

// TestRulesChangeKeepsPods: a new rules file changes the rules ConfigMap only, not the pod
// template (no restart: the pods reload it), while a config change rolls the pods.
func TestRulesChangeKeepsPods(t *testing.T) {
	base := mustRender(t, "")
	rules := mustRender(t, "rules: |\n  authority:\n    - {resource: \"GET:/x\", strategy: black, origins: [bad]}\n")
	cfg := mustRender(t, "config: {log: {level: debug}}\n")
	tmpl := func(s manifest.Set) string {
		b, err := yaml.Marshal(s.Find("Deployment", "extauthz").(*appsv1.Deployment).Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	data := func(s manifest.Set) string {
		return s.Find("ConfigMap", "extauthz-rules").(*corev1.ConfigMap).Data["rules.yaml"]
	}
	if data(rules) == data(base) || !strings.Contains(data(rules), "GET:/x") {
		t.Errorf("rules value did not reach the ConfigMap: %q", data(rules))
	}
	if tmpl(rules) != tmpl(base) {
		t.Error("changing the rules changed the pod template: the pods would restart instead of reloading")
	}
	if tmpl(cfg) == tmpl(base) {
		t.Error("changing the config left the pod template alone: the pods would keep the old config")
	}
}

func TestAutoscalingNeedsRedis(t *testing.T) {
	_, err := render(t, "autoscaling: {enabled: true}\n")
	if err == nil || !strings.Contains(err.Error(), "needs redis.addrs") {
		t.Errorf("autoscaling in memory mode: %v, want a refusal", err)
	}
}

// TestMonitoringFilesAreCopies: the chart ships copies of deploy/monitoring's files (a chart
// reads only its own directory); they must not drift.
func TestMonitoringFilesAreCopies(t *testing.T) {
	for file, want := range map[string][]byte{"alerts.yaml": monitoring.Alerts, "dashboard.json": monitoring.Dashboard} {
		got, err := os.ReadFile(path.Join(chartDir, "files", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/files/%s differs from deploy/monitoring/%s: copy it again", chartDir, file, file)
		}
	}
	pr := mustRender(t, "prometheusRule: {enabled: true}").Find("PrometheusRule", "extauthz").(*monitoringv1.PrometheusRule)
	n := 0
	for _, g := range pr.Spec.Groups {
		n += len(g.Rules)
	}
	if want := bytes.Count(monitoring.Alerts, []byte("- alert: ")); n != want || want == 0 {
		t.Errorf("PrometheusRule has %d rules, want the %d alerts of alerts.yaml", n, want)
	}
}

// TestLint runs Helm's own linter on the chart.
func TestLint(t *testing.T) {
	l := lint.All(chartDir, nil, "extauthz", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// TestValuesSchema: values.schema.json rejects a misspelt or mistyped value at render time,
// which Helm would otherwise ignore.
func TestValuesSchema(t *testing.T) {
	for name, values := range map[string]string{
		"misspelt key":       "autoscalling: {enabled: true}\n",
		"misspelt nested":    "redis: {adrs: [r:6379]}\n",
		"bad fallback":       "redis: {fallback: sometimes}\n",
		"port out of range":  "ports: {grpc: 70000}\n",
		"replicas as string": "replicaCount: two\n",
		"gomaxprocs below 0": "gomaxprocs: -1\n",
	} {
		if _, err := render(t, values); err == nil {
			t.Errorf("%s: rendered without error", name)
		}
	}
}

// gomaxprocs sets GOMAXPROCS in the container; by default Go chooses (no variable).
func TestGomaxprocs(t *testing.T) {
	dep := mustRender(t, "").Find("Deployment", "extauthz").(*appsv1.Deployment)
	if v, ok := checks.Env(dep)["GOMAXPROCS"]; ok {
		t.Errorf("by default GOMAXPROCS = %q, want it unset", v)
	}
	dep = mustRender(t, "gomaxprocs: 2\n").Find("Deployment", "extauthz").(*appsv1.Deployment)
	if v := checks.Env(dep)["GOMAXPROCS"]; v != "2" {
		t.Errorf("gomaxprocs 2: GOMAXPROCS = %q, want 2", v)
	}
}
