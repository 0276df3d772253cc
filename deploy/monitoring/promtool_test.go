package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// tool returns the path of a Prometheus command, skipping under -short and failing loudly
// when it is missing otherwise.
func tool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; skipped under -short", name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (Debian's prometheus package brings it; scripts/test installs it): %v", name, err)
	}
	return p
}

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	out := promtool(t, "check", "rules", "alerts.yaml")
	want := fmt.Sprintf("SUCCESS: %d rules found", bytes.Count(Alerts, []byte("- alert: ")))
	if !strings.Contains(out, want) {
		t.Errorf("promtool check rules: want %q, got\n%s", want, out)
	}
}

// TestPromtoolTestRules runs alerts_test.yaml: each alert fires on the series it is about, not
// before its for duration, and clears when the problem ends.
func TestPromtoolTestRules(t *testing.T) {
	out := promtool(t, "test", "rules", "alerts_test.yaml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
	// Every alert of alerts.yaml has a unit test.
	raw, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := string(raw)
	for _, q := range alertQueries(t) {
		name := strings.TrimPrefix(q.where, "alert ")
		if !strings.Contains(tests, "alertname: "+name+"\n") {
			t.Errorf("alerts_test.yaml has no test of %s", name)
		}
	}
}
