package envoysim

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
)

// shippedConfigs are the Envoy bootstraps in this directory (rules.yaml and extauthz.yaml are
// the service's files, not Envoy's).
func shippedConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(shippedDir + "envoy*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no envoy*.yaml in envoy-config/")
	}
	return files
}

func TestShippedConfigsLoad(t *testing.T) {
	for _, f := range shippedConfigs(t) {
		t.Run(f, func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatalf("Load(%s): %v", f, err)
			}
			if got := len(c.Managers); got == 0 {
				t.Fatalf("Load(%s): no HTTP connection manager found", f)
			}
			if got := len(c.Routes()); got == 0 {
				t.Fatalf("Load(%s): no routes found", f)
			}
		})
	}
}

// brokenConfigs are copies of envoy.yaml with one fault each, and what Load says of it.
// TestRealBrokenConfigs has Envoy validate each: it refuses all but per_filter_not_in_chain.yaml,
// whose per-route settings it ignores, and missing_cluster.yaml, with which it answers every
// request 503 (the ext_authz call cannot be made). Load is stricter than Envoy on purpose.
var brokenConfigs = []struct {
	file string
	want []string // all must appear in the error
}{
	{"misspelt_field.yaml", []string{`unknown field "failure_mode_alow"`}},
	{"bad_enum.yaml", []string{"enum", "DRAFT_VERSION_04"}},
	{"stage_11.yaml", []string{"envoy.extensions.filters.http.ratelimit.v3.RateLimit", "Stage", "less than or equal to 10"}},
	{"missing_cluster.yaml", []string{`undefined cluster "ext-authz"`, "http_filters[0].typed_config(ExtAuthz).grpc_service.envoy_grpc.cluster_name"}},
	{"nested_unknown_field.yaml", []string{`unknown field "descriptor_kye"`}},
	{"per_filter_not_in_chain.yaml", []string{`route "items"`, `"envoy.filters.http.extauthz", which is not in the HTTP filter chain`}},
}

// TestBrokenConfigsRejected checks that each deliberately broken copy of envoy.yaml (one fault
// each, see the diff against envoy.yaml) is rejected, for its own reason.
func TestBrokenConfigsRejected(t *testing.T) {
	tests := brokenConfigs
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = nil error, want one mentioning %q", path, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load(%s) error = %q, want it to mention %q", path, err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), path+":") {
				t.Errorf("Load(%s) error = %q, want it to start with the file name", path, err)
			}
		})
	}
}

// badYAML and unknownAny are refused by Parse (TestRealBrokenConfigs: and by Envoy).
const badYAML = "a: [1, 2"

const unknownAny = `
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 0.0.0.0, port_value: 1}}
    filter_chains:
    - filters:
      - name: x
        typed_config: {"@type": "type.googleapis.com/example.NotAFilter"}
`

func TestParseRejectsNonYAMLAndMissingFile(t *testing.T) {
	if _, err := Parse("x.yaml", []byte(badYAML)); err == nil || !strings.Contains(err.Error(), "x.yaml: not YAML") {
		t.Errorf("Parse(bad YAML) error = %v, want a YAML error naming the file", err)
	}
	if _, err := Load(filepath.Join("testdata", "does-not-exist.yaml")); err == nil {
		t.Error("Load(missing file) = nil error")
	}
	// An Any whose type is not linked in cannot be checked, so it is an error.
	if _, err := Parse("any.yaml", []byte(unknownAny)); err == nil || !strings.Contains(err.Error(), "example.NotAFilter") {
		t.Errorf("Parse(unknown Any) error = %v, want one naming the type", err)
	}
}

// TestFilterSettings pins the choices envoy.yaml documents: failure modes, the rate-limit
// timeout, the headers, and the peer certificate.
func TestFilterSettings(t *testing.T) {
	c, err := Load(shippedEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	var authz *extauthzv3.ExtAuthz
	var rl *ratelimitv3.RateLimit
	for _, f := range c.Managers[0].GetHttpFilters() {
		m, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch v := m.(type) {
		case *extauthzv3.ExtAuthz:
			authz = v
		case *ratelimitv3.RateLimit:
			rl = v
		}
	}
	if authz == nil || rl == nil {
		t.Fatalf("envoy.yaml: ext_authz found %v, ratelimit found %v; want both", authz != nil, rl != nil)
	}
	if got := c.Managers[0].GetHttpFilters()[0].GetName(); got != ExtAuthzFilter {
		t.Errorf("first HTTP filter = %q, want %q (authority before any token is spent)", got, ExtAuthzFilter)
	}
	if authz.GetFailureModeAllow() {
		t.Error("ext_authz failure_mode_allow = true, want false (authority fails closed)")
	}
	if got := authz.GetStatusOnError().GetCode(); got != 503 {
		t.Errorf("ext_authz status_on_error = %d, want 503", got)
	}
	if !authz.GetIncludePeerCertificate() {
		t.Error("ext_authz include_peer_certificate = false, want true")
	}
	if got := authz.GetGrpcService().GetTimeout().AsDuration(); got <= 0 {
		t.Errorf("ext_authz timeout = %v, want an explicit one", got)
	}
	if rl.GetFailureModeDeny() {
		t.Error("ratelimit failure_mode_deny = true, want false (flow control fails open)")
	}
	if got := rl.GetEnableXRatelimitHeaders(); got != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("ratelimit enable_x_ratelimit_headers = %v, want DRAFT_VERSION_03", got)
	}
	if got := rl.GetTimeout().AsDuration(); got <= 20*time.Millisecond {
		t.Errorf("ratelimit timeout = %v, want more than Envoy's 20ms default", got)
	}
	if got := rl.GetDomain(); got == "" {
		t.Error("ratelimit domain is empty")
	}
}

// The shipped configs, relative to this package's directory.
const (
	shippedDir   = "../../envoy-config/"
	shippedEnvoy = shippedDir + "envoy.yaml"
)
