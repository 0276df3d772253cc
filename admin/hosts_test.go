package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/extauthz/extauthz/rulestore"
)

// TestHostFilter: the listener answers loopback names, IP addresses and its configured names,
// and refuses every other name with 421 before any handler runs (a DNS rebinding page).
func TestHostFilter(t *testing.T) {
	h := New(Options{
		Ready: func() bool { return true },
		Rules: func() *rulestore.Set { return nil },
		Hosts: []string{"extauthz.extauthz.svc", "*.example.org"},
	})
	for _, tt := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:9002", http.StatusOK},
		{"[::1]:9002", http.StatusOK},
		{"10.1.2.3:9002", http.StatusOK},
		{"[fe80::1]", http.StatusOK},
		{"localhost:9002", http.StatusOK},
		{"LOCALHOST", http.StatusOK},
		{"console.localhost:9002", http.StatusOK},
		{"extauthz.extauthz.svc:9002", http.StatusOK},
		{"ExtAuthz.ExtAuthz.Svc.", http.StatusOK},
		{"a.example.org", http.StatusOK},
		{"a.b.example.org:1", http.StatusOK},
		{"", http.StatusOK},
		{"example.org", http.StatusMisdirectedRequest},
		{"evil.example:9002", http.StatusMisdirectedRequest},
		{"localhost.evil.example", http.StatusMisdirectedRequest},
		{"extauthz.extauthz.svc.evil.example", http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io:9002", http.StatusMisdirectedRequest},
		{"xexample.org", http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/rules", "/readyz"} {
			req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9002"+path, nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("GET %s, Host %q: %d (%q), want %d", path, tt.host, rec.Code, rec.Body.String(), tt.want)
			}
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("GET %s, Host %q: X-Content-Type-Options %q, want nosniff", path, tt.host, got)
			}
		}
	}
}
