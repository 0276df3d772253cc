package rulestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// wantErr is one expected problem; Reason is a substring of the reason.
type wantErr struct {
	Section  string
	Index    int
	Resource string
	Field    string
	Reason   string
}

func TestParseInvalidFixtures(t *testing.T) {
	sentinelOpts := ParseOptions{ParamNames: []string{"item_id", "user"}}
	tests := []struct {
		file string
		opts ParseOptions
		want []wantErr
	}{
		{"unknown_field.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "durration", `unknown field (did you mean "duration"?)`}}},
		{"unknown_section.yaml", ParseOptions{}, []wantErr{{"", -1, "", "param_flows", `unknown field (did you mean "param_flow"?)`}}},
		{"unknown_strategy.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "strategy", `unknown strategy "grey"`}}},
		{"missing_strategy.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "strategy", "required"}}},
		{"unknown_missing_origin.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "missing_origin", `unknown value "maybe"`}}},
		{"empty_origins.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "origins", "at least one origin"}}},
		{"empty_resource.yaml", ParseOptions{}, []wantErr{{"authority", 0, "", "resource", "must not be empty"}}},
		{"invalid_cidr.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "origins[1]", `"10.1.0.0/33"`}}},
		{"invalid_ip.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "origins[0]", `"10.1.0.300"`}}},
		{"unknown_grade.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "grade", `unknown grade "rps"`}}},
		{"unknown_behavior.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "behavior", `unknown behavior "queue"`}}},
		{"negative_count.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "count", "must not be negative, got -1"}}},
		{"missing_count.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "count", "required"}}},
		{"wrong_type.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "count", `must be a whole number, got "five"`}}},
		{"negative_burst.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "burst", "must not be negative, got -2"}}},
		{"short_duration.yaml", ParseOptions{}, []wantErr{{"param_flow", 2, "POST:/order", "duration", "must be at least 1ms, got 500us"}}},
		{"bad_duration.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "duration", `must be a Go duration such as "1s" or "500ms", got "1 sec"`}}},
		{"bad_state_budget.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "state_budget", `"lots" is not a memory size`}}},
		{"unknown_overflow.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "overflow", `unknown overflow "drop" (forget | refuse)`}}},
		{"queueing_on_reject.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "max_queueing_time", "applies only to throttle rules"}}},
		{"throttle_on_concurrency.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "behavior", "throttle applies only to qps rules"}}},
		{"burst_on_concurrency.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "burst", "not to concurrency rules"}}},
		{"burst_on_throttle.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "burst", "applies only to reject rules"}}},
		{"lease_on_qps.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "lease", "qps rules with refund: true"}}},
		{"refund_on_concurrency.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "refund", "always release"}}},
		{"item_without_value.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "items[1].value", "required"}}},
		{"item_negative_count.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "items[0].count", "must not be negative, got -10"}}},
		{"duplicate_item.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "items[1].value", `"42" is already given by items[0]`}}},
		{"unquoted_item_value.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "items[0].value", "write 15 in quotes: YAML reads it as a number"}}},
		{"zero_capacity.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "capacity", "must be at least 1, got 0"}}},
		{"empty_param.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "param", "must not be empty"}}},
		{"empty_domain.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "domain", "must not be empty (leave the field out"}}},
		{"long_domain.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "domain", "is 5000 bytes, longer than the 4096"}}},
		{"domain_on_authority.yaml", ParseOptions{}, []wantErr{{"authority", 0, "GET:/hello", "domain", "applies only to param_flow rules"}}},
		{"charge_on_throttle.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/chat", "charge", "postpaid applies only to reject rules"}}},
		{"charge_with_refund.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/chat", "refund", "a postpaid rule charges what a response used"}}},
		{"unknown_charge.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/chat", "charge", `unknown charge "later" (prepaid | postpaid)`}}},
		{"cluster_disabled.yaml", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "cluster", "cluster rules need a store.redis config"}}},
		{"yaml_syntax.yaml", ParseOptions{}, []wantErr{{"", -1, "", "", "cannot parse YAML"}}},
		{"duplicate_key.yaml", ParseOptions{}, []wantErr{{"", -1, "", "", `"count" already set`}}},
		{"top_level_scalar.yaml", ParseOptions{}, []wantErr{{"", -1, "", "", "must hold a mapping"}}},
		{"empty.yaml", ParseOptions{}, []wantErr{{"", -1, "", "", "the file is empty"}}},
		{"comment_only.yaml", ParseOptions{}, []wantErr{{"", -1, "", "", "the file is empty"}}},
		{"several_errors.yaml", ParseOptions{}, []wantErr{
			{"authority", 1, "GET:/admin", "strategy", `unknown strategy "grey"`},
			{"authority", 1, "GET:/admin", "origins[0]", `"10.0.0.0/40"`},
			{"param_flow", 0, "POST:/order", "duration", "must be at least 1ms, got 10us"},
			{"param_flow", 0, "POST:/order", "count", "must not be negative"},
			{"param_flow", 1, "GET:/item", "colour", "unknown field"},
			{"param_flow", 1, "GET:/item", "param", "must not be empty"},
			{"param_flow", 1, "GET:/item", "refund", "always release"},
		}},
		{"unknown_field.json", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "Burst", `unknown field (did you mean "burst"?)`}}},
		{"negative_count.json", ParseOptions{}, []wantErr{{"param_flow", 1, "GET:/item", "count", "must not be negative, got -3"}}},
		{"duplicate_key.json", ParseOptions{}, []wantErr{{"", -1, "", "", `key "param" given twice`}}},
		{"syntax.json", ParseOptions{}, []wantErr{{"", -1, "", "", "cannot parse JSON: invalid character '}'"}}},
		{"sentinel_paramidx_range.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "paramIdx", "index 3 is out of range: 2 param names are configured (item_id, user)"}}},
		{"sentinel_paramidx_range.json", ParseOptions{}, []wantErr{{"param_flow", 0, "POST:/order", "paramIdx", "no param names are configured"}}},
		{"sentinel_grade.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "grade", "unknown grade 3"}}},
		{"sentinel_behavior.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "controlBehavior", "must not be negative, got -1"}}},
		{"sentinel_duration.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "durationInSec", "must be at least 1, got 0"}}},
		{"sentinel_limitapp.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "limitApp", `only "default" is supported`}}},
		{"sentinel_strategy.json", sentinelOpts, []wantErr{{"authority", 0, "GET:/hello", "strategy", "unknown strategy 2"}}},
		{"sentinel_unknown_field.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "paramIndex", `unknown field (did you mean "paramIdx"?)`}}},
		{"sentinel_count_fraction.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "count", "must not be negative, got -2.5"}}},
		{"sentinel_item_class.json", sentinelOpts, []wantErr{{"param_flow", 0, "POST:/order", "paramFlowItemList[0].object", `"abc" is not a value of classType int`}}},
		{"sentinel_empty_limitapp.json", sentinelOpts, []wantErr{{"authority", 0, "GET:/hello", "limitApp", "at least one origin"}}},
		{"sentinel_object_unknown_list.json", sentinelOpts, []wantErr{{"", -1, "", "flowRules", "unknown field"}}},
	}
	used := make(map[string]bool)
	for _, tt := range tests {
		used[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "invalid", tt.file)
			rules, err := Load(path, tt.opts)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, nil; want errors", path, rules)
			}
			var errs decode.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load(%s) error %T %v; want Errors", path, err, err)
			}
			if got, want := len(errs), len(tt.want); got != want {
				t.Fatalf("Load(%s): %d errors, want %d:\n%v", path, got, want, err)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.File != path || e.Section != w.Section || e.Index != w.Index ||
					e.Resource != w.Resource || e.Field != w.Field || !strings.Contains(e.Reason, w.Reason) {
					t.Errorf("error %d = %#v\nwant file %q and %#v", i, *e, path, w)
				}
				msg := e.Error()
				for _, part := range []string{path + ":", w.Field, w.Reason} {
					if !strings.Contains(msg, part) {
						t.Errorf("message %q does not contain %q", msg, part)
					}
				}
				if w.Index >= 0 && !strings.Contains(msg, fmt.Sprintf("%s[%d]", w.Section, w.Index)) {
					t.Errorf("message %q does not name %s[%d]", msg, w.Section, w.Index)
				}
				if w.Resource != "" && !strings.Contains(msg, fmt.Sprintf("(resource %q)", w.Resource)) {
					t.Errorf("message %q does not name resource %q", msg, w.Resource)
				}
			}
		})
	}
	// Every fixture is covered by a case.
	files, err := os.ReadDir(filepath.Join("testdata", "invalid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !used[f.Name()] {
			t.Errorf("fixture %s has no test case", f.Name())
		}
	}
}

func TestValidationErrorMessage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "invalid", "short_duration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse("rules.yaml", data, ParseOptions{})
	got := fmt.Sprint(err)
	want := `rules.yaml:11:5: param_flow[2] (resource "POST:/order"): duration: must be at least 1ms, got 500us`
	if got != want {
		t.Errorf("error = %q\nwant    %q", got, want)
	}
	var ve *decode.ValidationError
	if !errors.As(err, &ve) || ve.Field != "duration" {
		t.Errorf("errors.As(*decode.ValidationError) = %v, %+v; want the duration error", ve != nil, ve)
	}
}

func TestErrorsFormat(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&decode.ValidationError{File: "f.yaml", Index: -1, Reason: "cannot parse YAML: x"}, "f.yaml: cannot parse YAML: x"},
		{&decode.ValidationError{File: "f.yaml", Index: -1, Field: "param_flows", Reason: "unknown field"}, "f.yaml: param_flows: unknown field"},
		{&decode.ValidationError{File: "f.yaml", Section: "authority", Index: 3, Field: "resource", Reason: "must not be empty"}, "f.yaml: authority[3]: resource: must not be empty"},
		{decode.Errors{
			{File: "a", Section: "param_flow", Index: 0, Resource: "r", Field: "count", Reason: "x"},
			{File: "a", Section: "param_flow", Index: 1, Resource: "s", Field: "burst", Reason: "y"},
		}, "a: param_flow[0] (resource \"r\"): count: x\na: param_flow[1] (resource \"s\"): burst: y"},
		{decode.Errors{}, "no errors"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// wantNative is what testdata/valid/rules.yaml and rules.json hold.
func wantNative() Rules {
	return Rules{
		Authority: []authority.Rule{
			{Resource: "GET:/hello", Strategy: authority.White, Origins: []string{"serviceA", "serviceC", "10.1.0.0/16"}, MissingOrigin: authority.MissingAllow},
			{Resource: "GET:/admin", Strategy: authority.Black, Origins: []string{"intruder", "2001:db8::/32"}},
		},
		ParamFlow: []hotparam.Rule{
			{
				Resource: "POST:/order", Param: "item_id", Grade: hotparam.QPS, Count: 5, Duration: time.Second,
				Burst: 2, Behavior: hotparam.Reject, Items: map[string]int64{"4343433": 1000, "vip": 0},
				Capacity: 5000, Refund: true,
			},
			{
				Resource: "GET:/search", Param: "user", Count: 100, Duration: time.Minute,
				Behavior: hotparam.Throttle, MaxQueueingTime: 250 * time.Millisecond, Cluster: true,
			},
			{
				Resource: "POST:/upload", Param: "tenant", Grade: hotparam.Concurrency, Count: 3,
				Duration: time.Second, Lease: 30 * time.Second, Shadow: true,
			},
		},
	}
}

func TestParseValidFixtures(t *testing.T) {
	concurrency := func(file string, i int, resource string) string {
		return fmt.Sprintf("%s: param_flow[%d] (resource %q): %s", file, i, resource, ConcurrencyWarning)
	}
	native := func(file, at string) Rules {
		r := wantNative()
		r.Warnings = []string{concurrency(file+at, 2, "POST:/upload")}
		return r
	}
	sentinelFile := filepath.Join("testdata", "valid", "sentinel.json")
	objectFile := filepath.Join("testdata", "valid", "sentinel_object.json")
	tests := []struct {
		file string
		opts ParseOptions
		want Rules
	}{
		{filepath.Join("testdata", "valid", "rules.yaml"), ParseOptions{ClusterEnabled: true}, native(filepath.Join("testdata", "valid", "rules.yaml"), ":32:5")},
		{filepath.Join("testdata", "valid", "rules.json"), ParseOptions{ClusterEnabled: true}, native(filepath.Join("testdata", "valid", "rules.json"), ":13:5")},
		{filepath.Join("testdata", "valid", "empty.yaml"), ParseOptions{}, Rules{}},
		{sentinelFile, ParseOptions{ParamNames: []string{"item_id", "tenant", "user"}}, Rules{
			Authority: []authority.Rule{
				// Sentinel's limitApp entries, compared as written.
				{Resource: "GET:/hello", Strategy: authority.White, Origins: []string{"appA", "appB", " appE"}, Literal: true},
				{Resource: "GET:/admin", Strategy: authority.Black, Origins: []string{"appC ", "10.0.0.0/8"}, Literal: true},
			},
			ParamFlow: []hotparam.Rule{
				{
					Resource: "POST:/order", Param: "item_id", Grade: hotparam.QPS, Count: 5, Duration: 2 * time.Second,
					Burst: 3, Behavior: hotparam.Reject, Items: map[string]int64{"4343433": 1000, "vip": 50},
					Match: &match.Number{Kind: "int", Bits: 32},
				},
				{
					Resource: "GET:/search", Param: "user", Grade: hotparam.QPS, Count: 10, Duration: time.Second,
					Behavior: hotparam.Throttle, MaxQueueingTime: 500 * time.Millisecond,
				},
				{Resource: "POST:/upload", Param: "tenant", Grade: hotparam.Concurrency, Count: 4, Duration: time.Second},
			},
			Warnings: []string{
				concurrency(sentinelFile+":26:3", 2, "POST:/upload"),
				sentinelFile + `:33:3: authority[0] (resource "GET:/hello"): limitApp entries " appE" have spaces around them: as in Sentinel, they match only an origin with the same spaces (write the list without spaces after the commas)`,
				sentinelFile + `:38:3: authority[1] (resource "GET:/admin"): limitApp entries "appC " have spaces around them: as in Sentinel, they match only an origin with the same spaces (write the list without spaces after the commas)`,
				sentinelFile + `:38:3: authority[1] (resource "GET:/admin"): limitApp entries "10.0.0.0/8" are compared as text, as in Sentinel: a range matches only an origin written the same, not the addresses in it (a native rule matches addresses: origins: [...])`,
			},
		}},
		{objectFile, ParseOptions{ParamNames: []string{"a", "b", "item_id"}, ClusterEnabled: true}, Rules{
			Authority: []authority.Rule{
				{Resource: "GET:/hello", Strategy: authority.Black, Origins: []string{"appB", " appE"}, Literal: true},
			},
			ParamFlow: []hotparam.Rule{
				{Resource: "POST:/order", Param: "item_id", Count: 7, Duration: time.Second, Cluster: true},
			},
			Warnings: []string{
				objectFile + `:3:5: authority[0] (resource "GET:/hello"): limitApp entries " appE" have spaces around them: as in Sentinel, they match only an origin with the same spaces (write the list without spaces after the commas)`,
			},
		}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			got, err := Load(tt.file, tt.opts)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			compareRules(t, got, tt.want)
		})
	}
}

// compareRules reports every field of every rule that differs.
func compareRules(t *testing.T, got, want Rules) {
	t.Helper()
	if len(got.Authority) != len(want.Authority) {
		t.Errorf("%d authority rules, want %d: %+v", len(got.Authority), len(want.Authority), got.Authority)
	}
	for i := range min(len(got.Authority), len(want.Authority)) {
		compareFields(t, fmt.Sprintf("authority[%d]", i), got.Authority[i], want.Authority[i])
	}
	if len(got.ParamFlow) != len(want.ParamFlow) {
		t.Errorf("%d param_flow rules, want %d: %+v", len(got.ParamFlow), len(want.ParamFlow), got.ParamFlow)
	}
	for i := range min(len(got.ParamFlow), len(want.ParamFlow)) {
		compareFields(t, fmt.Sprintf("param_flow[%d]", i), got.ParamFlow[i], want.ParamFlow[i])
	}
	if !reflect.DeepEqual(got.Warnings, want.Warnings) {
		t.Errorf("warnings = %q\nwant       %q", got.Warnings, want.Warnings)
	}
}

func compareFields(t *testing.T, name string, got, want any) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		gf, wf := g.Field(i).Interface(), w.Field(i).Interface()
		if !reflect.DeepEqual(gf, wf) {
			t.Errorf("%s.%s = %#v, want %#v", name, g.Type().Field(i).Name, gf, wf)
		}
	}
}

func TestParseFormats(t *testing.T) {
	opts := ParseOptions{ParamNames: []string{"item_id"}}
	tests := []struct {
		name, file, data string
		want             Rules
	}{
		{"yaml list is Sentinel", "r.yaml", "- {resource: r, paramIdx: 0, count: 3}\n",
			Rules{ParamFlow: []hotparam.Rule{{Resource: "r", Param: "item_id", Count: 3, Duration: time.Second}}}},
		{"json in a yaml file", "r.yaml", `{"param_flow": [{"resource": "r", "param": "p", "count": 1}]}`,
			Rules{ParamFlow: []hotparam.Rule{{Resource: "r", Param: "p", Count: 1, Duration: time.Second}}}},
		{"json numbers keep their text", "r.json", `{"param_flow": [{"resource": "r", "param": "p", "count": 1, "items": [{"value": 1.50, "count": 2}, {"value": 1e3, "count": 3}]}]}`,
			Rules{ParamFlow: []hotparam.Rule{{Resource: "r", Param: "p", Count: 1, Duration: time.Second, Items: map[string]int64{"1.50": 2, "1e3": 3}}}}},
		{"byte order mark", "r.json", "\xef\xbb\xbf{\"authority\": []}", Rules{}},
		{"null sections", "r.yaml", "authority:\nparam_flow:\n", Rules{}},
		{"empty json object", "r.json", " {}\n", Rules{}},
		{"sentinel clusterMode without a store is local, with a warning", "r.json", `[{"resource": "r", "paramIdx": 0, "count": 5, "clusterMode": true, "clusterConfig": {"flowId": 7}}]`,
			Rules{
				ParamFlow: []hotparam.Rule{{Resource: "r", Param: "item_id", Count: 5, Duration: time.Second}},
				Warnings:  []string{`r.json:1:2: param_flow[0] (resource "r"): clusterMode: no shared store is configured (store.redis), so the rule is imported as a local rule: each replica counts on its own`},
			}},
		{"empty sentinel list", "r.json", "[]", Rules{}},
		{"negative paramIdx counts from the end", "r.json", `[{"resource": "r", "paramIdx": -1, "count": 2, "grade": 1}]`,
			Rules{ParamFlow: []hotparam.Rule{{Resource: "r", Param: "item_id", Count: 2, Duration: time.Second}}}},
		{"durations", "r.yaml", "param_flow: [{resource: r, param: p, count: 1, duration: 1h30m, behavior: throttle, max_queueing_time: 1.5s}]",
			Rules{ParamFlow: []hotparam.Rule{{Resource: "r", Param: "p", Count: 1, Duration: 90 * time.Minute, Behavior: hotparam.Throttle, MaxQueueingTime: 1500 * time.Millisecond}}}},
		{"zero values of fields that do not apply", "r.yaml", "param_flow: [{resource: r, param: p, grade: concurrency, count: 1, burst: 0, refund: false, max_queueing_time: 0s}]",
			Rules{
				ParamFlow: []hotparam.Rule{{Resource: "r", Param: "p", Grade: hotparam.Concurrency, Count: 1, Duration: time.Second}},
				Warnings:  []string{`r.yaml:1:14: param_flow[0] (resource "r"): ` + ConcurrencyWarning},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.file, []byte(tt.data), opts)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			compareRules(t, got, tt.want)
		})
	}
}

func TestParseBadShapes(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             string
	}{
		{"section not a list", "r.yaml", "authority: {resource: r}", "r.yaml:1:1: authority: must be a list of rules, got a mapping"},
		{"rule not a mapping", "r.yaml", "param_flow: [5]", "r.yaml:1:14: param_flow[0]: must be a mapping of fields, got 5"},
		{"sentinel element not a mapping", "r.json", `["x"]`, `r.json:1:2: param_flow[0]: must be a mapping of fields, got "x"`},
		{"item not a mapping", "r.yaml", "param_flow: [{resource: r, param: p, count: 1, items: [7]}]", `r.yaml:1:56: param_flow[0] (resource "r"): items[0]: must be a mapping of fields, got 7`},
		{"origins not a list", "r.yaml", "authority: [{resource: r, strategy: white, origins: a}]", `r.yaml:1:44: authority[0] (resource "r"): origins: must be a list, got "a"`},
		{"origin a mapping", "r.yaml", "authority: [{resource: r, strategy: white, origins: [{a: b}]}]", `r.yaml:1:44: authority[0] (resource "r"): origins: must be a string or a number, got a mapping`},
		{"count too large", "r.yaml", "param_flow: [{resource: r, param: p, count: 99999999999999999999}]", `r.yaml:1:38: param_flow[0] (resource "r"): count: must be a whole number, got 100000000000000000000`},
		{"item value empty", "r.yaml", `param_flow: [{resource: r, param: p, count: 1, items: [{value: "", count: 2}]}]`, `r.yaml:1:57: param_flow[0] (resource "r"): items[0].value: must not be empty`},
		{"sentinel int out of range", "r.json", `[{"resource": "r", "paramIdx": 0, "count": 1, "paramFlowItemList": [{"object": "3000000000", "classType": "int", "count": 2}]}]`, `r.json:1:70: param_flow[0] (resource "r"): paramFlowItemList[0].object: "3000000000" is not a value of classType int; Sentinel drops such an item, and the value would lose its exception`},
		{"sentinel regex", "r.json", `[{"resource": "r.*", "paramIdx": 0, "count": 1, "regex": true}]`, `r.json:1:49: param_flow[0] (resource "r.*"): regex: resource patterns are not supported; name each resource`},
		{"sentinel missing paramIdx", "r.json", `[{"resource": "r", "count": 1}]`, `r.json:1:2: param_flow[0] (resource "r"): paramIdx: required`},
		{"sentinel clusterConfig misspelt", "r.json", `[{"resource": "r", "paramIdx": 0, "count": 1, "clusterConfig": {"flowID": 1}}]`, `r.json:1:65: param_flow[0] (resource "r"): clusterConfig.flowID: unknown field (did you mean "flowId"?)`},
		{"sentinel object list not a list", "r.json", `{"paramFlowRules": 3}`, `r.json:1:2: paramFlowRules: must be a list of rules, got 3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.file, []byte(tt.data), ParseOptions{ParamNames: []string{"p"}})
			if got := fmt.Sprint(err); got != tt.want {
				t.Errorf("error = %q\nwant    %q", got, tt.want)
			}
		})
	}
}

func TestLoadMissingAndLarge(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "nope.yaml"), ParseOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big, ParseOptions{})
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want a size error", err)
	}
}
