package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// gogcPercent is the go_gc_gogc_percent p's /metrics reports.
func gogcPercent(t *testing.T, p *proc) string {
	t.Helper()
	_, body := p.Get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
			return v
		}
	}
	t.Fatalf("no go_gc_gogc_percent in /metrics")
	return ""
}

// The memory_limit setting becomes the runtime's soft limit, logged at start with the
// collector's target; a bad one is a config error naming the key.
func TestBinaryMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	p := startIn(t, dir, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	e := p.Entry("memory limit")
	if e == nil {
		t.Fatal("no memory limit logged at start")
	}
	from, _ := e["from"].(string)
	if from == "" {
		t.Errorf("memory limit logged without where it came from: %v", e)
	}
	// Without a limit (the machine's cgroup has none) the collector's target still follows
	// the live heap, never below Go's default: 32MiB of garbage, at most 4x the few MiB a
	// service without rules holds, so GOGC 400. In a container, a 32nd of its limit.
	if from == "none" {
		if got, want := e["gc_allowance_bytes"], float64(32<<20); got != want {
			t.Errorf("no limit: memory limit logged %v, want gc_allowance_bytes %v", e, want)
		}
		if got := gogcPercent(t, p); got != "400" {
			t.Errorf("go_gc_gogc_percent = %q without a limit, want 400", got)
		}
	} else if soft, _ := e["soft_limit_bytes"].(float64); e["gc_allowance_bytes"] != float64(int64(soft/32)) {
		t.Errorf("limit from %s: memory limit logged %v, want gc_allowance_bytes a 32nd of soft_limit_bytes", from, e)
	}
	// off: Go's defaults, no limit and GOGC 100.
	off := writeFile(t, dir, "off.yaml", "memory_limit: \"off\"\n")
	p = startIn(t, dir, "--config", off, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	if e := p.Entry("memory limit"); e["from"] != "off" || e["gc_allowance_bytes"] != nil {
		t.Errorf("memory_limit off: memory limit logged %v, want from off and no gc_allowance_bytes", e)
	}
	if got := gogcPercent(t, p); got != "100" {
		t.Errorf("go_gc_gogc_percent = %q with memory_limit off, want Go's default 100", got)
	}

	cfg := writeFile(t, dir, "extauthz.yaml", "memory_limit: 256MiB\n")
	p = startIn(t, dir, "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	e = p.Entry("memory limit")
	if got, want := e["soft_limit_bytes"], float64(256<<20); got != want || e["from"] != "memory_limit" {
		t.Errorf("memory limit logged %v, want soft_limit_bytes %v from memory_limit", e, want)
	}
	// Under a limit the collector's target follows the live heap: a 32nd of the limit of
	// garbage, at most 4x the few MiB a service without rules holds, so under 1GiB GOGC 400.
	if got, want := e["gc_allowance_bytes"], float64(8<<20); got != want {
		t.Errorf("memory limit logged %v, want gc_allowance_bytes %v", e, want)
	}
	cfg = writeFile(t, dir, "extauthz.yaml", "memory_limit: 1GiB\n")
	p = startIn(t, dir, "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	if got := gogcPercent(t, p); got != "400" {
		t.Errorf("go_gc_gogc_percent = %q under a 1GiB limit, want 400", got)
	}
	// GOGC set by the operator stays in force.
	p = testbin.Start(t, testbin.Options{Binary: binary(t), Dir: dir, Env: []string{"GOGC=150"},
		Args: []string{"--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	if e := p.Entry("memory limit"); e["gc_allowance_bytes"] != nil {
		t.Errorf("memory limit logged %v with GOGC set, want no gc_allowance_bytes", e)
	}
	if got := gogcPercent(t, p); got != "150" {
		t.Errorf("go_gc_gogc_percent = %q with GOGC=150, want 150", got)
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

// The start-up line names the processors Go runs on: GOMAXPROCS when set, else the
// container's CPU limit or the machine's cores.
func TestBinaryLogsItsProcessors(t *testing.T) {
	p := testbin.Start(t, testbin.Options{Binary: binary(t), Dir: t.TempDir(), Env: []string{"GOMAXPROCS=1"},
		Args: []string{"--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	if e := p.Entry("starting extauthz"); e == nil || e["gomaxprocs"] != float64(1) {
		t.Errorf("with GOMAXPROCS=1 the start-up line is %v, want gomaxprocs 1", e)
	}
}
