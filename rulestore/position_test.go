package rulestore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// TestProblemsNameLineAndColumn: every problem in a rule names the line and column of its
// field's key (of the rule when the field is not written), in each format, and the rule's
// number in its section as the service numbers the rules in force.
func TestProblemsNameLineAndColumn(t *testing.T) {
	sentinel := ParseOptions{ParamNames: []string{"p"}}
	tests := []struct {
		name, file, data string
		opts             ParseOptions
		want             []string // the messages, each whole
	}{
		{"native YAML, block style", "r.yaml", `authority:
  - resource: a
    strategy: grey
    origins: [x]
param_flow:
  - resource: b
    param: p
    count: 1
  - resource: c
    param: p
    count: 2
    items:
      - {value: v, count: -1}
`, ParseOptions{}, []string{
			`r.yaml:3:5: authority[0] (resource "a"): strategy: unknown strategy "grey" (white | black)`,
			`r.yaml:13:20: param_flow[1] (resource "c"): items[0].count: must not be negative, got -1`,
		}},
		{"native YAML, a required field is the rule's place", "r.yaml", "param_flow:\n  - {resource: b, param: p}\n", ParseOptions{}, []string{
			`r.yaml:2:5: param_flow[0] (resource "b"): count: required`,
		}},
		{"native JSON", "r.json", `{
  "param_flow": [
    {"resource": "a", "param": "p", "count": 1},
    {"resource": "b", "param": "p", "count": 1,
     "burts": 2}
  ]
}`, ParseOptions{}, []string{
			`r.json:5:6: param_flow[1] (resource "b"): burts: unknown field (did you mean "burst"?)`,
		}},
		{"Sentinel object", "r.json", `{
  "authorityRules": [{"resource": "a", "limitApp": "x", "strategy": 3}],
  "paramFlowRules": [
    {"resource": "b", "paramIdx": 0, "count": 1},
    {"resource": "c", "paramIdx": 7, "count": 1}
  ]
}`, sentinel, []string{
			`r.json:2:57: authority[0] (resource "a"): strategy: unknown strategy 3 (0 = white, 1 = black)`,
			`r.json:5:23: param_flow[1] (resource "c"): paramIdx: index 7 is out of range: 1 param names are configured (p)`,
		}},
		{"Sentinel list: each kind numbered among its own", "r.json", `[
  {"resource": "a", "limitApp": "x", "strategy": 0},
  {"resource": "b", "paramIdx": 0, "count": 1},
  {"resource": "c", "limitApp": "", "strategy": 0},
  {"resource": "d", "paramIdx": 0, "count": -1}
]`, sentinel, []string{
			`r.json:4:21: authority[1] (resource "c"): limitApp: must list at least one origin (comma-separated); Sentinel skips a rule whose limitApp is blank`,
			`r.json:5:36: param_flow[1] (resource "d"): count: must not be negative, got -1 (Sentinel skips such a rule)`,
		}},
		{"a dashboard entity's rule", "r.json", `[
  {"id": 1, "app": "shop", "rule": {"resource": "a", "paramIdx": 0, "count": 1, "grade": 9}}
]`, sentinel, []string{
			`r.json:2:81: param_flow[0] (resource "a"): grade: unknown grade 9 (1 = QPS, 0 = thread count)`,
		}},
		{"YAML aliases and merge keys", "r.yaml", `defaults: &d
  param: p
  count: nine
param_flow:
  - resource: a
    <<: *d
`, ParseOptions{}, []string{
			`r.yaml:1:1: defaults: unknown field (known fields: authority, param_flow)`,
			`r.yaml:3:3: param_flow[0] (resource "a"): count: must be a whole number, got "nine"`,
		}},
		{"columns count characters", "r.yaml", "param_flow:\n  - {resource: \"é→ü\", param: p, count: x}\n", ParseOptions{}, []string{
			`r.yaml:2:33: param_flow[0] (resource "é→ü"): count: must be a whole number, got "x"`,
		}},
		{"a JSON syntax error", "r.json", "{\"param_flow\": [\n  {\"resource\": \"a\",}\n]}", ParseOptions{}, []string{
			`r.json:2:20: cannot parse JSON: invalid character '}' looking for beginning of object key string`,
		}},
		{"a top-level key", "r.yaml", "param_flow: []\nparam_flows: []\n", ParseOptions{}, []string{
			`r.yaml:2:1: param_flows: unknown field (did you mean "param_flow"?)`,
		}},
		{"refused by the engine", "r.yaml", "param_flow:\n  - {resource: a, param: p, count: 1}\n  - {resource: b, param: p, count: 9223372036854775807}\n", ParseOptions{}, []string{
			`r.yaml:3:5: param_flow[1] (resource "b"): count, burst and duration too large to count exactly`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.file, []byte(tt.data), tt.opts)
			var errs decode.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestWarningsNameTheRule: a warning about a rule names its line and column and its number as
// in force; a rule that is ignored has no number, and its place says where it is.
func TestWarningsNameTheRule(t *testing.T) {
	rules, err := Parse("r.json", []byte(`[
  {"resource": "b", "paramIdx": 0, "count": 1, "grade": 0},
  {"resource": "a", "limitApp": "x", "strategy": 0},
  {"resource": "a", "limitApp": "y", "strategy": 0},
  {"resource": "c", "paramIdx": 0, "count": 1, "grade": 0}
]`), ParseOptions{ParamNames: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`r.json:2:3: param_flow[0] (resource "b"): ` + ConcurrencyWarning,
		`r.json:4:3: authority (resource "a"): a second authority rule on this resource is ignored, as Sentinel ignores it: authority[0] is the one in force (join the lists into one rule if both were meant)`,
		`r.json:5:3: param_flow[1] (resource "c"): ` + ConcurrencyWarning,
	}
	if got := strings.Join(rules.Warnings, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if len(rules.ParamFlow) != 2 || rules.ParamFlow[1].Resource != "c" {
		t.Errorf("param-flow rules %+v, want b then c", rules.ParamFlow)
	}
}

// TestReportPlacesEveryRule: what `extauthz validate` prints for a valid file names each rule's
// line and column and its number in force.
func TestReportPlacesEveryRule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(`[
  {"resource": "a", "limitApp": "x", "strategy": 0},
  {"resource": "b", "paramIdx": 0, "count": 1}
]`), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, n := Report(path, ParseOptions{ParamNames: []string{"p"}})
	want := []string{
		path + `:2:3: authority[0] -> authority: {resource: "a"`,
		path + `:3:3: param_flow[0] -> param_flow: {resource: "b"`,
		path + `: ok: 1 authority rules, 1 param_flow rules`,
	}
	ok := n == 0 && len(lines) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(lines[i], want[i])
	}
	if !ok {
		t.Errorf("Report = %d problems,\n%s\nwant lines starting:\n%s", n, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
