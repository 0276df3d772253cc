package envoy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// budgetRules is an LLM token budget: 100 tokens an hour per user, charged after each response
// with what it used.
const budgetRules = `
param_flow:
  - {resource: "llm-tokens", param: user, count: 100, duration: 1h, charge: postpaid}
`

// llmRoute is the route of README's "LLM tokens per user per hour" recipe: the request-time
// descriptor (hits_addend 0) is the admission check, and the stream-done one charges the
// tokens the upstream reports in x-usage-tokens.
func llmRoute() map[string]any {
	actions := []any{
		map[string]any{"generic_key": map[string]any{"descriptor_key": "resource", "descriptor_value": "llm-tokens"}},
		map[string]any{"request_headers": map[string]any{"header_name": "x-user-id", "descriptor_key": "user"}},
	}
	return map[string]any{
		"name":  "llm",
		"match": map[string]any{"path": "/v1/chat/completions"},
		"route": map[string]any{"cluster": "upstream"},
		"typed_per_filter_config": map[string]any{"envoy.filters.http.ratelimit": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
			"rate_limits": []any{
				map[string]any{"hits_addend": map[string]any{"number": 0}, "actions": actions},
				map[string]any{"apply_on_stream_done": true,
					"hits_addend": map[string]any{"format": "%RESP(x-usage-tokens)%"}, "actions": actions},
			},
		}},
	}
}

// TestBudgetChargedAfterResponse: through Envoy, each response of the upstream reports the
// tokens it used (x-usage-tokens) and the stream-done descriptor charges them. A user is
// admitted while tokens are left, the second response's charge overshoots the budget (into
// debt, never lost), and the next request is refused; other users have their own budget, and a
// response that reports no usage charges nothing (Envoy sends no descriptor for it).
func TestBudgetChargedAfterResponse(t *testing.T) {
	s := newStack(t, stackOptions{rules: []byte(budgetRules), bootstrap: variant(t, func(root map[string]any) {
		vh := vhost(root)
		vh["routes"] = append([]any{llmRoute()}, vh["routes"].([]any)...)
	})})
	calls := 0 // the service's decisions on llm-tokens: an admission and a charge per answered request
	ask := func(user, usage string) answer {
		t.Helper()
		kv := []string{"x-user-id", user}
		if usage != "" {
			kv = append(kv, envoytest.ResponseHeader, "x-usage-tokens: "+usage)
		}
		a := s.do(h1, "POST", "/v1/chat/completions", kv...)
		calls++
		if a.status == http.StatusOK && usage != "" {
			calls++ // the charge, sent when the stream is done
		}
		waitDecisions(t, s, "llm-tokens", calls)
		return a
	}
	steps := []struct {
		user, usage string
		status      int
		remaining   string // x-ratelimit-remaining of the admission
	}{
		{"ann", "60", http.StatusOK, "100"},
		{"ann", "60", http.StatusOK, "40"}, // admitted: 40 left; charged 60, 20 in debt
		{"ann", "1", http.StatusTooManyRequests, "0"},
		{"bob", "30", http.StatusOK, "100"},
		{"carl", "", http.StatusOK, "100"}, // no usage reported
		{"carl", "", http.StatusOK, "100"}, // nothing was charged
	}
	for i, st := range steps {
		a := ask(st.user, st.usage)
		if a.status != st.status {
			t.Fatalf("step %d (%s): %d, want %d (%s)", i, st.user, a.status, st.status, a.body)
		}
		if got := a.header.Get("x-ratelimit-remaining"); got != st.remaining {
			t.Errorf("step %d (%s): x-ratelimit-remaining %q, want %q", i, st.user, got, st.remaining)
		}
	}
	// The refusal says when a token is back: the 20 of debt and one more, at 36s a token.
	a := s.do(h1, "POST", "/v1/chat/completions", "x-user-id", "ann")
	if a.status != http.StatusTooManyRequests || a.header.Get("retry-after") != "756" {
		t.Errorf("ann in debt: %d with retry-after %q, want 429 with 756 (21 tokens of 36s)", a.status, a.header.Get("retry-after"))
	}
	if up := s.up.Requests(); countPath(up, "/v1/chat/completions") != 5 {
		t.Errorf("%d requests reached the upstream, want the 5 admitted", countPath(up, "/v1/chat/completions"))
	}
}

// waitDecisions waits until the service has decided n rate-limit calls on resource.
func waitDecisions(t *testing.T, s *stack, resource string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := metric(t, s.svc.Get, "extauthz_decisions_total", `api="ratelimit"`, `resource="`+resource+`"`)
		if int(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v rate-limit decisions on %s after 10s, want %d", got, resource, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countPath(reqs []envoytest.Request, path string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, path) {
			n++
		}
	}
	return n
}
