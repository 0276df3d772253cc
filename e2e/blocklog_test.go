package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// logEntries are the entries of p's log so far with message msg that keep accepts.
func logEntries(p *testbin.Proc, msg string, keep func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.LogText(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["msg"] != msg {
			continue
		}
		if keep == nil || keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitEntries waits up to 5s for p to log at least n entries that logEntries(p, msg, keep)
// returns, and returns them: a process's log reaches the test through a pipe, after the answer.
func waitEntries(p *testbin.Proc, n int, msg string, keep func(map[string]any) bool) []map[string]any {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := logEntries(p, msg, keep)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneLinePerBlock: each refused request is logged once, by the decision log (unsampled),
// not also by a second, sampled "blocked" line.
func TestOneLinePerBlock(t *testing.T) {
	p, _, authz := startRulesWithEnv(t, `
authority:
  - {resource: "GET:/items", strategy: white, origins: [web]}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 15 // past the 10 a second a sampled logger lets through
	for range n {
		r := req("GET", "/items?item_id=1", "192.0.2.9", "x-origin", "stranger")
		cr := checkRequest(t, r)
		resp, err := authz.Check(ctx, cr)
		if err != nil {
			t.Fatal(err)
		}
		if got := checkCode(t, resp); got != 403 {
			t.Fatalf("stranger on a white list: %d, want 403", got)
		}
	}
	// The decision log line is written after the answer: wait for the last one.
	isBlock := func(e map[string]any) bool {
		return e["result"] == "blocked" && e["reason"] == "authority" && e["resource"] == "GET:/items"
	}
	if got := len(waitEntries(p, n, "decision", isBlock)); got != n {
		t.Errorf("%d decision lines for %d blocks, want one each", got, n)
	}
	if got := logEntries(p, "blocked", nil); len(got) != 0 {
		t.Errorf("%d \"blocked\" lines besides the decision log, want none: %v", len(got), got[0])
	}
}
