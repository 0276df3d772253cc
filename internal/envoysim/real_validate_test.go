package envoysim

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// validate runs `envoy --mode validate` on the bootstrap envoy.yaml changed by vs and returns
// its output and whether Envoy accepts it.
func validate(t *testing.T, vs ...variant) (string, bool) {
	t.Helper()
	base, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	b := proto.Clone(base.Bootstrap).(*bootstrapv3.Bootstrap)
	for _, v := range vs {
		v(t, b)
	}
	doc, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return validateDoc(t, doc)
}

// validateDoc runs `envoy --mode validate` on doc (YAML or JSON), its listeners on loopback and
// its clusters pointing at a closed port, and returns Envoy's output and whether it accepts it.
func validateDoc(t *testing.T, doc []byte) (string, bool) {
	t.Helper()
	bin := envoytest.Binary(t)
	var names struct {
		StaticResources struct {
			Clusters []struct {
				Name string `json:"name"`
			} `json:"clusters"`
		} `json:"static_resources"`
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &names); err != nil {
		t.Fatal(err)
	}
	ups := map[string][]string{}
	for _, c := range names.StaticResources.Clusters {
		ups[c.Name] = []string{"127.0.0.1:1"}
	}
	if js, err = envoytest.Bootstrap(js, envoytest.Rewrite{Upstreams: ups}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "envoy.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "error").CombinedOutput()
	return string(out), err == nil
}
