package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// sentinelConfig writes a copy of the shipped config that maps Sentinel's paramIdx 0 to the
// param item_id, and returns its path.
func sentinelConfig(t *testing.T) string {
	t.Helper()
	base, err := os.ReadFile(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "extauthz.yaml")
	if err := os.WriteFile(path, append(base, "\nparam_names: [item_id]\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// validateOut runs `extauthz validate --config config file` and returns its output and whether
// it exited 0.
func validateOut(t *testing.T, config, file string) (string, bool) {
	t.Helper()
	out, err := exec.Command(binary, "validate", "--config", config, file).CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("validate: %v", err)
	}
	return string(out), err == nil
}

// TestSentinelRuleNumbersAgree: in a Sentinel list that mixes authority and param-flow rules,
// `extauthz validate` numbers each rule as the service does: the number validate gives the
// GET:/items param-flow rule is the one the body of a call it refuses names, and /check too; and
// every warning validate prints is one the service reports in /rules, word for word.
func TestSentinelRuleNumbersAgree(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "sentinel.json")
	if err := os.WriteFile(rules, []byte(`[
  {"resource": "GET:/items", "limitApp": "web,mobile", "strategy": 0},
  {"resource": "GET:/search", "grade": 1, "paramIdx": 0, "count": 100, "durationInSec": 1},
  {"resource": "GET:/orders", "limitApp": "scraper", "strategy": 1},
  {"resource": "GET:/items", "grade": 1, "paramIdx": 0, "count": 1, "durationInSec": 3600}
]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	config := sentinelConfig(t)
	out, ok := validateOut(t, config, rules)
	if !ok {
		t.Fatalf("validate refused the file:\n%s", out)
	}
	m := regexp.MustCompile(`(param_flow\[\d+\]) -> param_flow: \{resource: "GET:/items"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("validate names no GET:/items param-flow rule:\n%s", out)
	}
	validated := m[1]

	s := startServiceWith(t, config, rules)
	rr := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlDesc("resource", "GET:/items", "origin", "web", "item_id", "a")}}
	if got := s.limit(t, rr).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v, want OK", got)
	}
	refused := s.limit(t, rr)
	if refused.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call within the hour: %v, want OVER_LIMIT", refused.GetOverallCode())
	}
	var body struct {
		Rule     int    `json:"rule"`
		Resource string `json:"resource"`
	}
	if err := json.Unmarshal(refused.GetRawBody(), &body); err != nil {
		t.Fatalf("refused body %q: %v", refused.GetRawBody(), err)
	}
	if got := "param_flow[" + strconv.Itoa(body.Rule) + "]"; got != validated || body.Resource != "GET:/items" {
		t.Errorf("the refused call's body names %s (resource %q); validate calls the rule %s\nbody: %s\nvalidate:\n%s",
			got, body.Resource, validated, refused.GetRawBody(), out)
	}
	if _, _, raw := s.post(t, "/check", `{"resource": "GET:/items", "origin": "web", "params": {"item_id": "a"}}`); !strings.Contains(raw, `"`+validated+`"`) {
		t.Errorf("/check answered %s; validate calls the rule %s", raw, validated)
	}

	var info struct {
		Warnings []string `json:"warnings"`
	}
	getJSON(t, s.adminURL+"/rules", &info)
	for _, line := range strings.Split(out, "\n") {
		w, ok := strings.CutPrefix(line, "warning: ")
		if !ok {
			continue
		}
		found := false
		for _, sw := range info.Warnings {
			found = found || sw == w
		}
		if !found {
			t.Errorf("validate warns %q; /rules warnings are %q", w, info.Warnings)
		}
	}
}

// TestRuleErrorsNameLineAndColumn: a problem in a rule names the file's line and column, the
// field's key, as file:line:col: path: message, the same in `extauthz validate`, in the
// service's log and in /rules last_error; for YAML and for a Sentinel JSON list (whose
// param-flow rules are numbered among themselves).
func TestRuleErrorsNameLineAndColumn(t *testing.T) {
	dir := t.TempDir()
	yamlFile := filepath.Join(dir, "rules.yaml")
	jsonFile := filepath.Join(dir, "rules.json")
	cases := []struct {
		path, text, want string
	}{
		{yamlFile, `param_flow:
  - resource: "GET:/items"
    param: item_id
    count: 5
  - resource: "GET:/search"
    param: q
    cuont: 3
`, yamlFile + `:7:5: param_flow[1] (resource "GET:/search"): cuont: unknown field (did you mean "count"?)`},
		{jsonFile, `[
  {"resource": "GET:/items", "limitApp": "web", "strategy": 0},
  {"resource": "GET:/items", "paramIdx": 0, "count": 1,
   "durationInSecs": 7}
]
`, jsonFile + `:4:4: param_flow[0] (resource "GET:/items"): durationInSecs: unknown field (did you mean "durationInSec"?)`},
	}
	config := sentinelConfig(t)
	good := filepath.Join(dir, "good.yaml")
	for _, c := range cases {
		if err := os.WriteFile(c.path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, ok := validateOut(t, config, c.path)
		if ok {
			t.Fatalf("validate accepted %s:\n%s", c.path, out)
		}
		mustContain(t, "validate output", "\n"+out, "\n"+c.want)

		// The service reloading the same content: the rules in force stay, the error is the same.
		if err := os.WriteFile(good, []byte("param_flow: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := startServiceWith(t, config, good)
		replaceFile(t, good, []byte(c.text))
		if !eventually(5*time.Second, func() bool { return len(s.rulesInfo(t).LastError) > 4 }) {
			t.Fatalf("the broken reload is not in /rules last_error within 5s\n%s", s.logs)
		}
		var last struct {
			Message string `json:"message"`
		}
		if err := json.Unmarshal(s.rulesInfo(t).LastError, &last); err != nil {
			t.Fatal(err)
		}
		want := strings.Replace(c.want, c.path, good, 1)
		mustContain(t, "/rules last_error", "\n"+last.Message, "\n"+want)
		mustContain(t, "log", s.proc.LogText(), strings.ReplaceAll(want, `"`, `\"`))
	}
}
