package main

import (
	"testing"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

func TestRuleUses(t *testing.T) {
	set := &rulestore.Set{Rules: rulestore.Rules{
		Authority: []authority.Rule{{Resource: "GET:/a"}},
		ParamFlow: []hotparam.Rule{{Resource: "GET:/b", Param: "user"}},
	}}
	u := ruleUses{current: func() *rulestore.Set { return set }}
	if !u.UsesOrigin("GET:/a") || u.UsesOrigin("GET:/b") {
		t.Error("UsesOrigin: want only the resource with an authority rule")
	}
	if !u.UsesParam("GET:/b", "user") || u.UsesParam("GET:/b", "tag") || u.UsesParam("GET:/a", "user") {
		t.Error("UsesParam: want only the resource and param of a param-flow rule")
	}
	none := ruleUses{current: func() *rulestore.Set { return nil }}
	if !none.UsesOrigin("x") || !none.UsesParam("x", "y") {
		t.Error("without rules every source must count as used")
	}
}
