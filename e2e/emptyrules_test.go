package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEmptyRulesThenBackKeepsState: the rules file rewritten to an explicit empty set (what a
// dashboard's "delete all" or a half-done publish writes) is applied, with a warning, and the
// file put back a moment later finds the item it had depleted still depleted: no fresh bucket.
func TestEmptyRulesThenBackKeepsState(t *testing.T) {
	s := newService(t, []byte(floodRules))
	item := limitRequest(t, itemReq("depleted"), false)
	for i := range 3 {
		if got := s.limit(t, item).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d of 3: %v, want OK", i+1, got)
		}
	}
	if got := s.limit(t, item).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th request: %v, want OVER_LIMIT", got)
	}
	rewrite := func(content string, version uint64) {
		t.Helper()
		tmp := s.rules + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, s.rules); err != nil {
			t.Fatal(err)
		}
		if !eventually(20*time.Second, func() bool { return s.rulesInfo(t).Version == version }) {
			t.Fatalf("rules version %d not applied within 20s: %+v\n%s", version, s.rulesInfo(t), s.logs)
		}
	}
	rewrite("authority: []\nparam_flow: []\n", 2)
	if got := s.limit(t, item).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with no rule in force: %v, want OK", got)
	}
	if !eventually(5*time.Second, func() bool { return strings.Contains(s.logs.String(), "the rules source holds no rule") }) {
		t.Fatalf("no warning logged for the empty rule set:\n%s", s.logs)
	}
	if line := warnLine(s.logs.String(), "the rules source holds no rule"); !strings.Contains(line, `"level":"warn"`) {
		t.Errorf("the empty rule set is logged as %s, want a warning", line)
	}
	rewrite(floodRules, 3)
	if got := s.limit(t, item).GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the depleted item after its rule came back: %v, want OVER_LIMIT (no fresh bucket)", got)
	}
	if got := s.limit(t, limitRequest(t, itemReq("fresh"), false)).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a new item after the rule came back: %v, want OK", got)
	}
}

// warnLine is the first log line that contains text, "" when none.
func warnLine(logs, text string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, text) {
			return line
		}
	}
	return ""
}
