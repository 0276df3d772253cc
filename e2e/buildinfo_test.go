package e2e

import (
	"net/http"
	"regexp"
	"runtime"
	"testing"
)

// TestBuildInfoMetric: the binary publishes which build it is, with the Go version that built
// it (this test's own toolchain built it).
func TestBuildInfoMetric(t *testing.T) {
	s := sharedService(t)
	code, body := get(t, s.adminURL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	m := regexp.MustCompile(`(?m)^extauthz_build_info\{commit="([^"]*)",goversion="([^"]*)",version="([^"]+)"\} 1$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no extauthz_build_info{commit, goversion, version} 1 in /metrics")
	}
	if m[2] != runtime.Version() {
		t.Errorf("extauthz_build_info goversion %q, want %q", m[2], runtime.Version())
	}
}
