package main

import (
	"net/http"
	"strings"
	"testing"
)

// Go's profiles are on the admin listener only with admin.pprof: true.
func TestBinaryPProf(t *testing.T) {
	args := []string{"--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	off := start(t, args...)
	if code, _ := off.Get(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ by default = %d, want 404", code)
	}

	dir := t.TempDir()
	on := startIn(t, dir, append(args, "--config", writeFile(t, dir, "c.yaml", "admin: {pprof: true}\n"))...)
	code, body := on.Get(t, "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("GET /debug/pprof/ with admin.pprof = %d, want 200 listing the heap profile:\n%.300s", code, body)
	}
	if code, _ := on.Get(t, "/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap = %d, want 200", code)
	}
	if got := on.Entry("starting extauthz")["pprof"]; got != true {
		t.Errorf("settings logged pprof = %v, want true", got)
	}
}
