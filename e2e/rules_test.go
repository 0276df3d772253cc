package e2e

import (
	"os"
	"testing"
	"time"
)

// TestEmptyRulesFileKeepsRules: a rules file truncated to 0 bytes (a half-done write, a broken
// ConfigMap) is a failed load; the rules in force stay and /rules shows last_error.
func TestEmptyRulesFileKeepsRules(t *testing.T) {
	s := newService(t, readRules(t))
	if strangerAllowed(t, s) {
		t.Fatal("stranger allowed by the shipped white list")
	}
	v0 := s.rulesInfo(t).Version
	if err := os.WriteFile(s.rules, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return len(s.rulesInfo(t).LastError) > 0 && string(s.rulesInfo(t).LastError) != "null" }) {
		t.Fatalf("0-byte file not reported in /rules last_error within 5s\n%s", s.logs)
	}
	mustContain(t, "/rules last_error", string(s.rulesInfo(t).LastError), "empty")
	if v := s.rulesInfo(t).Version; v != v0 {
		t.Errorf("version after a 0-byte file = %d, want %d (unchanged)", v, v0)
	}
	if strangerAllowed(t, s) {
		t.Error("a 0-byte file removed the white list in force")
	}
}
