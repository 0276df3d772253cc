package main

// EXTAUTHZ_* variables through the built binary: a misspelt one is a start-up error with the
// closest name, as an unknown file key is; Kubernetes' service links pass; another name the
// service does not read is warned of.

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// runWithEnv runs the binary with args and only environ (besides PATH), and returns its
// combined output and exit code.
func runWithEnv(t *testing.T, environ []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, environ...)
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestBinaryUnknownEnv(t *testing.T) {
	addrs := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--rules", ""}
	tests := []struct {
		name, variable, want string
	}{
		{"dry run misspelt", "EXTAUTHZ_DECISION_DRYRUN=true",
			`EXTAUTHZ_DECISION_DRYRUN: unknown variable (did you mean "EXTAUTHZ_DECISION_DRY_RUN"?) (from environment)`},
		{"sensitive params misspelt", "EXTAUTHZ_SENSITIVE_PARAM=card",
			`EXTAUTHZ_SENSITIVE_PARAM: unknown variable (did you mean "EXTAUTHZ_SENSITIVE_PARAMS"?) (from environment)`},
		{"under a section", "EXTAUTHZ_STORE_REDIS_SENTINEL=x", "unknown variable (variables of store.redis: EXTAUTHZ_STORE_REDIS_ADDRS,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runWithEnv(t, []string{tt.variable}, addrs...)
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Errorf("serve with %s: exit %d\n%s\nwant exit 1 and %q", tt.variable, code, out, tt.want)
			}
			// validate refuses what serve refuses.
			rules := writeFile(t, t.TempDir(), "rules.yaml", "authority: []\n")
			out, code = runWithEnv(t, []string{tt.variable}, "validate", rules)
			if code != 1 || !strings.Contains(out, "config: "+strings.SplitN(tt.variable, "=", 2)[0]) {
				t.Errorf("validate with %s: exit %d\n%s\nwant exit 1 and the variable", tt.variable, code, out)
			}
		})
	}
}

// A pod's service links for a Service named extauthz do not stop the start, nor are they
// warned of; a variable of another tool under the prefix is warned of by name.
func TestBinaryServiceLinksAndOtherVariables(t *testing.T) {
	p := testbin.Start(t, testbin.Options{Binary: binary(t),
		Args: []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--rules", ""},
		Env: []string{
			"EXTAUTHZ_SERVICE_HOST=10.96.0.10", "EXTAUTHZ_SERVICE_PORT=9001", "EXTAUTHZ_SERVICE_PORT_GRPC=9001",
			"EXTAUTHZ_PORT=tcp://10.96.0.10:9001", "EXTAUTHZ_PORT_9001_TCP=tcp://10.96.0.10:9001",
			"EXTAUTHZ_PORT_9001_TCP_PROTO=tcp", "EXTAUTHZ_PORT_9001_TCP_PORT=9001", "EXTAUTHZ_PORT_9001_TCP_ADDR=10.96.0.10",
			"EXTAUTHZ_IMAGE_TAG=v1",
		}})
	e := p.Entry("environment variables named EXTAUTHZ_* that no setting has are ignored")
	if e == nil {
		t.Fatal("no warning of the variable the service does not read")
	}
	if got, _ := e["variables"].([]any); len(got) != 1 || got[0] != "EXTAUTHZ_IMAGE_TAG" {
		t.Errorf("warned of %v, want only EXTAUTHZ_IMAGE_TAG", e["variables"])
	}
}
