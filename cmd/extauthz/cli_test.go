package main

// The command line through the built binary: every command, help, completion, a mistyped
// command. The version stamped at link time is checked with the image's build command
// (image_test.go).

import (
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// runBinary runs the binary with args and returns stdout, stderr and the exit code.
func runBinary(t *testing.T, path string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Dir = t.TempDir()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("run %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

func TestCLIVersion(t *testing.T) {
	out, errOut, code := runBinary(t, binary(t), "version")
	if code != 0 {
		t.Fatalf("version: exit %d\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("version printed %d lines, want 3:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "extauthz ") || len(lines[0]) <= len("extauthz ") {
		t.Errorf("first line %q, want extauthz and a version", lines[0])
	}
	if !strings.HasPrefix(lines[1], "commit: ") {
		t.Errorf("second line %q, want the commit", lines[1])
	}
	// The test binary and the built one come from the same toolchain.
	if got, want := lines[2], "go: "+runtime.Version(); got != want {
		t.Errorf("third line %q, want %q", got, want)
	}
}

func TestCLICompletion(t *testing.T) {
	path := binary(t)
	// Each script is the shell's own completion code for extauthz, naming its commands.
	for shell, marker := range map[string]string{
		"bash": "complete -o default -F __start_extauthz extauthz",
		"zsh":  "#compdef extauthz",
		"fish": "complete -c extauthz",
	} {
		t.Run(shell, func(t *testing.T) {
			out, errOut, code := runBinary(t, path, "completion", shell)
			if code != 0 {
				t.Fatalf("completion %s: exit %d\n%s", shell, code, errOut)
			}
			if !strings.Contains(out, marker) {
				t.Errorf("completion %s lacks %q:\n%.400s", shell, marker, out)
			}
		})
	}
	// The completion engine itself answers with the commands.
	out, _, code := runBinary(t, path, "__complete", "")
	if code != 0 {
		t.Fatalf("__complete: exit %d", code)
	}
	for _, c := range []string{"serve", "validate", "version", "completion"} {
		if !strings.Contains(out, c) {
			t.Errorf("completion candidates lack %s:\n%s", c, out)
		}
	}
}

func TestCLIHelp(t *testing.T) {
	path := binary(t)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"extauthz validate", "Available Commands:", "serve", "version", "completion"}},
		{[]string{"--help"}, []string{"Available Commands:"}},
		{[]string{"help", "validate"}, []string{"extauthz validate [--config FILE] RULES_FILE...", "--config"}},
		{[]string{"help", "serve"}, []string{"--rules", "--grpc-addr", "--admin-addr", "--log-level", "--log-format", "--config"}},
		{[]string{"serve", "--help"}, []string{"--rules"}},
		{[]string{"help", "version"}, []string{"Print the version"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, path, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// A command-line mistake exits 2 with the reason, the closest command when one is near, and
// the usage.
func TestCLIUsageMistakes(t *testing.T) {
	path := binary(t)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"serv"}, []string{`unknown command "serv"`, "Did you mean this?", "\tserve", "Available Commands:"}},
		{[]string{"valdate", "x.yaml"}, []string{`unknown command "valdate"`, "\tvalidate"}},
		{[]string{"verison"}, []string{"\tversion"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{[]string{"--colour"}, []string{"unknown flag: --colour", "--rules"}},
		{[]string{"--rule", "r.yaml"}, []string{`unknown flag: --rule (did you mean "--rules"?)`, "--rules"}},
		{[]string{"serve", "--grpc-adr", ":1"}, []string{`unknown flag: --grpc-adr (did you mean "--grpc-addr"?)`}},
		{[]string{"validate", "--confg", "c.yaml", "r.yaml"}, []string{`unknown flag: --confg (did you mean "--config"?)`}},
		{[]string{"--log-level=debug", "--LOG-FORMAT", "json"}, []string{`unknown flag: --LOG-FORMAT (did you mean "--log-format"?)`}},
		{[]string{"validate"}, []string{"validate needs at least one rules file", "--config"}},
		{[]string{"serve", "extra"}, []string{`unknown command "extra" for "extauthz serve"`}},
		{[]string{"version", "extra"}, []string{`unknown command "extra" for "extauthz version"`}},
		{[]string{"help", "serv"}, []string{`unknown command "serv" for "extauthz"`, "\tserve"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, path, tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
	// "frobnicate" is near no command, --colour near no flag: no suggestion.
	for _, args := range [][]string{{"frobnicate"}, {"--colour"}} {
		if _, errOut, _ := runBinary(t, path, args...); strings.Contains(strings.ToLower(errOut), "did you mean") {
			t.Errorf("a suggestion for %v:\n%s", args, errOut)
		}
	}
}
