package envoy

import (
	"net/http"
	"testing"
)

// TestInvalidUTF8ThroughEnvoy: Envoy refuses an ext_authz answer holding a string that is not
// UTF-8 (and fails closed, 503), so nothing the service answers may hold one, whatever bytes a
// request carried: a param whose percent-escapes decode to invalid UTF-8 is decided on like
// any other, and its allowed Check's identity metadata reaches Envoy.
func TestInvalidUTF8ThroughEnvoy(t *testing.T) {
	s := newStack(t, stackOptions{config: []byte(`
log: {level: info, format: json}
authz:
  origin: [{from: header, name: x-origin}]
  params:
    q: {from: query, name: q}
  keep_origin_headers: true
`), rules: []byte(`
param_flow:
  - {resource: "GET:/reports", param: q, grade: qps, count: 1, duration: 1h}
`)})
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/reports?q=ok", http.StatusOK},
		{"/reports?q=ok", http.StatusTooManyRequests},
		{"/reports?q=%FF", http.StatusOK},
		{"/reports?q=%FF", http.StatusTooManyRequests},
		{"/reports?q=a%C3", http.StatusOK},
		{"/reports?q=a%C3", http.StatusTooManyRequests},
	} {
		if a := s.raw(tc.path, "x-origin", "web"); a.status != tc.want {
			t.Errorf("%s: %d, want %d (%q)", tc.path, a.status, tc.want, a.body)
		}
	}
}

// TestInvalidUTF8RateLimitThroughEnvoy: Envoy percent-decodes a query parameter into a
// descriptor value that is not UTF-8 and sends it; the answers to it, allowed and refused
// (with the value in the JSON body), are ones Envoy reads: 7 allowed, then 429, never a 500
// of a failed call.
func TestInvalidUTF8RateLimitThroughEnvoy(t *testing.T) {
	s := newStack(t, stackOptions{})
	got := map[int]int{}
	for i := 0; i < 9; i++ {
		got[s.raw("/items?item_id=%FF%FE", "x-origin", "web").status]++
	}
	if got[http.StatusOK] != 7 || got[http.StatusTooManyRequests] != 2 {
		t.Errorf("9 requests of one item whose id is not UTF-8: %v, want 7 200s and 2 429s", got)
	}
	if n := s.envoy.Stat(t, "cluster.upstream.ratelimit.extauthz_rl.error"); n != 0 {
		t.Errorf("%d rate-limit calls failed", n)
	}
}
