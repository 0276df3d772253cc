// Package checks asserts what every rendering of extauthz's Kubernetes objects must hold,
// whether kustomize or the Helm chart made them: probes on the service's own paths and ports,
// a non-root read-only container, the rules ConfigMap mounted as a directory where the config
// reads it, selectors that select the pods, gRPC admitted only from the Envoy pods, and the
// config and rules accepted by the service itself (extauthz validate, with the built binary).
package checks

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/service"
)

// Meta returns the ObjectMeta of a decoded Kubernetes object.
func Meta(v any) metav1.ObjectMeta {
	if o, ok := v.(metav1.Object); ok {
		return metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), Labels: o.GetLabels()}
	}
	return metav1.ObjectMeta{}
}

// Chart is one rendering of the objects.
type Chart struct {
	Deployment     *appsv1.Deployment
	Service        *corev1.Service
	Headless       *corev1.Service // the headless Service for STRICT_DNS clusters
	PDB            *policyv1.PodDisruptionBudget
	HPA            *autoscalingv2.HorizontalPodAutoscaler // nil when the rendering has none
	NetworkPolicy  *networkingv1.NetworkPolicy
	ServiceMonitor *monitoringv1.ServiceMonitor
	RulesConfigMap *corev1.ConfigMap
	ConfigMap      *corev1.ConfigMap // holds the service's config file
	ConfigFile     string            // its key in ConfigMap
	MTLS           bool              // the gRPC listener serves mTLS from a Secret
}

// serviceConfig is the part of the config file the checks read.
type serviceConfig struct {
	GRPCAddr  string `json:"grpc_addr"`
	AdminAddr string `json:"admin_addr"`
	RulesFile string `json:"rules_file"`
}

// Check asserts the properties every rendering must have.
func (c *Chart) Check(t *testing.T) {
	t.Helper()
	dep := c.Deployment
	pod := dep.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("deployment has %d containers, want 1", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]

	// The config file: where the Deployment points --config, in the ConfigMap mounted there.
	cfgPath := flagValue(ctr.Args, "--config")
	if cfgPath == "" {
		t.Fatalf("container args %q: no --config", ctr.Args)
	}
	cfgVol := mountedAt(t, pod.Spec, ctr, path.Dir(cfgPath))
	if cfgVol == nil || cfgVol.ConfigMap == nil || cfgVol.ConfigMap.Name != c.ConfigMap.Name {
		t.Fatalf("--config %s: directory not mounted from ConfigMap %s (volume %+v)", cfgPath, c.ConfigMap.Name, cfgVol)
	}
	if path.Base(cfgPath) != c.ConfigFile || c.ConfigMap.Data[c.ConfigFile] == "" {
		t.Fatalf("--config %s: ConfigMap %s has no key %s", cfgPath, c.ConfigMap.Name, path.Base(cfgPath))
	}
	var cfg serviceConfig
	if err := yaml.Unmarshal([]byte(c.ConfigMap.Data[c.ConfigFile]), &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	defGRPC, defAdmin := service.Defaults(t)
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = defGRPC
	}

	// Ports: the container's named ports are the config's, which are the service's defaults.
	grpcPort, adminPort := port(t, cfg.GRPCAddr), port(t, cfg.AdminAddr)
	if want := port(t, defGRPC); grpcPort != want {
		t.Errorf("grpc_addr %s: port %d, want the service's default %d", cfg.GRPCAddr, grpcPort, want)
	}
	if want := port(t, defAdmin); adminPort != want {
		t.Errorf("admin_addr %s: port %d, want the service's default %d", cfg.AdminAddr, adminPort, want)
	}
	if host, _, _ := net.SplitHostPort(cfg.AdminAddr); host == "127.0.0.1" || host == "localhost" || host == "::1" {
		t.Errorf("admin_addr %s: loopback, which the kubelet's probes and Prometheus cannot reach", cfg.AdminAddr)
	}
	if p := containerPort(ctr, "grpc"); p != grpcPort {
		t.Errorf("container port grpc = %d, want %d", p, grpcPort)
	}
	if p := containerPort(ctr, "http-admin"); p != adminPort {
		t.Errorf("container port http-admin = %d, want %d", p, adminPort)
	}

	// Probes: readiness on /readyz, liveness on /healthz, both on the admin port.
	for name, probe := range map[string]struct {
		p    *corev1.Probe
		path string
	}{
		"readiness": {ctr.ReadinessProbe, "/readyz"},
		"liveness":  {ctr.LivenessProbe, "/healthz"},
	} {
		if probe.p == nil || probe.p.HTTPGet == nil {
			t.Errorf("%s probe: %+v, want an HTTP GET", name, probe.p)
			continue
		}
		g := probe.p.HTTPGet
		if g.Path != probe.path || resolvePort(ctr, g.Port) != adminPort {
			t.Errorf("%s probe: GET %s on port %s, want %s on %d", name, g.Path, g.Port.String(), probe.path, adminPort)
		}
	}

	// Security: non-root, read-only root, no privilege escalation, no capabilities.
	psc, sc := pod.Spec.SecurityContext, ctr.SecurityContext
	nonRoot := (sc != nil && isTrue(sc.RunAsNonRoot)) || (psc != nil && isTrue(psc.RunAsNonRoot))
	if !nonRoot {
		t.Error("runAsNonRoot not set")
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want a non-zero runAsUser", psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	if sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v: want read-only root, no privilege escalation, capabilities drop ALL", sc)
	}

	// GOMEMLIMIT is left to the service, which takes 90% of the container's limit: the
	// runtime's variable at the whole limit leaves nothing for what the heap does not count.
	if v := EnvVar(dep, "GOMEMLIMIT"); v != nil {
		t.Errorf("GOMEMLIMIT set (%+v): it overrides the service's own 90%% of the container's limit", v)
	}

	// The image: a version or a digest, never latest (nor no tag, which means latest).
	if !pinnedImage(ctr.Image) {
		t.Errorf("image %q: want a version tag or a digest, not latest", ctr.Image)
	}

	// Resources: requests for scheduling, a memory limit.
	if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", ctr.Resources)
	}

	// Rules: the rules file is a key of the rules ConfigMap, whose directory is mounted
	// whole (no subPath, which the kubelet never updates), so the ..data swap reloads it.
	if cfg.RulesFile == "" {
		t.Fatal("config names no rules_file")
	}
	rulesVol := mountedAt(t, pod.Spec, ctr, path.Dir(cfg.RulesFile))
	if rulesVol == nil || rulesVol.ConfigMap == nil || rulesVol.ConfigMap.Name != c.RulesConfigMap.Name {
		t.Errorf("rules_file %s: directory not mounted from ConfigMap %s (volume %+v)", cfg.RulesFile, c.RulesConfigMap.Name, rulesVol)
	}
	if c.RulesConfigMap.Data[path.Base(cfg.RulesFile)] == "" {
		t.Errorf("rules ConfigMap %s has no key %s", c.RulesConfigMap.Name, path.Base(cfg.RulesFile))
	}
	for _, m := range ctr.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("volume %s mounted with a subPath: the kubelet would never update it", m.Name)
		}
		if !m.ReadOnly {
			t.Errorf("volume %s mounted read-write", m.Name)
		}
	}

	// mTLS: the TLS files come from a Secret mounted as a directory, or are not set at all.
	env := Env(dep)
	tlsVars := []string{"EXTAUTHZ_TLS_CERT_FILE", "EXTAUTHZ_TLS_KEY_FILE", "EXTAUTHZ_TLS_CLIENT_CA_FILE"}
	for _, v := range tlsVars {
		file, set := env[v]
		if !c.MTLS {
			if set {
				t.Errorf("%s set without mTLS", v)
			}
			continue
		}
		vol := mountedAt(t, pod.Spec, ctr, path.Dir(file))
		if vol == nil || vol.Secret == nil {
			t.Errorf("%s=%s: directory not mounted from a Secret", v, file)
		}
	}

	// Selectors select the pods.
	podLabels := labels.Set(pod.Labels)
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("deployment selector %v does not match its pods %v", dep.Spec.Selector, pod.Labels)
	}
	if !labels.SelectorFromSet(c.Service.Spec.Selector).Matches(podLabels) || len(c.Service.Spec.Selector) == 0 {
		t.Errorf("service selector %v does not match the pods %v", c.Service.Spec.Selector, pod.Labels)
	}
	if sel, err := metav1.LabelSelectorAsSelector(c.PDB.Spec.Selector); err != nil || !sel.Matches(podLabels) || sel.Empty() {
		t.Errorf("PDB selector %v does not match the pods", c.PDB.Spec.Selector)
	}
	if c.PDB.Spec.MinAvailable == nil && c.PDB.Spec.MaxUnavailable == nil {
		t.Error("PDB sets neither minAvailable nor maxUnavailable")
	}
	if c.HPA != nil && (c.HPA.Spec.ScaleTargetRef.Kind != "Deployment" || c.HPA.Spec.ScaleTargetRef.Name != dep.Name) {
		t.Errorf("HPA targets %+v, want Deployment %s", c.HPA.Spec.ScaleTargetRef, dep.Name)
	}

	// Service: the grpc port reaches the container's gRPC port.
	svcGRPC := servicePort(c.Service, "grpc")
	if svcGRPC == nil || resolvePort(ctr, svcGRPC.TargetPort) != grpcPort {
		t.Errorf("service port grpc %+v does not reach container port %d", svcGRPC, grpcPort)
	}

	// The headless Service: no virtual IP, the pods' own addresses behind its name (ready ones
	// only), its grpc port on theirs.
	if h := c.Headless; h == nil {
		t.Error("no headless Service: an Envoy STRICT_DNS cluster on the ClusterIP Service pins each connection to one pod")
	} else {
		if h.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("headless Service %s: clusterIP %q, want None", h.Name, h.Spec.ClusterIP)
		}
		if h.Spec.PublishNotReadyAddresses {
			t.Errorf("headless Service %s publishes pods that are not ready", h.Name)
		}
		if !labels.SelectorFromSet(h.Spec.Selector).Matches(podLabels) || len(h.Spec.Selector) == 0 {
			t.Errorf("headless Service selector %v does not match the pods %v", h.Spec.Selector, pod.Labels)
		}
		if p := servicePort(h, "grpc"); p == nil || resolvePort(ctr, p.TargetPort) != grpcPort || p.Port != grpcPort {
			t.Errorf("headless Service port grpc %+v: want %d to the container's %d", p, grpcPort, grpcPort)
		}
	}

	// NetworkPolicy: selects the pods; gRPC only from selected peers (never from anywhere).
	np := c.NetworkPolicy
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(podLabels) || sel.Empty() {
		t.Errorf("NetworkPolicy pod selector %v does not match the pods", np.Spec.PodSelector)
	}
	if !containsType(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Error("NetworkPolicy does not restrict ingress")
	}
	grpcRules := 0
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 {
			t.Errorf("NetworkPolicy ingress rule %+v admits every port", r)
		}
		for _, p := range r.Ports {
			if p.Port == nil || resolvePort(ctr, *p.Port) != grpcPort {
				continue
			}
			grpcRules++
			if len(r.From) == 0 {
				t.Error("NetworkPolicy admits every source to the gRPC port")
			}
			for _, peer := range r.From {
				if peer.IPBlock != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 {
					t.Errorf("gRPC peer %+v: want the Envoy pods, by a pod selector", peer)
				}
			}
		}
	}
	if grpcRules == 0 {
		t.Error("NetworkPolicy admits nobody to the gRPC port")
	}

	// ServiceMonitor: selects the Service and scrapes /metrics on the admin port.
	sm := c.ServiceMonitor
	if sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector); err != nil || !sel.Matches(labels.Set(c.Service.Labels)) || sel.Empty() {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sm.Spec.Selector, c.Service.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %+v, want 1", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	sp := servicePort(c.Service, ep.Port)
	if sp == nil || resolvePort(ctr, sp.TargetPort) != adminPort || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor scrapes port %v path %s, want the admin port's /metrics", ep.Port, ep.Path)
	}

	// The service itself accepts the config (with the Deployment's literal variables) and
	// the rules.
	Validate(t, c.ConfigMap.Data[c.ConfigFile], c.RulesConfigMap.Data[path.Base(cfg.RulesFile)], env)
}

func isTrue(b *bool) bool { return b != nil && *b }

// pinnedImage reports whether ref names one build: by digest, or by a tag other than latest.
func pinnedImage(ref string) bool {
	if name, digest, ok := strings.Cut(ref, "@"); ok {
		return name != "" && strings.HasPrefix(digest, "sha256:") && len(digest) == len("sha256:")+64
	}
	last := ref[strings.LastIndexByte(ref, '/')+1:]
	_, tag, ok := strings.Cut(last, ":")
	return ok && tag != "" && tag != "latest"
}

func containsType(ts []networkingv1.PolicyType, t networkingv1.PolicyType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// flagValue returns the value of flag in args ("--flag value" or "--flag=value").
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// resolvePort turns a port given by number or by the container's port name into a number.
func resolvePort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return containerPort(c, p.StrVal)
}

func servicePort(s *corev1.Service, name string) *corev1.ServicePort {
	for i := range s.Spec.Ports {
		if s.Spec.Ports[i].Name == name {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}

// mountedAt returns the volume mounted by ctr at dir, or nil.
func mountedAt(t *testing.T, spec corev1.PodSpec, ctr corev1.Container, dir string) *corev1.Volume {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == m.Name {
				return &spec.Volumes[i]
			}
		}
		t.Errorf("volume mount %s names no volume", m.Name)
	}
	return nil
}

// Env returns the container's variables with a literal value.
func Env(dep *appsv1.Deployment) map[string]string {
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// EnvVar returns the container's variable name, or nil.
func EnvVar(dep *appsv1.Deployment, name string) *corev1.EnvVar {
	for i, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return &dep.Spec.Template.Spec.Containers[0].Env[i]
		}
	}
	return nil
}

// Cleanup removes the built binary; TestMain calls it.
func Cleanup() { service.Cleanup() }

// Validate runs `extauthz validate --config` on the config and the rules, with env, and
// fails the test on any problem it reports. It skips under -short (it needs the binary).
func Validate(t *testing.T, cfg, rules string, env map[string]string) {
	t.Helper()
	if testing.Short() {
		return // the structural checks above ran; the binary is for the full run
	}
	b := service.Binary(t)
	dir := t.TempDir()
	cfgFile, rulesFile := filepath.Join(dir, "extauthz.yaml"), filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b, "validate", "--config", cfgFile, rulesFile)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		if k == "GOMEMLIMIT" {
			continue
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("extauthz validate of the rendered config and rules: %v\n%s", err, out.String())
	}
}
