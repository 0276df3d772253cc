package envoy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// zeroPercent is a runtime fractional percent of 0, the first step of a staged rollout.
func zeroPercent(key string) map[string]any {
	return map[string]any{"default_value": map[string]any{"numerator": 0, "denominator": "HUNDRED"}, "runtime_key": key}
}

// blocked counts the service's decision log lines that refused (result blocked) for reason.
func (s *stack) blocked(api, reason string) int {
	n := 0
	for _, line := range strings.Split(s.svc.LogText(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != "decision" {
			continue
		}
		if e["api"] == api && e["result"] == "blocked" && e["reason"] == reason {
			n++
		}
	}
	return n
}

// waitBlocked waits up to 10s for the service to have logged n refusals (the log is read from
// the process as it writes it), and returns early when it has.
func waitBlocked(s *stack, api, reason string, n int) {
	for deadline := time.Now().Add(10 * time.Second); s.blocked(api, reason) < n && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRolloutNotEnforced: with the rate-limit filter's filter_enforced at 0% (the variant's one
// edit) the service decides every request and Envoy enforces none: the client of a third
// download in flight gets 200, and the service counts the refusal. The stream-done release
// Envoy sends for that refused acquire frees nothing (lease ids): a fourth download, sent after
// the third completed while the first two still run, is refused too.
func TestRolloutNotEnforced(t *testing.T) {
	s := newStack(t, stackOptions{bootstrap: variant(t, func(root map[string]any) {
		httpFilter(root, "envoy.filters.http.ratelimit")["filter_enforced"] = zeroPercent("ratelimit.extauthz_enforced")
	})})
	dl := func(delay string) answer {
		kv := []string{"x-origin", "web", "x-user-id", "rollout"}
		if delay != "" {
			kv = append(kv, envoytest.DelayHeader, delay)
		}
		return s.do(h1, "GET", "/downloads/f.bin", kv...)
	}
	var wg sync.WaitGroup
	held := make([]answer, 2)
	for i := range held {
		wg.Add(1)
		go func() { defer wg.Done(); held[i] = dl("4000") }()
	}
	if !s.up.Wait(10*time.Second, func(_ []envoytest.Request, inflight int) bool { return inflight == 2 }) {
		t.Fatal("two downloads are not held at the upstream")
	}
	third := dl("")
	fourth := dl("")
	if third.status != http.StatusOK || fourth.status != http.StatusOK {
		t.Errorf("not enforced: third and fourth downloads got %d and %d, want 200 and 200", third.status, fourth.status)
	}
	waitBlocked(s, "ratelimit", "concurrency", 2)
	if got := s.blocked("ratelimit", "concurrency"); got != 2 {
		t.Errorf("the service refused %d downloads, want 2 (the third, and the fourth after the third's release)", got)
	}
	wg.Wait()
	for i, a := range held {
		if a.status != http.StatusOK {
			t.Errorf("held download %d: %d, want 200", i, a.status)
		}
	}
}

// TestRolloutShadowMode: with ext_authz's shadow_mode (the variant's one edit) the service's
// refusal is not enforced: an origin off the white list reaches the upstream, and the service
// counts the refusal. The route is one without rate limits: the rate-limit filter runs the
// same authority rules on its descriptors, and shadow_mode does not reach it (roll an
// authority rule out with the rule's own shadow: true instead).
func TestRolloutShadowMode(t *testing.T) {
	s := newStack(t, stackOptions{bootstrap: variant(t, func(root map[string]any) {
		httpFilter(root, "envoy.filters.http.ext_authz")["shadow_mode"] = true
	})})
	if a := s.do(h1, "GET", "/reports", "x-origin", "stranger"); a.status != http.StatusOK {
		t.Errorf("shadow mode: an unlisted origin got %d, want 200", a.status)
	}
	waitBlocked(s, "check", "authority", 1)
	if got := s.blocked("check", "authority"); got != 1 {
		t.Errorf("the service refused %d Checks, want 1", got)
	}
	if n := len(s.up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestRolloutNotCalled: with the rate-limit filter's filter_enabled at 0% (the variant's one
// edit) Envoy makes no call for a request, nor its stream-done release.
func TestRolloutNotCalled(t *testing.T) {
	s, rec := newRecordedStack(t, variant(t, func(root map[string]any) {
		httpFilter(root, "envoy.filters.http.ratelimit")["filter_enabled"] = zeroPercent("ratelimit.extauthz_enabled")
	}))
	if a := s.do(h1, "GET", "/downloads/f.bin", "x-origin", "web", "x-user-id", "u"); a.status != http.StatusOK {
		t.Fatalf("status %d, want 200", a.status)
	}
	// The recorder answers the Check first: once the upstream has answered, the stream-done
	// release, if Envoy sent one, would follow at once; the Check after it on a second request
	// orders the two.
	s.do(h1, "GET", "/reports", "x-origin", "web")
	checks, limits := rec.take()
	if len(checks) != 2 || len(limits) != 0 {
		t.Errorf("filter_enabled 0%%: %d Checks and %d ShouldRateLimit calls, want 2 and 0", len(checks), len(limits))
	}
}
