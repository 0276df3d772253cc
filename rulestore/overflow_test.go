package rulestore

import (
	"testing"

	"github.com/extauthz/extauthz/hotparam"
)

// TestParseStateBudgetAndOverflow: a rule's own budget for its evicted values' states and
// the way it fails past it, as written and as /rules renders them.
func TestParseStateBudgetAndOverflow(t *testing.T) {
	rules, err := Parse("rules.yaml", []byte(`
param_flow:
  - {resource: "POST:/order", param: item_id, count: 3, duration: 1h, state_budget: 64MiB, overflow: refuse}
  - {resource: "POST:/order", param: user, count: 3, duration: 1h, state_budget: 1000B, overflow: forget}
  - {resource: "POST:/order", param: ip, count: 3, duration: 1h}
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		budget   int64
		overflow hotparam.Overflow
		rendered [2]string
	}{
		{64 << 20, hotparam.OverflowRefuse, [2]string{"64MiB", "refuse"}},
		{1000, hotparam.OverflowForget, [2]string{"1000B", "forget"}},
		{0, hotparam.OverflowDefault, [2]string{"", ""}},
	} {
		r := rules.ParamFlow[i]
		if r.StateBudget != want.budget || r.Overflow != want.overflow {
			t.Errorf("rule %d: state budget %d, overflow %v; want %d, %v", i, r.StateBudget, r.Overflow, want.budget, want.overflow)
		}
		j := ParamFlowOf(r)
		if got := [2]string{j.StateBudget, j.Overflow}; got != want.rendered {
			t.Errorf("rule %d rendered: %q, want %q", i, got, want.rendered)
		}
	}
}
