package rulestore

import (
	"strings"
	"testing"
)

// TestSentinelImportWarnings: what an imported file gets where Sentinel's meaning is kept.
func TestSentinelImportWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		check     func(t *testing.T, r Rules)
		warnings  []string
	}{
		{"equal items, last wins", `[{"resource": "r", "paramIdx": 0, "count": 1, "paramFlowItemList": [{"object": "7", "classType": "int", "count": 0}, {"object": "007", "classType": "int", "count": 3}]}]`,
			func(t *testing.T, r Rules) {
				if got := r.ParamFlow[0].Items; len(got) != 1 || got["7"] != 3 {
					t.Errorf("items %v, want map[7:3]", got)
				}
			}, []string{`paramFlowItemList[0] ("7") and paramFlowItemList[1] ("007") are one value (7) to Sentinel: the last one's count, 3, applies`}},
		{"class read as String", `[{"resource": "r", "paramIdx": 0, "count": 1, "paramFlowItemList": [{"object": "07", "classType": "Integer", "count": 2}]}]`,
			func(t *testing.T, r Rules) {
				if r.ParamFlow[0].Match != nil || r.ParamFlow[0].Items["07"] != 2 {
					t.Errorf("rule %+v, want the item 07 as text", r.ParamFlow[0])
				}
			}, []string{`classType "Integer" is read as String by Sentinel`}},
		{"boolean", `[{"resource": "r", "paramIdx": 0, "count": 1, "paramFlowItemList": [{"object": "yes", "classType": "boolean", "count": 2}]}]`,
			func(t *testing.T, r Rules) {
				if r.ParamFlow[0].Items["false"] != 2 {
					t.Errorf("items %v, want map[false:2] (Boolean.parseBoolean)", r.ParamFlow[0].Items)
				}
			}, []string{`object "yes" of classType boolean is the value "false" to Sentinel`}},
		{"gateway prefix", `[{"resource": "route", "resourceMode": 0, "count": 1, "paramItem": {"parseStrategy": 2, "fieldName": "x-user", "pattern": "vip", "matchStrategy": 1}}]`,
			func(t *testing.T, r Rules) {
				if r.ParamFlow[0].Match != nil {
					t.Errorf("match %v, want none: Sentinel limits every value", r.ParamFlow[0].Match)
				}
			}, []string{`paramItem.matchStrategy 1 (prefix) is not implemented by Sentinel`, `needs a mapping source`}},
		{"second authority rule", `[{"resource": "r", "limitApp": "a", "strategy": 0}, {"resource": "r", "limitApp": "b", "strategy": 0}]`,
			func(t *testing.T, r Rules) {
				if len(r.Authority) != 1 || r.Authority[0].Origins[0] != "a" {
					t.Errorf("authority %+v, want the first rule alone", r.Authority)
				}
			}, []string{`r.json:1:53: authority (resource "r"): a second authority rule on this resource is ignored, as Sentinel ignores it: authority[0] is the one in force`}},
		{"native lists of one kind", "authority: [{resource: r, strategy: white, origins: [a]}, {resource: r, strategy: white, origins: [b]}]",
			func(t *testing.T, r Rules) {
				if len(r.Authority) != 2 {
					t.Errorf("%d authority rules, want both", len(r.Authority))
				}
			}, []string{`several lists of one kind on one resource`}},
		{"native number match", `param_flow: [{resource: r, param: p, count: 1, match: {number: int}, items: [{value: "007", count: 5}, {value: "vip", count: 2}]}]`,
			func(t *testing.T, r Rules) {
				if it := r.ParamFlow[0].Items; it["7"] != 5 || it["vip"] != 2 {
					t.Errorf("items %v, want map[7:5 vip:2]", it)
				}
			}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "r.json"
			if !strings.HasPrefix(tc.doc, "[") {
				file = "r.yaml"
			}
			rules, err := Parse(file, []byte(tc.doc), ParseOptions{ParamNames: []string{"p"}})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rules)
			if len(rules.Warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", rules.Warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(rules.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, rules.Warnings[i], w)
				}
			}
		})
	}
}
