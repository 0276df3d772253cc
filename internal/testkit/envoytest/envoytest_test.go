package envoytest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"\nenvoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL\n", "1.40.0"},
		{"envoy version: abc/1.38.2/Modified/DEBUG/BoringSSL-FIPS", "1.38.2"},
	} {
		got, err := parseVersion(tc.out)
		if err != nil || got != tc.want {
			t.Errorf("parseVersion(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "envoy: command not found", "version: nothing"} {
		if v, err := parseVersion(bad); err == nil {
			t.Errorf("parseVersion(%q) = %q, want an error", bad, v)
		}
	}
}

const bootstrap = `
admin: {address: {socket_address: {address: 0.0.0.0, port_value: 9901}}}
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
    per_connection_buffer_limit_bytes: 1048576
  clusters:
  - name: svc
    type: STRICT_DNS
    connect_timeout: 0.25s
    load_assignment:
      cluster_name: svc
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: svc, port_value: 9001}}}}]}]
`

func TestBootstrapRewritesOnlyAddresses(t *testing.T) {
	out, err := Bootstrap([]byte(bootstrap), Rewrite{Upstreams: map[string][]string{"svc": {"127.0.0.1:1234", "127.0.0.1:1235"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{`"port_value": 1234`, `"port_value": 1235`, `"per_connection_buffer_limit_bytes": 1048576`, `"connect_timeout": "0.25s"`, `"type": "STRICT_DNS"`} {
		if !strings.Contains(s, want) {
			t.Errorf("rewritten bootstrap lacks %s:\n%s", want, s)
		}
	}
	for _, gone := range []string{"9901", "8080", `"svc", "port_value"`, "0.0.0.0"} {
		if strings.Contains(s, gone) {
			t.Errorf("rewritten bootstrap still has %s:\n%s", gone, s)
		}
	}
}

func TestBootstrapRefusesUnmappedClusters(t *testing.T) {
	if _, err := Bootstrap([]byte(bootstrap), Rewrite{}); err == nil || !strings.Contains(err.Error(), `"svc"`) {
		t.Errorf("a cluster without an address: err = %v, want one naming svc", err)
	}
	_, err := Bootstrap([]byte(bootstrap), Rewrite{Upstreams: map[string][]string{"svc": {"127.0.0.1:1"}, "other": {"127.0.0.1:2"}}})
	if err == nil || !strings.Contains(err.Error(), "other") {
		t.Errorf("an address for no cluster: err = %v, want one naming other", err)
	}
}
