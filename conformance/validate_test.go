package conformance

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
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

// TestValidateLiteralAuthority: `extauthz validate` prints an imported authority rule in a
// native form that means the same: literal: true, so that an entry written like a range stays
// a name. The printed form, written into a native file, loads and validates, and the service
// serving it decides every origin as Sentinel's own code decides the imported rule.
func TestValidateLiteralAuthority(t *testing.T) {
	dir := t.TempDir()
	imported := filepath.Join(dir, "sentinel.json")
	doc := `{"authorityRules": [{"resource": "r", "limitApp": "10.0.0.0/8,appA, appB,10.9.9.9", "strategy": 0}]}`
	if err := os.WriteFile(imported, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok := validateOutput(t, imported)
	if !ok {
		t.Fatalf("validate refused the file:\n%s", out)
	}
	const arrow = "authority[0] -> authority: "
	var native string
	for _, line := range strings.Split(out, "\n") {
		if _, form, found := strings.Cut(line, arrow); found {
			native = form
		}
	}
	if want := `{resource: "r", strategy: white, origins: ["10.0.0.0/8", "appA", " appB", "10.9.9.9"], literal: true}`; native != want {
		t.Fatalf("validate printed %q\nwant %q\n%s", native, want, out)
	}
	nativeFile := filepath.Join(dir, "native.yaml")
	if err := os.WriteFile(nativeFile, []byte("authority:\n  - "+native+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := validateOutput(t, nativeFile); !ok || !strings.Contains(out, arrow+native) {
		t.Fatalf("validate of the printed form:\n%s\nwant it to load and print %s", out, native)
	}
	// Both files decided alike, as Sentinel decides the imported one.
	c := Case{Name: "literal", AuthorityRules: json.RawMessage(`[{"resource": "r", "limitApp": "10.0.0.0/8,appA, appB,10.9.9.9", "strategy": 0}]`)}
	for _, o := range []string{"10.0.0.0/8", "10.9.9.9", "10.1.2.3", "appA", " appB", "appB"} {
		c.Trace = append(c.Trace, Request{Resource: "r", Origin: o})
	}
	res, err := sentinel.Run([]Case{c}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{imported, nativeFile} {
		got := serveDecisions(t, file, c)
		for i, r := range c.Trace {
			if s := res[c.Name].Decisions[i].Allow; got[i] != s {
				t.Errorf("%s: origin %q: extauthz allows %v, Sentinel %v", filepath.Base(file), r.Origin, got[i], s)
			}
		}
	}
}

// serveDecisions serves file with the built binary and asks the rate-limit API for each
// request of c, one descriptor each, returning whether each was allowed.
func serveDecisions(t *testing.T, file string, c Case) []bool {
	t.Helper()
	p := testbin.Start(t, testbin.Options{
		Binary: binary.Path(t),
		Args:   []string{"serve", "--rules", file, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
	})
	defer p.Kill()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	var out []bool
	for i, r := range c.Trace {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := rls.ShouldRateLimit(ctx, rateLimitRequest(c, r))
		cancel()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		out = append(out, resp.GetOverallCode() == rlsv3.RateLimitResponse_OK)
	}
	return out
}
