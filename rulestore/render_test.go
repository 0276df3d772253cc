package rulestore

import (
	"encoding/json"
	"testing"
)

// TestRenderSpellsTheFile: a parsed rule renders with the rules file's names and spellings, the
// defaults it leaves out made explicit, so /rules shows what the file means.
func TestRenderSpellsTheFile(t *testing.T) {
	rules, err := Parse("r.yaml", []byte(`
authority:
  - {resource: "GET:/a", strategy: black, origins: [bot]}
param_flow:
  - {resource: "GET:/a", param: user, count: 5, duration: 2s, behavior: throttle, max_queueing_time: 300ms, items: [{value: vip, count: 50}]}
  - {resource: "GET:/b", param: user, grade: concurrency, count: 2}
  - {resource: "GET:/b", domain: llm, param: user, count: 3}
  - {resource: "GET:/c", param: user, count: 9, duration: 1h, charge: postpaid}
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tt := range []struct{ got, want string }{
		{got(AuthorityOf(rules.Authority[0])),
			`{"resource":"GET:/a","strategy":"black","origins":["bot"],"missing_origin":"allow","shadow":false}`},
		{got(ParamFlowOf(rules.ParamFlow[0])),
			`{"resource":"GET:/a","param":"user","grade":"qps","count":5,"duration":"2s","behavior":"throttle","max_queueing_time":"300ms","items":{"vip":50},"refund":false,"cluster":false,"shadow":false}`},
		{got(ParamFlowOf(rules.ParamFlow[1])),
			`{"resource":"GET:/b","param":"user","grade":"concurrency","count":2,"refund":false,"cluster":false,"shadow":false}`},
		{got(ParamFlowOf(rules.ParamFlow[2])),
			`{"resource":"GET:/b","domain":"llm","param":"user","grade":"qps","count":3,"duration":"1s","behavior":"reject","refund":false,"cluster":false,"shadow":false}`},
		{got(ParamFlowOf(rules.ParamFlow[3])),
			`{"resource":"GET:/c","param":"user","grade":"qps","count":9,"duration":"1h0m0s","behavior":"reject","refund":false,"charge":"postpaid","cluster":false,"shadow":false}`},
	} {
		if tt.got != tt.want {
			t.Errorf("rendered\n %s\nwant\n %s", tt.got, tt.want)
		}
	}
}
