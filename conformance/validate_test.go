package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// validateOutput runs the built binary's `extauthz validate` on file with env and returns what
// it printed; ok is whether it exited 0.
func validateOutput(t *testing.T, file string, env ...string) (out string, ok bool) {
	t.Helper()
	cmd := exec.Command(binary.Path(t), "validate", file)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatal(err)
	}
	return string(b), err == nil
}

// TestValidateGolangHotspot: `extauthz validate` loads a file of the shape of sentinel-golang's
// own hotspot test data, and says which fields each rule's mode ignores.
func TestValidateGolangHotspot(t *testing.T) {
	file := filepath.Join("..", "rulestore", "testdata", "golang", "hotspot.json")
	out, ok := validateOutput(t, file, "EXTAUTHZ_PARAM_NAMES=p0,p1,p2,p3")
	if !ok {
		t.Fatalf("validate refused the file:\n%s", out)
	}
	for _, want := range []string{
		`param_flow[0] (resource "GET:/catalog"): durationInSec, burstCount, maxQueueingTimeMs: ignored in this rule's mode, as sentinel-golang ignores it`,
		`param_flow[1] (resource "GET:/catalog"): controlBehavior 1 (Throttling), durationInSec, burstCount, maxQueueingTimeMs: ignored`,
		`param_flow[2] (resource "GET:/catalog"): maxQueueingTimeMs: ignored`,
		`param_flow[3] (resource "GET:/catalog"): burstCount: ignored`,
		`param_flow[0] -> param_flow: {resource: "GET:/catalog", param: "p0", grade: concurrency, count: 40,`,
		`param_flow[3] -> param_flow: {resource: "GET:/catalog", param: "p3", count: 70, duration: 4s, behavior: throttle, max_queueing_time: 11ms,`,
		"ok: 0 authority rules, 4 param_flow rules",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate printed:\n%s\nwant a line containing %q", out, want)
		}
	}
	// A QPS rule without durationInSec, and one with paramIndex 1 and a paramKey, are refused.
	bad := filepath.Join(t.TempDir(), "bad.json")
	doc := `[{"resource": "r", "metricType": 1, "paramIndex": 0, "threshold": 3},
		{"resource": "r", "metricType": 0, "paramIndex": 1, "paramKey": "user", "threshold": 3}]`
	if err := os.WriteFile(bad, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok = validateOutput(t, bad, "EXTAUTHZ_PARAM_NAMES=p0,p1")
	if ok {
		t.Fatalf("validate accepted the file:\n%s", out)
	}
	for _, want := range []string{
		"param_flow[0] (resource \"r\"): durationInSec: required on a QPS rule",
		"param_flow[1] (resource \"r\"): paramKey: given with paramIndex 1: sentinel-golang refuses a rule with both",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate printed:\n%s\nwant a line containing %q", out, want)
		}
	}
}
