package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

const shipped = "../../envoy-config/envoy.yaml"

// httpFilters are the names of the HTTP filters a bootstrap runs, in order.
func httpFilters(t *testing.T, cfg []byte) []string {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(cfg, &root); err != nil {
		t.Fatal(err)
	}
	hcm, err := connectionManager(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm["http_filters"].([]any) {
		names = append(names, f.(map[string]any)["name"].(string))
	}
	return names
}

func TestVariantsKeepOnlyTheirFilters(t *testing.T) {
	src, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	const router = "envoy.filters.http.router"
	want := map[string][]string{
		"none":            {router},
		"authz-noop":      {extAuthzFilter, router},
		"authz-extauthz":  {extAuthzFilter, router},
		"rl-noop":         {rateLimitFilter, router},
		"rl-extauthz":     {rateLimitFilter, router},
		"authz-mirror":    {extAuthzFilter, router},
		"rl-mirror":       {rateLimitFilter, router},
		"rl-ratelimit":    {rateLimitFilter, router},
		"local_ratelimit": {localRLFilter, router},
	}
	for _, v := range variants {
		cfg, err := v.bootstrap(src, "127.0.0.1:1", "127.0.0.1:2")
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if got := httpFilters(t, cfg); !slices.Equal(got, want[v.name]) {
			t.Errorf("%s: filters %v, want %v", v.name, got, want[v.name])
		}
	}
	if _, err := (variant{filters: []string{"envoy.filters.http.lua"}}).bootstrap(src, "127.0.0.1:1", "127.0.0.1:2"); err == nil {
		t.Error("a filter the bootstrap lacks was not reported")
	}
}

// TestVariantsValidateInEnvoy has Envoy itself check every variant's bootstrap.
func TestVariantsValidateInEnvoy(t *testing.T) {
	bin := envoytest.Binary(t)
	src, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, v := range variants {
		cfg, err := v.bootstrap(src, "127.0.0.1:1", "127.0.0.1:2")
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		path := filepath.Join(dir, v.name+".json")
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "--mode", "validate", "-c", path).CombinedOutput(); err != nil {
			t.Errorf("%s: envoy --mode validate: %v\n%s", v.name, err, out)
		}
	}
}

func TestPercentiles(t *testing.T) {
	// h2load's log: start (us since the epoch), status, us to the end of the response.
	var log []byte
	for i := 1; i <= 200; i++ {
		log = append(log, []byte("1700000000000000\t200\t"+strconv.Itoa(i)+"\n")...)
	}
	path := filepath.Join(t.TempDir(), "log.tsv")
	if err := os.WriteFile(path, log, 0o644); err != nil {
		t.Fatal(err)
	}
	p50, p99, err := percentiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if p50.Microseconds() != 100 || p99.Microseconds() != 198 {
		t.Errorf("p50, p99 = %v, %v; want 100us, 198us", p50, p99)
	}
}
