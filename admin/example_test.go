package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/rulestore"
)

func Example() {
	ready := false
	h := admin.New(admin.Options{
		Ready: func() bool { return ready },
		Rules: func() *rulestore.Set { return &rulestore.Set{Version: 1, File: "rules.yaml"} },
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9002"+path, nil))
		fmt.Println(path, rec.Code)
	}
	ready = true
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9002/readyz", nil))
	fmt.Println("/readyz", rec.Code)
	// Output:
	// /healthz 200
	// /readyz 503
	// /readyz 200
}
