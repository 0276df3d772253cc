package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEmptyRulesFileKeepsRules: a rules file truncated to 0 bytes (a half-done write, a broken
// ConfigMap) is a failed load; the rules in force stay and /rules shows last_error.
func TestEmptyRulesFileKeepsRules(t *testing.T) {
	s := newService(t, readRules(t))
	if strangerAllowed(t, s) {
		t.Fatal("stranger allowed by the shipped white list")
	}
	v0 := s.rulesInfo(t).Version
	if err := os.WriteFile(s.rules, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return len(s.rulesInfo(t).LastError) > 0 && string(s.rulesInfo(t).LastError) != "null" }) {
		t.Fatalf("0-byte file not reported in /rules last_error within 5s\n%s", s.logs)
	}
	mustContain(t, "/rules last_error", string(s.rulesInfo(t).LastError), "empty")
	if v := s.rulesInfo(t).Version; v != v0 {
		t.Errorf("version after a 0-byte file = %d, want %d (unchanged)", v, v0)
	}
	if strangerAllowed(t, s) {
		t.Error("a 0-byte file removed the white list in force")
	}
}

// TestValidateRefusesWhatServeRefuses: a rule the engine cannot count exactly (a count of
// 2^63-1) is refused by `extauthz validate` exactly as at start and on reload: one validation
// path, one message.
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte("param_flow:\n  - {resource: \"GET:/items\", param: item_id, count: 9223372036854775807}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = `param_flow[0] (resource "GET:/items"): count, burst and duration too large to count exactly`

	out, err := exec.Command(binary, "validate", "--config", extauthzYAML, huge).CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted a count of 2^63-1:\n%s", out)
	}
	mustContain(t, "validate output", string(out), huge+":2:5: "+want)

	out, err = exec.Command(binary, "serve", "--config", extauthzYAML, "--rules", huge,
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0").CombinedOutput()
	if err == nil {
		t.Fatalf("serve started with a count of 2^63-1:\n%s", out)
	}
	mustContain(t, "serve output", string(out), huge+":2:5: "+want)

	// On reload: the rules in force stay, and last_error carries the same message.
	s := newService(t, readRules(t))
	data, err := os.ReadFile(huge)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, s.rules, data)
	if !eventually(5*time.Second, func() bool { return strings.Contains(string(s.rulesInfo(t).LastError), "too large") }) {
		t.Fatalf("reload of a count of 2^63-1 not reported in last_error within 5s\n%s", s.logs)
	}
	mustContain(t, "/rules last_error", string(s.rulesInfo(t).LastError), strings.ReplaceAll(want, `"`, `\"`))
}

// TestRestoredFileClearsFailure: after a rejected load, putting back the bytes in force sets
// extauthz_rules_last_load_success back to 1 and clears /rules last_error (identical content was
// skipped, so the gauge stayed 0).
func TestRestoredFileClearsFailure(t *testing.T) {
	rules := readRules(t)
	s := newService(t, rules)
	if got := gauge(t, s, "extauthz_rules_last_load_success"); got != 1 {
		t.Fatalf("extauthz_rules_last_load_success at start = %v, want 1", got)
	}
	v0 := s.rulesInfo(t).Version
	replaceFile(t, s.rules, []byte("authority: [{resource: r, strategy: grey, origins: [a]}]\n"))
	if !eventually(5*time.Second, func() bool { return gauge(t, s, "extauthz_rules_last_load_success") == 0 }) {
		t.Fatalf("a rejected load left extauthz_rules_last_load_success at 1\n%s", s.logs)
	}
	replaceFile(t, s.rules, rules)
	if !eventually(5*time.Second, func() bool { return gauge(t, s, "extauthz_rules_last_load_success") == 1 }) {
		t.Fatalf("restoring the file in force left extauthz_rules_last_load_success at 0\n%s", s.logs)
	}
	info := s.rulesInfo(t)
	if string(info.LastError) != "null" {
		t.Errorf("/rules last_error after the restore = %s, want null", info.LastError)
	}
	if info.Version != v0 {
		t.Errorf("version after restoring the same bytes = %d, want %d (nothing recompiled)", info.Version, v0)
	}
}

// gauge reads an unlabelled gauge from /metrics; it fails t when the series is missing.
func gauge(t *testing.T, s *service, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.adminURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestLoadWarnings: a rules file whose rules lack input or contradict each other loads with
// warnings, shown by the log, by /rules and by `extauthz validate`.
func TestLoadWarnings(t *testing.T) {
	rules := []byte(`authority:
  - {resource: "GET:/items", strategy: white, origins: [web]}
  - {resource: "GET:/items", strategy: black, origins: [scraper]}
param_flow:
  - {resource: "GET:/items", param: not_mapped, count: 5}
  - {resource: "POST:/orders", param: api_key, count: 5, refund: true, lease: 30s}
`)
	want := []string{
		`no authz.params source produces the params "not_mapped" (param_flow[0])`,
		`concurrency and refund rules (param_flow[1]) act only on rate-limit calls that carry the lease key "lease_id"`,
		`authority (resource "GET:/items"): white and black rules on one resource`,
	}
	s := newService(t, rules)

	resp, err := http.Get(s.adminURL + "/rules")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mustContain(t, "/rules warnings", strings.Join(body.Warnings, "\n"), want...)
	mustContain(t, "log", s.logs.String(), `"msg":"rules warning"`)
	for _, w := range want {
		mustContain(t, "log", s.logs.String(), strings.ReplaceAll(w, `"`, `\"`))
	}

	out, err := exec.Command(binary, "validate", "--config", extauthzYAML, s.rules).CombinedOutput()
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, w := range want {
		mustContain(t, "validate output", string(out), "warning: ", w)
	}
}

// TestSentinelGatewayRule: a Sentinel gateway rule, as the dashboard persists it, limits the
// header values its pattern matches (contains; a prefix pattern limits every value, as in
// Sentinel: conformance/testdata/cases/gateway.json) through the service, once the config maps the param its
// warning names; the other values pass. validate prints what it maps to.
func TestSentinelGatewayRule(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "gw-flow.json")
	if err := os.WriteFile(rules, []byte(`[{"id": 1, "app": "gateway", "ip": "10.0.0.5", "port": 8719,
  "resource": "GET:/items", "resourceMode": 0, "grade": 1, "count": 2, "interval": 1, "intervalUnit": 2,
  "controlBehavior": 0, "burst": 0, "maxQueueingTimeoutMs": 500,
  "paramItem": {"parseStrategy": 2, "fieldName": "X-User-Id", "pattern": "vip-", "matchStrategy": 3},
  "gmtCreate": 1700000000000, "gmtModified": 1700000000000}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "validate", rules).CombinedOutput()
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	mustContain(t, "validate output", string(out),
		`param_flow[0] -> param_flow: {resource: "GET:/items", param: "header_x-user-id", count: 2, duration: 1h, match: {contains: "vip-"}}`,
		`add authz.params.header_x-user-id: {from: header, name: "x-user-id"}`)

	config := filepath.Join(dir, "extauthz.yaml")
	if err := os.WriteFile(config, []byte("authz:\n  params:\n    header_x-user-id: {from: header, name: x-user-id}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServiceWith(t, config, rules)
	allowed := func(user string) bool {
		// The shipped envoy.yaml's allowed_headers do not let x-user-id through (its mapping
		// does not read it); a deployment using this rule adds it there. Here it is added to the
		// CheckRequest Envoy derived.
		cr := checkRequest(t, req("GET", "/items?item_id=1", "192.0.2.9", "x-origin", "web"))
		cr.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-user-id"] = user
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := s.authz.Check(ctx, cr)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return checkCode(t, resp) == 200
	}
	for i := range 2 {
		if !allowed("vip-7") {
			t.Fatalf("request %d of a matching value refused, want the first 2 allowed", i)
		}
	}
	if allowed("vip-7") {
		t.Error("third request of a matching value within the hour allowed")
	}
	for i := range 5 {
		if !allowed("guest") {
			t.Fatalf("request %d of a value the pattern does not match refused", i)
		}
	}
}
