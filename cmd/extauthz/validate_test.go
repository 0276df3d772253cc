package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func runValidate(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"validate"}, args...), env(nil), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestValidateGood(t *testing.T) {
	out, _, err := runValidate(t, "testdata/good.yaml")
	if err != nil {
		t.Fatalf("validate good.yaml: %v\n%s", err, out)
	}
	if want := "testdata/good.yaml: ok: 1 authority rules, 2 param_flow rules\n"; !strings.HasSuffix(out, want) {
		t.Errorf("output %q, want it to end with %q", out, want)
	}
	// A concurrency rule loads with a warning that Check does not apply it.
	if !strings.Contains(out, "warning: ") {
		t.Errorf("no warning for the concurrency rule in %q", out)
	}
}

func TestValidateBroken(t *testing.T) {
	out, _, err := runValidate(t, "testdata/good.yaml", "testdata/broken.yaml")
	if err == nil {
		t.Fatalf("validate broken.yaml succeeded:\n%s", out)
	}
	if errors.Is(err, errUsage) {
		t.Errorf("a broken file is reported as a usage error: %v", err)
	}
	if !strings.Contains(out, "testdata/good.yaml: ok") {
		t.Errorf("the good file is not reported ok:\n%s", out)
	}
	// Every problem is printed, one a line, addressed by file, line and column, rule and field.
	wantLines := []string{
		`testdata/broken.yaml:3:5: authority[0] (resource "GET:/hello"): strategy: `,
		`testdata/broken.yaml:9:5: param_flow[0] (resource "POST:/order"): count: `,
		`testdata/broken.yaml:12:5: param_flow[1] (resource "POST:/order"): param: `,
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, w := range wantLines {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, w) {
				found = true
			}
		}
		if !found {
			t.Errorf("no line starting %q in:\n%s", w, out)
		}
	}
	for _, field := range []string{"strategy", "count", "param"} {
		if !strings.Contains(out, field+": ") {
			t.Errorf("field %q not named in:\n%s", field, out)
		}
	}
	if got, want := err.Error(), "3 problem(s) found"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestValidateMissingFile(t *testing.T) {
	out, _, err := runValidate(t, "testdata/nope.yaml")
	if err == nil {
		t.Fatal("validate of a missing file succeeded")
	}
	if !strings.HasPrefix(out, "testdata/nope.yaml") {
		t.Errorf("output %q does not name the file", out)
	}
}

func TestValidateSentinelParamNames(t *testing.T) {
	// Without param_names, paramIdx 0 cannot be resolved.
	if out, _, err := runValidate(t, "testdata/sentinel.json"); err == nil {
		t.Errorf("sentinel.json validated without param_names:\n%s", out)
	}
	out, _, err := runValidate(t, "--config", "testdata/mapping.yaml", "testdata/sentinel.json")
	if err != nil {
		t.Fatalf("validate with param_names: %v\n%s", err, out)
	}
	// A warning that Check calls never carry item_id (mapping.yaml maps no params), one line per
	// rule saying what it maps to, then the summary.
	want := `warning: testdata/sentinel.json: no authz.params source produces the params "item_id" (param_flow[0]): Check calls never carry them, only rate-limit descriptors with these keys do` + "\n" +
		`testdata/sentinel.json:2:3: param_flow[0] -> param_flow: {resource: "POST:/order", param: "item_id", count: 5, duration: 1s, items: [{value: "4343433", count: 1000}]}` + "\n" +
		"testdata/sentinel.json: ok: 0 authority rules, 1 param_flow rules\n"
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

func TestValidateBadConfig(t *testing.T) {
	file := writeFile(t, t.TempDir(), "c.yaml",
		"log: {level: loud}\nauthz: {origin: [{from: telepathy}]}\nshutdown_grace: 15\ngrpc_adr: x\n")
	out, _, err := runValidate(t, "--config", file, "testdata/good.yaml")
	if err == nil {
		t.Fatalf("bad config validated:\n%s", out)
	}
	// Every problem at once, each once, with where it came from; the rules are still checked.
	for _, want := range []string{
		`config: grpc_adr: unknown key (did you mean "grpc_addr"?) (from ` + file + ")",
		"config: shutdown_grace: 15 has no unit: write a duration with its unit, like 15s or 15ms (from " + file + ")",
		`config: log.level: must be debug, info, warn or error, not "loud" (from ` + file + ")",
		"testdata/good.yaml: ok: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "telepathy"); n != 1 {
		t.Errorf("the bad origin source is reported %d times, want once:\n%s", n, out)
	}
	if got, want := err.Error(), "4 problem(s) found"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"validate without files", []string{"validate"}},
		{"unknown command", []string{"frobnicate"}},
		{"unknown flag", []string{"serve", "--colour"}},
		{"serve with arguments", []string{"serve", "extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, env(nil), &stdout, &stderr)
			if !errors.Is(err, errUsage) {
				t.Errorf("run(%q) = %v, want a usage error", tt.args, err)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"help"}, env(nil), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "extauthz validate") {
		t.Errorf("help does not list validate:\n%s", stdout.String())
	}
}
