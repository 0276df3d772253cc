package helm

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/checks"
)

// TestRedisReplicasFollowTheFleet: the Redis fallback divides each count by the most replicas
// that can run, so that the fleet never admits more than the limit while Redis is down: the
// replica count, or the autoscaler's maximum; never a fixed number.
func TestRedisReplicasFollowTheFleet(t *testing.T) {
	for _, tt := range []struct {
		values string
		want   string
	}{
		{"redis: {addrs: [r:6379]}\n", "2"},
		{"redis: {addrs: [r:6379]}\nreplicaCount: 3\n", "3"},
		{"redis: {addrs: [r:6379]}\nreplicaCount: 3\nautoscaling: {enabled: true, maxReplicas: 7}\n", "7"},
		{"redis: {addrs: [r:6379], replicas: 4}\nreplicaCount: 3\n", "4"},
	} {
		dep := mustRender(t, tt.values).Find("Deployment", "extauthz").(*appsv1.Deployment)
		if got := checks.Env(dep)["EXTAUTHZ_STORE_REDIS_REPLICAS"]; got != tt.want {
			t.Errorf("%q: EXTAUTHZ_STORE_REDIS_REPLICAS = %q, want %q", tt.values, got, tt.want)
		}
	}
}

// TestImagePinned: the image is the chart's appVersion by default, a digest pins it over the
// tag, and latest is refused.
func TestImagePinned(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for values, want := range map[string]string{
		"": "extauthz:" + ch.Metadata.AppVersion,
		"image: {repository: r.example/extauthz, tag: v1.2.3}\n":                         "r.example/extauthz:v1.2.3",
		"image: {repository: r.example/extauthz, tag: v1.2.3, digest: " + digest + "}\n": "r.example/extauthz@" + digest,
	} {
		objs := mustRender(t, values)
		dep := objs.Find("Deployment", "extauthz").(*appsv1.Deployment)
		if got := dep.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%q: image %q, want %q", values, got, want)
		}
		pod := objs.Find("Pod", "extauthz-test").(*corev1.Pod)
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if c.Image != want {
				t.Errorf("%q: test container %s runs %q, want the release's %q", values, c.Name, c.Image, want)
			}
		}
	}
	for _, values := range []string{"image: {tag: latest}\n", "image: {digest: sha256:abc}\n", "image: {digest: 0123}\n"} {
		if _, err := render(t, values); err == nil {
			t.Errorf("%q rendered, want the schema to refuse it", values)
		}
	}
}

// TestKubeVersion: the chart declares the Kubernetes it needs (the preStop sleep action is
// served from 1.30), so that helm install refuses an older cluster instead of a Deployment the
// API server rejects.
func TestKubeVersion(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	dep := mustRender(t, "").Find("Deployment", "extauthz").(*appsv1.Deployment)
	if ps := dep.Spec.Template.Spec.Containers[0].Lifecycle.PreStop; ps == nil || ps.Sleep == nil {
		t.Fatal("no preStop sleep: the requirement below may be relaxed")
	}
	for v, want := range map[string]bool{"v1.29.9": false, "v1.30.0": true, "v1.30.2-eks-1a2b3c": true, "v1.34.1": true} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, v); got != want {
			t.Errorf("kubeVersion %q accepts %s: %v, want %v", ch.Metadata.KubeVersion, v, got, want)
		}
	}
}

// TestHelmTestPod: `helm test` reads /readyz through the Service, by a name the admin listener
// answers to, past the NetworkPolicy, and validates the release's rules with the release's
// binary; no selector of the chart picks the test pod.
func TestHelmTestPod(t *testing.T) {
	objs := mustRender(t, "")
	pod := objs.Find("Pod", "extauthz-test").(*corev1.Pod)
	if pod.Annotations["helm.sh/hook"] != "test" {
		t.Fatalf("test pod annotations %v, want helm.sh/hook: test", pod.Annotations)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("test pod restartPolicy %q, want Never", pod.Spec.RestartPolicy)
	}
	podLabels := labels.Set(pod.Labels)
	svc := objs.Find("Service", "extauthz").(*corev1.Service)
	dep := objs.Find("Deployment", "extauthz").(*appsv1.Deployment)
	if labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service selects the test pod %v", pod.Labels)
	}
	if sel, _ := metav1.LabelSelectorAsSelector(dep.Spec.Selector); sel.Matches(podLabels) {
		t.Errorf("the Deployment selects the test pod %v", pod.Labels)
	}

	if len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("test pod init containers %d, want the /readyz probe", len(pod.Spec.InitContainers))
	}
	probe := pod.Spec.InitContainers[0].Command
	url := probe[len(probe)-1]
	var admin int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "http-admin" {
			admin = p.Port
		}
	}
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/readyz"), "http://")
	name, port, _ := strings.Cut(host, ":")
	if !strings.HasSuffix(url, "/readyz") || port != strconv.Itoa(int(admin)) || !strings.HasPrefix(name, svc.Name+"."+svc.Namespace+".") {
		t.Errorf("test probe %q, want the Service's /readyz on port %d", url, admin)
	}
	var cfg struct {
		Admin struct {
			Hosts []string `json:"hosts"`
		} `json:"admin"`
	}
	cm := objs.Find("ConfigMap", "extauthz-config").(*corev1.ConfigMap)
	if err := yaml.Unmarshal([]byte(cm.Data["extauthz.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Admin.Hosts, name) {
		t.Errorf("admin.hosts %v lacks %q: the admin listener would refuse the test", cfg.Admin.Hosts, name)
	}

	np := objs.Find("NetworkPolicy", "extauthz").(*networkingv1.NetworkPolicy)
	admitted := false
	for _, r := range np.Spec.Ingress {
		if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && *p.Port == intstr.FromString("http-admin")
		}) {
			continue
		}
		for _, peer := range r.From {
			if peer.NamespaceSelector == nil && peer.PodSelector != nil {
				if sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector); err == nil && sel.Matches(podLabels) {
					admitted = true
				}
			}
		}
	}
	if !admitted {
		t.Error("the NetworkPolicy does not admit the test pod to the admin port")
	}

	rules := pod.Spec.Containers[0]
	if len(rules.Args) != 4 || rules.Args[0] != "validate" || rules.Args[1] != "--config" {
		t.Fatalf("test rules container args %q, want validate --config CONFIG RULES", rules.Args)
	}
	for _, p := range rules.Args[2:] {
		var from string
		for _, m := range rules.VolumeMounts {
			if m.MountPath == path.Dir(p) {
				for _, v := range pod.Spec.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						from = v.ConfigMap.Name
					}
				}
			}
		}
		if from != "extauthz-config" && from != "extauthz-rules" {
			t.Errorf("test reads %s from %q, want the release's ConfigMaps", p, from)
		}
	}
	if psc := pod.Spec.SecurityContext; psc == nil || !isTrue(psc.RunAsNonRoot) {
		t.Error("test pod not run as non-root (Pod Security restricted would refuse it)")
	}
}

// TestAdminHostsJoinUsers: the Service's names join the admin.hosts a user sets.
func TestAdminHostsJoinUsers(t *testing.T) {
	cm := mustRender(t, "config: {admin: {hosts: [extauthz.example.org]}}\n").Find("ConfigMap", "extauthz-config").(*corev1.ConfigMap)
	var cfg struct {
		Admin struct {
			Hosts []string `json:"hosts"`
		} `json:"admin"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["extauthz.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"extauthz.example.org", "extauthz", "extauthz.extauthz.svc", "extauthz.extauthz.svc.cluster.local"} {
		if !slices.Contains(cfg.Admin.Hosts, want) {
			t.Errorf("admin.hosts %v lacks %q", cfg.Admin.Hosts, want)
		}
	}
}

// TestNotesStateTheLabels: where the NetworkPolicy is on, the install notes say which labels
// the Envoy pods and namespaces need, and name the headless Service.
func TestNotesStateTheLabels(t *testing.T) {
	notes := func(values string) string {
		ch, err := loader.Load(chartDir)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := chartutil.ReadValues([]byte(values))
		if err != nil {
			t.Fatal(err)
		}
		rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "extauthz", Namespace: "extauthz", IsInstall: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(ch, rv)
		if err != nil {
			t.Fatal(err)
		}
		return files["extauthz/templates/NOTES.txt"]
	}
	on := notes("networkPolicy: {clientNamespaceSelector: {matchLabels: {envoy: \"yes\"}}}\n")
	for _, want := range []string{"kubectl label namespace ENVOY_NAMESPACE envoy=yes", `{"extauthz-client":"true"}`,
		"extauthz-headless.extauthz.svc.cluster.local:9001"} {
		if !strings.Contains(on, want) {
			t.Errorf("NOTES lack %q:\n%s", want, on)
		}
	}
	if off := notes("networkPolicy: {enabled: false}\n"); strings.Contains(off, "kubectl label") {
		t.Errorf("NOTES without the NetworkPolicy still ask for labels:\n%s", off)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }
