package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// adminGet returns the body of GET path on s's admin listener.
func adminGet(t *testing.T, s *service, path string) string {
	t.Helper()
	resp, err := http.Get(s.adminURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %v: %s", path, resp.StatusCode, err, body)
	}
	return string(body)
}

// TestSensitiveParam: GET:/reports is limited by api_key (x-api-key), a param named like a
// credential. Its value, blocked and counted, shows up nowhere in clear: not in /hot, not in
// the console's data, not in the log; it shows as a keyed hash.
func TestSensitiveParam(t *testing.T) {
	s := newService(t, readRules(t))
	const secret = "sk-live-e2e-5f3a"
	r := req("GET", "/reports", "192.0.2.4", "x-origin", "ops", "x-api-key", secret)
	var codes []int
	for range 3 {
		codes = append(codes, checkCode(t, s.check(t, r)))
	}
	if codes[2] != 429 {
		t.Fatalf("Check codes = %v, want the third refused with 429", codes)
	}
	for _, path := range []string{"/hot", "/console/data"} {
		body := adminGet(t, s, path)
		if strings.Contains(body, secret) {
			t.Errorf("GET %s shows the API key in clear: %s", path, body)
		}
		if !strings.Contains(body, `"hmac:`) {
			t.Errorf("GET %s shows no hashed value: %s", path, body)
		}
	}
	if !eventually(5*time.Second, func() bool { return strings.Contains(s.logs.String(), `"value":"hmac:`) }) {
		t.Errorf("no block logged with a hashed value:\n%s", s.logs.String())
	}
	if strings.Contains(s.logs.String(), secret) {
		t.Errorf("the log carries the API key in clear:\n%s", s.logs.String())
	}
}

// decisions are the decision log's entries in s's log so far, by request id.
func decisions(s *service) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["logger"] != "decision" || e["msg"] != "decision" {
			continue
		}
		id, _ := e["request_id"].(string)
		out[id] = append(out[id], e)
	}
	return out
}

// TestDecisionLog: a block of either API is logged once at info with Envoy's x-request-id (from
// the CheckRequest, and for ShouldRateLimit from the lease entry envoy.yaml sends it in);
// allowed calls are not logged by default.
func TestDecisionLog(t *testing.T) {
	s := newService(t, readRules(t))
	stranger := req("GET", "/items?item_id=d-1", "192.0.2.1", "x-origin", "stranger")
	stranger.Headers["x-request-id"] = []string{"rid-check-403"}
	if got := checkCode(t, s.check(t, stranger)); got != 403 {
		t.Fatalf("stranger's Check = %d, want 403", got)
	}
	friend := req("GET", "/items?item_id=d-1", "192.0.2.1", "x-origin", "web")
	friend.Headers["x-request-id"] = []string{"rid-check-200"}
	if got := checkCode(t, s.check(t, friend)); got != 200 {
		t.Fatalf("friend's Check = %d, want 200", got)
	}
	for i, id := range []string{"rid-dl-1", "rid-dl-2", "rid-dl-3"} {
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := s.limit(t, limitRequest(t, downloadReq("dec-1", id), false)).GetOverallCode(); got != want {
			t.Fatalf("download %s: %v, want %v", id, got, want)
		}
	}
	want := map[string]map[string]any{
		"rid-check-403": {"level": "info", "api": "check", "result": "blocked"},
		"rid-dl-3":      {"level": "info", "api": "ratelimit", "result": "blocked"},
	}
	var got map[string][]map[string]any
	eventually(5*time.Second, func() bool { got = decisions(s); return len(got) >= len(want) })
	for id, fields := range want {
		if len(got[id]) != 1 {
			t.Errorf("request %s: %d decisions logged, want 1; log:\n%s", id, len(got[id]), s.logs.String())
			continue
		}
		for k, v := range fields {
			if got[id][0][k] != v {
				t.Errorf("request %s: %s = %v, want %v", id, k, got[id][0][k], v)
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("request %q logged, want only the blocks: %v", id, got[id])
		}
	}
}
