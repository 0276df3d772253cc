package kubernetes

import (
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/extauthz/extauthz/deploy/internal/checks"
	"github.com/extauthz/extauthz/deploy/internal/manifest"
)

// render builds the kustomization in dir (relative to this directory) with kustomize's
// engine, in process, and decodes every object it renders strictly. extra, when not "", is a
// kustomization written beside the overlays (in a copy of this directory held in memory),
// as a user's own would be.
func render(t *testing.T, dir, extra string) manifest.Set {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(p string, d iofs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fs.WriteFile(filepath.Join("/k", p), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if extra != "" {
		if err := fs.WriteFile("/k/user/kustomization.yaml", []byte(extra)); err != nil {
			t.Fatal(err)
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(fs, filepath.Join("/k", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Kubernetes().DecodeAll(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, out)
	}
	return objs
}

func TestOverlays(t *testing.T) {
	for _, tc := range []struct {
		dir        string
		redis      bool
		mtls       bool
		monitoring bool
	}{
		{dir: "overlays/memory"},
		{dir: "overlays/redis", redis: true},
		{dir: "overlays/memory", mtls: true},
		{dir: "overlays/redis", redis: true, mtls: true},
		{dir: "overlays/redis", redis: true, monitoring: true},
		{dir: "overlays/memory", mtls: true, monitoring: true},
	} {
		name := tc.dir
		var components []string
		if tc.mtls {
			name += "+mtls"
			components = append(components, "../components/mtls")
		}
		if tc.monitoring {
			name += "+monitoring"
			components = append(components, "../components/monitoring")
		}
		t.Run(name, func(t *testing.T) {
			dir, extra := tc.dir, ""
			if len(components) > 0 {
				// The overlay with the components added, as its comments say.
				dir = "user"
				extra = "namespace: extauthz\nresources: [../" + tc.dir + "]\ncomponents: [" + strings.Join(components, ", ") + "]\n"
			}
			objs := render(t, dir, extra)
			want := map[string]int{
				"Namespace": 1, "ServiceAccount": 1, "ConfigMap": 2, "Service": 2, "Deployment": 1,
				"PodDisruptionBudget": 1, "HorizontalPodAutoscaler": 1, "NetworkPolicy": 1,
			}
			if !tc.redis {
				// Memory mode pins the replicas: no autoscaler.
				delete(want, "HorizontalPodAutoscaler")
			}
			if tc.monitoring {
				want["ServiceMonitor"], want["PrometheusRule"] = 1, 1
			}
			if got := objs.Kinds(); !equalCounts(got, want) {
				t.Errorf("kinds rendered %v, want %v", got, want)
			}
			for _, o := range objs {
				if o.Kind == "Namespace" {
					continue
				}
				meta := checks.Meta(o.Value)
				if meta.Namespace != "extauthz" {
					t.Errorf("%s %s in namespace %q, want extauthz", o.Kind, o.Name, meta.Namespace)
				}
				if meta.Labels["app.kubernetes.io/name"] != "extauthz" {
					t.Errorf("%s %s: labels %v lack app.kubernetes.io/name", o.Kind, o.Name, meta.Labels)
				}
			}

			dep := objs.Find("Deployment", "extauthz").(*appsv1.Deployment)
			var rules, config *corev1.ConfigMap
			for _, o := range objs {
				if cm, ok := o.Value.(*corev1.ConfigMap); ok {
					switch {
					case cm.Name == "extauthz-rules":
						rules = cm
					case strings.HasPrefix(cm.Name, "extauthz-config-"):
						config = cm // named with kustomize's content hash
					}
				}
			}
			if rules == nil || config == nil {
				t.Fatalf("want ConfigMaps extauthz-rules (no hash) and extauthz-config-<hash>, got %v", objs.Kinds())
			}
			c := checks.Chart{
				Deployment:     dep,
				Service:        objs.Find("Service", "extauthz").(*corev1.Service),
				Headless:       objs.Find("Service", "extauthz-headless").(*corev1.Service),
				PDB:            objs.Find("PodDisruptionBudget", "extauthz").(*policyv1.PodDisruptionBudget),
				NetworkPolicy:  objs.Find("NetworkPolicy", "extauthz").(*networkingv1.NetworkPolicy),
				RulesConfigMap: rules,
				ConfigMap:      config,
				ConfigFile:     "extauthz.yaml",
				MTLS:           tc.mtls,
			}
			if sm, ok := objs.Find("ServiceMonitor", "extauthz").(*monitoringv1.ServiceMonitor); ok {
				c.ServiceMonitor = sm
			} else {
				// Not in the overlay (the operator's CRDs are a component): check the component's
				// against this rendering's Service.
				c.ServiceMonitor = render(t, "user", "namespace: extauthz\nresources: [../"+tc.dir+"]\ncomponents: [../components/monitoring]\n").
					Find("ServiceMonitor", "extauthz").(*monitoringv1.ServiceMonitor)
			}
			if hpa, ok := objs.Find("HorizontalPodAutoscaler", "extauthz").(*autoscalingv2.HorizontalPodAutoscaler); ok {
				c.HPA = hpa
			}
			c.Check(t)

			env := checks.Env(dep)
			if tc.redis {
				if env["EXTAUTHZ_STORE_REDIS_ADDRS"] == "" {
					t.Error("redis overlay: EXTAUTHZ_STORE_REDIS_ADDRS not set")
				}
				pw := checks.EnvVar(dep, "EXTAUTHZ_STORE_REDIS_PASSWORD")
				if pw == nil || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "extauthz-redis" {
					t.Errorf("redis overlay: password %+v, want from Secret extauthz-redis", pw)
				}
				// The autoscaler owns the replicas: a count in the Deployment would reset its
				// choice on every apply.
				if dep.Spec.Replicas != nil {
					t.Errorf("redis overlay: the Deployment sets replicas %d beside its autoscaler", *dep.Spec.Replicas)
				}
				// The fallback divides by the most replicas that can run, so the fleet never
				// admits more than a limit while Redis is down.
				if c.HPA == nil {
					t.Fatal("redis overlay: no HorizontalPodAutoscaler")
				}
				if got, want := env["EXTAUTHZ_STORE_REDIS_REPLICAS"], strconv.Itoa(int(c.HPA.Spec.MaxReplicas)); got != want {
					t.Errorf("redis overlay: EXTAUTHZ_STORE_REDIS_REPLICAS %q, want the autoscaler's maxReplicas %s", got, want)
				}
			} else {
				if _, ok := env["EXTAUTHZ_STORE_REDIS_ADDRS"]; ok {
					t.Error("memory overlay sets a Redis address")
				}
				if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
					t.Errorf("memory overlay: replicas %v, want 2 pinned", dep.Spec.Replicas)
				}
			}
			if tc.mtls {
				for _, svc := range []*corev1.Service{c.Service, c.Headless} {
					for _, p := range svc.Spec.Ports {
						if p.Name == "grpc" && p.AppProtocol != nil {
							t.Errorf("mtls: Service %s's grpc port still declares appProtocol %s", svc.Name, *p.AppProtocol)
						}
					}
				}
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestNetworkPolicyPeers checks that kustomize's labels did not reach the policy's peer
// selector: only the Envoy pods' label selects who may call the gRPC port.
func TestNetworkPolicyPeers(t *testing.T) {
	objs := render(t, "overlays/memory", "")
	np := objs.Find("NetworkPolicy", "extauthz").(*networkingv1.NetworkPolicy)
	for _, rule := range np.Spec.Ingress {
		grpc := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && *p.Port == intstr.FromString("grpc")
		})
		if !grpc {
			continue
		}
		for _, peer := range rule.From {
			if peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) != 1 || peer.PodSelector.MatchLabels["extauthz-client"] != "true" {
				t.Errorf("grpc peer pod selector %+v, want exactly extauthz-client=true", peer.PodSelector)
			}
		}
	}
}
