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
