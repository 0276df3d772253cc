package envoy

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// domainRules limit POST:/chat per user: three a minute in every domain together (one state,
// shared), and one a minute in domain "free".
const domainRules = `
param_flow:
  - {resource: "POST:/chat", param: user, count: 3, duration: 1m}
  - {resource: "POST:/chat", domain: free, param: user, count: 1, duration: 1m}
`

// chatRoute is a route on path sending the descriptor of POST:/chat per user to the rate-limit
// service, in domain (the filter's own, extauthz, when domain is "").
func chatRoute(name, path, domain string) map[string]any {
	perRoute := map[string]any{
		"@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
		"rate_limits": []any{map[string]any{"actions": []any{
			map[string]any{"generic_key": map[string]any{"descriptor_key": "resource", "descriptor_value": "POST:/chat"}},
			map[string]any{"request_headers": map[string]any{"header_name": "x-user-id", "descriptor_key": "user"}},
		}}},
	}
	if domain != "" {
		perRoute["domain"] = domain
	}
	return map[string]any{
		"name":                    name,
		"match":                   map[string]any{"path": path},
		"route":                   map[string]any{"cluster": "upstream"},
		"typed_per_filter_config": map[string]any{"envoy.filters.http.ratelimit": perRoute},
	}
}

// TestDomainsScopeRules: routes that name their rate-limit domain (RateLimitPerRoute.domain)
// are decided by their domain's rules and the rules without a domain. Domain free's own rule
// refuses its user's second request; the rule without a domain is one allowance shared by the
// domains free, paid and the filter's own, spent by the third allowed request wherever it came
// from. The refusal's decision log line and the decision metrics carry the domain, and /rules
// shows the rule's.
func TestDomainsScopeRules(t *testing.T) {
	s := newStack(t, stackOptions{rules: []byte(domainRules), bootstrap: variant(t, func(root map[string]any) {
		vh := vhost(root)
		vh["routes"] = append([]any{
			chatRoute("chat-free", "/chat/free", "free"),
			chatRoute("chat-paid", "/chat/paid", "paid"),
			chatRoute("chat", "/chat", ""),
		}, vh["routes"].([]any)...)
	})})
	steps := []struct {
		path   string
		status int
		rule   string // the rule Envoy's x-ratelimit-limit names
	}{
		{"/chat/free", http.StatusOK, ""},
		{"/chat/free", http.StatusTooManyRequests, `name="param_flow[1]`}, // free's own: one a minute
		{"/chat/paid", http.StatusOK, ""},                                 // the shared rule's second
		{"/chat", http.StatusOK, ""},                                      // and third
		{"/chat/paid", http.StatusTooManyRequests, `name="param_flow[0]`}, // spent, for every domain
		{"/chat", http.StatusTooManyRequests, `name="param_flow[0]`},
	}
	for i, st := range steps {
		a := s.do(h1, "POST", st.path, "x-user-id", "ann")
		if a.status != st.status {
			t.Fatalf("step %d: POST %s: %d, want %d (%s)", i, st.path, a.status, st.status, a.body)
		}
		if lim := a.header.Get("x-ratelimit-limit"); st.rule != "" && !strings.Contains(lim, st.rule) {
			t.Errorf("step %d: POST %s: x-ratelimit-limit %q, want it to name %s", i, st.path, lim, st.rule)
		}
	}
	// Another user of domain free has its own allowance.
	if a := s.do(h1, "POST", "/chat/free", "x-user-id", "bob"); a.status != http.StatusOK {
		t.Errorf("another user in domain free: %d, want 200", a.status)
	}

	domains := map[string]int{}
	for _, line := range strings.Split(s.svc.LogText(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "decision" || e["result"] != "blocked" {
			continue
		}
		d, _ := e["domain"].(string)
		domains[d]++
	}
	if want := map[string]int{"free": 1, "paid": 1, "extauthz": 1}; !equalCounts(domains, want) {
		t.Errorf("refusals logged by domain: %v, want %v", domains, want)
	}
	for _, m := range []struct {
		domain, result string
		want           float64
	}{{"free", "param_flow", 1}, {"free", "ok", 2}, {"paid", "ok", 1}, {"paid", "param_flow", 1}, {"extauthz", "ok", 1}} {
		got := metric(t, s.svc.Get, "extauthz_decisions_total", `api="ratelimit"`, `domain="`+m.domain+`"`,
			`resource="POST:/chat"`, `result="`+m.result+`"`)
		if got != m.want {
			t.Errorf("decisions of domain %s with result %s: %v, want %v", m.domain, m.result, got, m.want)
		}
	}
	_, body := s.svc.Get(t, "/rules")
	var rules struct {
		ParamFlow []struct{ Resource, Domain string } `json:"param_flow"`
	}
	if err := json.Unmarshal([]byte(body), &rules); err != nil {
		t.Fatalf("/rules: %v", err)
	}
	if len(rules.ParamFlow) != 2 || rules.ParamFlow[0].Domain != "" || rules.ParamFlow[1].Domain != "free" {
		t.Errorf("/rules shows the param_flow rules' domains as %+v, want none and free", rules.ParamFlow)
	}
}

// TestValidateShowsDomain: `extauthz validate` names the domain of a rule that has one.
func TestValidateShowsDomain(t *testing.T) {
	bin := service.Path(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(domainRules), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "validate", path).CombinedOutput()
	if err != nil {
		t.Fatalf("extauthz validate: %v\n%s", err, out)
	}
	for _, want := range []string{
		`param_flow[0] -> param_flow: {resource: "POST:/chat", param: "user", count: 3, duration: 1m}`,
		`param_flow[1] -> param_flow: {resource: "POST:/chat", domain: "free", param: "user", count: 1, duration: 1m}`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate output has no %q:\n%s", want, out)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
