package sentinel_test

import (
	"testing"

	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/sentinel"
)

// TestObjectAndList reads Sentinel's object form and its list through the decoding layer
// alone: the rules kept under the service's sections, the paramIdx resolved by ParamNames.
func TestObjectAndList(t *testing.T) {
	reg := new(decode.Registry)
	sentinel.Register(reg)
	opts := decode.Options{ParamNames: []string{"user"}}

	obj := []byte(`{"paramFlowRules": [{"resource": "GET:/b", "paramIdx": 0, "count": 5}],
		"authorityRules": [{"resource": "GET:/a", "limitApp": "svc", "strategy": 0}]}`)
	f := decode.NewFile("sentinel.json", obj, opts, reg)
	ms, err := f.Members(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !sentinel.IsObject(ms) {
		t.Fatal("IsObject = false for an object with paramFlowRules")
	}
	sentinel.Object(f, ms)
	f.Place()
	if len(f.Errs) > 0 || len(f.Authority) != 1 || len(f.ParamFlow) != 1 || f.ParamFlow[0].Param != "user" {
		t.Errorf("object: problems %v, authority %+v, param flow %+v; want one of each, param user", f.Errs, f.Authority, f.ParamFlow)
	}

	list := []byte(`[{"resource": "GET:/b", "paramIdx": 1, "count": 5}]`)
	f = decode.NewFile("sentinel.json", list, opts, reg)
	sentinel.List(f, list)
	f.Place()
	if len(f.Errs) != 1 || f.Errs[0].Field != "paramIdx" || f.Errs[0].Line != 1 {
		t.Errorf("list: problems %v, want paramIdx out of range, on line 1", f.Errs)
	}
}
