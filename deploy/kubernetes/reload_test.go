package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/extauthz/extauthz/deploy/internal/service"
)

// kubeletVolume lays out a ConfigMap volume as the kubelet's atomic writer does: the data in
// a timestamped directory, a "..data" symlink to it, and each key a symlink through
// "..data". update swaps in new data the same way: a new directory, a new symlink renamed
// over "..data", the old directory removed.
type kubeletVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newKubeletVolume(t *testing.T, data map[string]string) *kubeletVolume {
	v := &kubeletVolume{t: t, dir: filepath.Join(t.TempDir(), "rules")}
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.update(data)
	for key := range data {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(v.dir, key)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *kubeletVolume) update(data map[string]string) {
	t := v.t
	v.gen++
	ts := fmt.Sprintf("..2026_12_01_03_00_%02d.%d", v.gen, 1000+v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for key, body := range data {
		if err := os.WriteFile(filepath.Join(v.dir, ts, key), []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRulesConfigMapReloadsInPlace runs the built service on the rendered config and rules,
// the rules laid out as the kubelet mounts a ConfigMap, and updates them as the kubelet does
// when the ConfigMap changes: the running process applies the new rules (version 2), and then
// keeps them, still ready, when an update is rejected.
func TestRulesConfigMapReloadsInPlace(t *testing.T) {
	bin := service.Binary(t)
	objs := render(t, "overlays/memory", "")
	rules := objs.Find("ConfigMap", "extauthz-rules").(*corev1.ConfigMap)
	var config *corev1.ConfigMap
	for _, o := range objs {
		if cm, ok := o.Value.(*corev1.ConfigMap); ok && strings.HasPrefix(cm.Name, "extauthz-config-") {
			config = cm
		}
	}
	cfgFile := filepath.Join(t.TempDir(), "extauthz.yaml")
	if err := os.WriteFile(cfgFile, []byte(config.Data["extauthz.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	vol := newKubeletVolume(t, rules.Data)

	// The rendered config, with the mount's path and loopback listeners for the test.
	proc := service.Start(t, bin, "serve", "--config", cfgFile, "--rules", filepath.Join(vol.dir, "rules.yaml"),
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	proc.WaitMetric(t, "extauthz_rules_version 1")

	more := rules.Data["rules.yaml"] + `
  - resource: "GET:/reports"
    param: api_key
    grade: qps
    count: 2
    duration: 1s
`
	vol.update(map[string]string{"rules.yaml": more})
	proc.WaitMetric(t, "extauthz_rules_version 2")

	vol.update(map[string]string{"rules.yaml": "param_flow: [{resource: x, grade: nonsense}]\n"})
	proc.WaitMetric(t, "extauthz_rules_last_load_success 0")
	if _, body := proc.Get(t, "/metrics"); !strings.Contains(body, "\nextauthz_rules_version 2\n") {
		t.Error("a rejected update changed the rules in force")
	}
	if code, _ := proc.Get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz %d after a rejected update, want 200: the old rules still serve", code)
	}
}
