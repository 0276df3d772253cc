package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// validate runs `envoy --mode validate` on the bootstrap at path and returns its verdict.
func validate(t *testing.T, path string) (bool, string) {
	t.Helper()
	out, err := exec.Command(envoytest.Binary(t), "--mode", "validate", "--disable-hot-restart", "-c", path).CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("OK")), string(out)
}

// TestShippedBootstrapsValidate runs Envoy's own validation on every Envoy bootstrap the
// repository ships: a config that Envoy refuses fails here.
func TestShippedBootstrapsValidate(t *testing.T) {
	files, err := filepath.Glob("../../envoy-config/envoy*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no envoy-config/envoy*.yaml: %v", err)
	}
	for _, f := range files {
		if ok, out := validate(t, f); !ok {
			t.Errorf("envoy --mode validate %s:\n%s", f, tail(out))
		}
	}
}

// TestBrokenBootstrapsRefused runs Envoy on each deliberately broken copy of envoy.yaml that
// the emulation's loader refuses (internal/envoysim/testdata), and checks Envoy's verdict
// against the table: most are refused by Envoy too; two are refused only by the loader, which
// is a lint stricter than Envoy there (Envoy 1.40 starts with an ext_authz gRPC service
// naming no cluster, and fails each Check at request time; it ignores per-route config of a
// filter that is not in the chain).
func TestBrokenBootstrapsRefused(t *testing.T) {
	envoyRefuses := map[string]bool{
		"bad_enum.yaml":                true,
		"misspelt_field.yaml":          true,
		"nested_unknown_field.yaml":    true,
		"stage_11.yaml":                true,
		"missing_cluster.yaml":         false,
		"per_filter_not_in_chain.yaml": false,
	}
	files, err := filepath.Glob("../../internal/envoysim/testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no broken bootstraps under internal/envoysim/testdata: %v", err)
	}
	for _, f := range files {
		want, known := envoyRefuses[filepath.Base(f)]
		if !known {
			t.Errorf("%s: not in the table; run envoy --mode validate on it and add its verdict", f)
			continue
		}
		ok, out := validate(t, f)
		if ok == want {
			t.Errorf("%s: Envoy accepts it = %v, want %v:\n%s", f, ok, !want, tail(out))
		}
	}
}

// TestDeployFragmentsValidate puts the Envoy config that deploy/ patches into Istio's and
// Envoy Gateway's Envoys (HTTP filters, virtual-host rate limits, clusters) into one bootstrap
// and has Envoy validate it, so a field Envoy 1.40 refuses in a patch fails here.
func TestDeployFragmentsValidate(t *testing.T) {
	var frag fragments
	for _, f := range []string{"../../deploy/istio/envoyfilter-ratelimit.yaml", "../../deploy/envoy-gateway/ratelimit-patch.yaml"} {
		if err := frag.read(f); err != nil {
			t.Fatal(err)
		}
	}
	if len(frag.filters) == 0 || len(frag.rateLimits) == 0 || len(frag.clusters) == 0 {
		t.Fatalf("found %d filters, %d rate limits, %d clusters in deploy/: the patches changed shape", len(frag.filters), len(frag.rateLimits), len(frag.clusters))
	}
	path := filepath.Join(t.TempDir(), "fragments.json")
	b, err := json.MarshalIndent(frag.bootstrap(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, out := validate(t, path); !ok {
		t.Errorf("Envoy refuses deploy/'s patches:\n%s\n%s", tail(out), b)
	}
}

// fragments are the pieces of Envoy config found in Kubernetes documents.
type fragments struct {
	filters    []any          // HTTP filters
	rateLimits []any          // virtual-host rate_limits entries
	clusters   []any          // whole clusters
	refs       map[string]int // gRPC cluster names the filters use
}

func (f *fragments) read(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, doc := range strings.Split(string(src), "\n---") {
		var d struct {
			Kind string `json:"kind"`
			Spec struct {
				ConfigPatches []struct {
					ApplyTo string `json:"applyTo"`
					Patch   struct {
						Value map[string]any `json:"value"`
					} `json:"patch"`
				} `json:"configPatches"`
				JSONPatches []struct {
					Type      string `json:"type"`
					Operation struct {
						Path  string `json:"path"`
						Value any    `json:"value"`
					} `json:"operation"`
				} `json:"jsonPatches"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		for _, p := range d.Spec.ConfigPatches {
			switch p.ApplyTo {
			case "HTTP_FILTER":
				f.addFilter(p.Patch.Value)
			case "VIRTUAL_HOST":
				rl, _ := p.Patch.Value["rate_limits"].([]any)
				f.rateLimits = append(f.rateLimits, rl...)
			case "CLUSTER":
				f.clusters = append(f.clusters, p.Patch.Value)
			}
		}
		for _, p := range d.Spec.JSONPatches {
			switch {
			case strings.HasSuffix(p.Type, "Listener") && strings.Contains(p.Operation.Path, "http_filters"):
				if m, ok := p.Operation.Value.(map[string]any); ok {
					f.addFilter(m)
				}
			case strings.HasSuffix(p.Type, "RouteConfiguration") && strings.HasSuffix(p.Operation.Path, "rate_limits"):
				rl, _ := p.Operation.Value.([]any)
				f.rateLimits = append(f.rateLimits, rl...)
			case strings.HasSuffix(p.Type, "Cluster"):
				f.clusters = append(f.clusters, p.Operation.Value)
			}
		}
	}
	return nil
}

// addFilter keeps one HTTP filter (a second of the same name, from another file, gets a name
// of its own) and the cluster its gRPC service names.
func (f *fragments) addFilter(v map[string]any) {
	if f.refs == nil {
		f.refs = map[string]int{}
	}
	c := map[string]any{}
	for k, x := range v {
		c[k] = x
	}
	c["name"] = fmt.Sprintf("%v.%d", v["name"], len(f.filters))
	f.filters = append(f.filters, c)
	tc, _ := v["typed_config"].(map[string]any)
	rls, _ := tc["rate_limit_service"].(map[string]any)
	gs, _ := rls["grpc_service"].(map[string]any)
	if gs == nil {
		gs, _ = tc["grpc_service"].(map[string]any)
	}
	eg, _ := gs["envoy_grpc"].(map[string]any)
	if name, ok := eg["cluster_name"].(string); ok {
		f.refs[name]++
	}
}

// bootstrap is one listener whose HTTP filters are the fragments' (then the router), whose
// one virtual host has the fragments' rate limits, and the fragments' clusters plus a
// loopback cluster for every other name the filters call.
func (f *fragments) bootstrap() map[string]any {
	filters := append(append([]any{}, f.filters...), map[string]any{
		"name":         "envoy.filters.http.router",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
	})
	clusters := append([]any{}, f.clusters...)
	have := map[string]bool{"backend": true}
	for _, c := range f.clusters {
		if m, ok := c.(map[string]any); ok {
			have[fmt.Sprint(m["name"])] = true
		}
	}
	for name := range f.refs {
		if !have[name] {
			clusters = append(clusters, staticCluster(name, true))
			have[name] = true
		}
	}
	clusters = append(clusters, staticCluster("backend", false))
	hcm := map[string]any{
		"@type":        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix":  "fragments",
		"http_filters": filters,
		"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
			"name": "all", "domains": []any{"*"}, "rate_limits": f.rateLimits,
			"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"}, "route": map[string]any{"cluster": "backend"}}},
		}}},
	}
	return map[string]any{"static_resources": map[string]any{
		"listeners": []any{map[string]any{
			"name":          "fragments",
			"address":       loopback(0),
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}}}},
		}},
		"clusters": clusters,
	}}
}

func staticCluster(name string, h2 bool) map[string]any {
	c := map[string]any{
		"name": name, "type": "STATIC", "connect_timeout": "1s",
		"load_assignment": map[string]any{"cluster_name": name, "endpoints": []any{map[string]any{
			"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": loopback(9)}}},
		}}},
	}
	if h2 {
		c["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
			"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
		}}
	}
	return c
}

func loopback(port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": port}}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}
