package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

func readRules(t *testing.T) []byte {
	t.Helper()
	rules, err := os.ReadFile(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// replaceFile swaps the file at path for data the way editors and config maps do: write aside,
// rename over.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".rules.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func strangerAllowed(t *testing.T, s *service) bool {
	return checkCode(t, s.check(t, req("GET", "/items?item_id=reload", "192.0.2.7", "x-origin", "stranger"))) == 200
}

// TestHotReload edits the rules file of a running service: the change applies; a broken file
// is rejected, reported, and the rules in force stay.
func TestHotReload(t *testing.T) {
	rules := readRules(t)
	s := newService(t, rules)
	if strangerAllowed(t, s) {
		t.Fatal("stranger allowed before the change")
	}
	v0 := s.rulesInfo(t).Version

	// 1. Rewrite in place: stranger joins the white list of GET:/items.
	opened := bytes.Replace(rules, []byte("origins: [web, mobile]"), []byte("origins: [web, mobile, stranger]"), 1)
	if bytes.Equal(opened, rules) {
		t.Fatal("rules.yaml has no `origins: [web, mobile]` to edit")
	}
	if err := os.WriteFile(s.rules, opened, 0o644); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return strangerAllowed(t, s) }) {
		t.Fatalf("in-place edit not applied within 5s\n%s", s.logs)
	}
	v1 := s.rulesInfo(t).Version
	if v1 <= v0 {
		t.Errorf("version after reload = %d, want more than %d", v1, v0)
	}

	// 2. A broken file: the service keeps the rules in force and reports the error.
	broken := bytes.Replace(opened, []byte("grade: qps"), []byte("grade: fast"), 1)
	replaceFile(t, s.rules, broken)
	if !eventually(5*time.Second, func() bool { return string(s.rulesInfo(t).LastError) != "null" && len(s.rulesInfo(t).LastError) > 0 }) {
		t.Fatalf("broken file not reported in /rules last_error within 5s\n%s", s.logs)
	}
	if info := s.rulesInfo(t); info.Version != v1 {
		t.Errorf("version after a broken file = %d, want %d (unchanged)", info.Version, v1)
	}
	mustContain(t, "/rules last_error", string(s.rulesInfo(t).LastError), "grade")
	if !strangerAllowed(t, s) {
		t.Error("a broken file changed the rules in force")
	}

	// 3. Replaced by rename with a good file: applied.
	replaceFile(t, s.rules, rules)
	if !eventually(5*time.Second, func() bool { return !strangerAllowed(t, s) }) {
		t.Fatalf("renamed-in file not applied within 5s\n%s", s.logs)
	}
	if info := s.rulesInfo(t); info.Version <= v1 {
		t.Errorf("version after the good file = %d, want more than %d", info.Version, v1)
	}
}

// TestSIGTERMWithCallsInFlight: throttled calls held by the service when SIGTERM arrives are
// all answered; then the process exits cleanly.
func TestSIGTERMWithCallsInFlight(t *testing.T) {
	s := newService(t, readRules(t))
	rr := limitRequest(t, req("POST", "/orders", "192.0.2.8", "x-origin", "web", "x-user-id", "term-1"), false)
	const n = 5 // held 0, 100, ..., 400ms
	errs := make([]error, n)
	codes := make([]rlsv3.RateLimitResponse_Code, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.limitErr(rr)
			errs[i], codes[i] = err, resp.GetOverallCode()
		}()
	}
	// the first call passes at once, the others are held
	if !eventually(5*time.Second, func() bool { return metricValue(t, s.proc, "extauthz_queue_waiting ") == n-1 }) {
		t.Fatalf("extauthz_queue_waiting = %v within 5s, want %d held", metricValue(t, s.proc, "extauthz_queue_waiting "), n-1)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d in flight at SIGTERM failed: %v (code %v)", i, err, status.Code(err))
		} else if codes[i] != rlsv3.RateLimitResponse_OK {
			t.Errorf("call %d in flight at SIGTERM = %v, want OK", i, codes[i])
		}
	}
	select {
	case <-s.exited:
		if s.exitErr != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", s.exitErr, s.logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM\n%s", s.logs)
	}
	if _, err := s.limitErr(rr); err == nil {
		t.Error("a call after shutdown succeeded")
	}
}

// TestValidateCommand: `extauthz validate` accepts the shipped rules with the shipped config and
// rejects a broken copy, naming the file and the field.
func TestValidateCommand(t *testing.T) {
	out, err := exec.Command(binary, "validate", "--config", extauthzYAML, rulesYAML).CombinedOutput()
	if err != nil {
		t.Fatalf("validate %s: %v\n%s", rulesYAML, err, out)
	}
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, bytes.Replace(readRules(t), []byte("behavior: throttle"), []byte("behavior: thottle"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(binary, "validate", "--config", extauthzYAML, broken).CombinedOutput()
	if err == nil {
		t.Fatalf("validate of a broken file exited 0\n%s", out)
	}
	mustContain(t, "validate output", string(out), "broken.yaml", "behavior")
}
