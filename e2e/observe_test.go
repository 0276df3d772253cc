package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
