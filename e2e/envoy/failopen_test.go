package envoy

import (
	"net/http"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// TestFailOpenIsVisible: with the service down, the shipped ext_authz fails closed (503) and
// the rate-limit filter fails open, counted in failure_mode_allowed; where ext_authz is set to
// fail open (the variant's one edit), what it lets through carries
// x-envoy-auth-failure-mode-allowed to the upstream, by the shipped failure_mode_allow_header_add.
func TestFailOpenIsVisible(t *testing.T) {
	t.Run("shipped", func(t *testing.T) {
		s := newStack(t, stackOptions{})
		s.svc.Kill()
		if a := s.do(h1, "GET", "/items?item_id=fo", "x-origin", "web"); a.status != http.StatusServiceUnavailable {
			t.Errorf("service down, shipped: status %d, want 503 (ext_authz fails closed)", a.status)
		}
	})
	t.Run("ext_authz fails open", func(t *testing.T) {
		s := newStack(t, stackOptions{bootstrap: variant(t, func(root map[string]any) {
			httpFilter(root, "envoy.filters.http.ext_authz")["failure_mode_allow"] = true
		})})
		s.svc.Kill()
		a := s.do(h1, "GET", "/items?item_id=fo", "x-origin", "web")
		if a.status != http.StatusOK {
			t.Fatalf("service down, failing open: status %d, want 200", a.status)
		}
		if !s.up.Wait(5*time.Second, func(reqs []envoytest.Request, _ int) bool { return len(reqs) == 1 }) {
			t.Fatal("the request did not reach the upstream")
		}
		got := s.up.Requests()[0].Header.Get("x-envoy-auth-failure-mode-allowed")
		if got != "true" {
			t.Errorf("upstream saw x-envoy-auth-failure-mode-allowed %q, want true", got)
		}
		st := s.envoy.Stats(t)
		if n := st["http.ingress.ext_authz.extauthz.failure_mode_allowed"]; n != 1 {
			t.Errorf("ext_authz failure_mode_allowed = %d, want 1", n)
		}
		if n := st["cluster.upstream.ratelimit.extauthz_rl.failure_mode_allowed"]; n != 1 {
			t.Errorf("ratelimit failure_mode_allowed = %d, want 1 (it fails open, counted only)", n)
		}
	})
}
