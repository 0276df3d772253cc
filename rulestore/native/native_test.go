package native_test

import (
	"testing"

	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/native"
)

// TestDecode reads a native document through the decoding layer alone, with the format
// registered: the rules kept, and a misspelt field reported with did-you-mean.
func TestDecode(t *testing.T) {
	reg := new(decode.Registry)
	native.Register(reg)
	js := []byte(`{"authority": [{"resource": "GET:/a", "strategy": "white", "origins": ["svc"]}],
		"param_flow": [{"resource": "GET:/b", "param": "user", "count": 3}, {"resource": "GET:/c", "param": "user", "cuont": 1}]}`)
	f := decode.NewFile("rules.json", js, decode.Options{}, reg)
	ms, err := f.Members(js)
	if err != nil {
		t.Fatal(err)
	}
	native.Decode(f, ms)
	f.Place()
	if len(f.Authority) != 1 || len(f.ParamFlow) != 1 || f.ParamFlow[0].Count != 3 {
		t.Errorf("kept %d authority and %d param-flow rules (%+v), want 1 and 1 of count 3", len(f.Authority), len(f.ParamFlow), f.ParamFlow)
	}
	if len(f.Errs) != 2 {
		t.Fatalf("problems %v, want the unknown field and the missing count", f.Errs)
	}
	if e := f.Errs[0]; e.Section != decode.SectionParamFlow || e.Index != 1 || e.Field != "cuont" || e.Line != 2 {
		t.Errorf("problem %+v, want param_flow[1] cuont on line 2", e)
	}
	if got, want := f.Errs[0].Error(), `rules.json:2:`; len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("message %q, want it to start with %q", got, want)
	}
}
