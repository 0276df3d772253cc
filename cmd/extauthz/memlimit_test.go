package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The memory_limit setting becomes the runtime's soft limit, logged at start; a bad one is a
// config error naming the key.
func TestBinaryMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	p := startIn(t, dir, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	e := p.Entry("memory limit")
	if e == nil {
		t.Fatal("no memory limit logged at start")
	}
	if from, _ := e["from"].(string); from == "" {
		t.Errorf("memory limit logged without where it came from: %v", e)
	}

	cfg := writeFile(t, dir, "extauthz.yaml", "memory_limit: 256MiB\n")
	p = startIn(t, dir, "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	e = p.Entry("memory limit")
	if got, want := e["soft_limit_bytes"], float64(256<<20); got != want || e["from"] != "memory_limit" {
		t.Errorf("memory limit logged %v, want soft_limit_bytes %v from memory_limit", e, want)
	}

	cmd := exec.Command(binary(t), "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = []string{"EXTAUTHZ_MEMORY_LIMIT=1GB"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("started with memory_limit 1GB:\n%s", out)
	}
	if !strings.Contains(string(out), `memory_limit: "1GB" is not a memory size`) || !strings.Contains(string(out), "EXTAUTHZ_MEMORY_LIMIT") {
		t.Errorf("error does not name the key, the value and the variable:\n%s", out)
	}
}
