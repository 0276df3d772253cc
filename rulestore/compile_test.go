package rulestore

import (
	"errors"
	"testing"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// TestParseRefusesWhatTheEngineRefuses: Parse compiles the rules as a load does, and addresses
// the engine's refusal to the rule by its place in the file.
func TestParseRefusesWhatTheEngineRefuses(t *testing.T) {
	tests := []struct {
		name, file, data string
		section          string
		index            int
	}{
		{"native", "r.yaml", "param_flow:\n  - {resource: a, param: p, count: 1}\n  - {resource: b, param: p, count: 9223372036854775807}\n", "param_flow", 1},
		{"burst overflows", "r.yaml", "param_flow:\n  - {resource: b, param: p, count: 9223372036854775000, burst: 1000}\n", "param_flow", 0},
		{"item", "r.yaml", "param_flow:\n  - {resource: b, param: p, count: 1, items: [{value: \"x\", count: 9223372036854775807}]}\n", "param_flow", 0},
		// In a Sentinel list, the param-flow rules are numbered among themselves, as the service
		// numbers the rules in force.
		{"sentinel list", "r.json", `[{"resource": "a", "limitApp": "x", "strategy": 0}, {"resource": "b", "paramIdx": 0, "count": 9.2e18}]`, "param_flow", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.file, []byte(tc.data), ParseOptions{ParamNames: []string{"p"}})
			var ve *decode.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse = %v, want a decode.ValidationError", err)
			}
			if ve.Section != tc.section || ve.Index != tc.index || ve.Resource != "b" {
				t.Errorf("error %q addressed to %s[%d] %q, want %s[%d] \"b\"", ve, ve.Section, ve.Index, ve.Resource, tc.section, tc.index)
			}
		})
	}
}
