package policy

import "testing"

// Each outcome has one metric label and one audit result; only the outcomes that let the
// request through allow, only a rule's refusals block.
func TestOutcomeNames(t *testing.T) {
	tests := []struct {
		o             Outcome
		label, audit  string
		allows, block bool
	}{
		{Allowed, "ok", "allowed", true, false},
		{Throttled, "ok", "throttled", true, false},
		{Shadow, "shadow", "allowed", true, false},
		{ShadowThrottled, "shadow", "throttled", true, false},
		{DryRun, "dry_run", "dry_run", true, false},
		{Invalid, "invalid", "invalid", false, false},
		{Authority, "authority", "blocked", false, true},
		{ParamFlow, "param_flow", "blocked", false, true},
		{QueueFull, "queue_full", "blocked", false, true},
		{ShuttingDown, "shutting_down", "blocked", false, true},
		{Cancelled, "cancelled", "cancelled", false, false},
		{outcomes, "", "", false, false},
	}
	if len(tests) != int(outcomes)+1 {
		t.Fatalf("%d outcomes tested, want all %d", len(tests)-1, outcomes)
	}
	for _, tt := range tests {
		if got := tt.o.Label(); got != tt.label {
			t.Errorf("Outcome(%d).Label() = %q, want %q", tt.o, got, tt.label)
		}
		if got := tt.o.AuditResult(); got != tt.audit {
			t.Errorf("Outcome(%d).AuditResult() = %q, want %q", tt.o, got, tt.audit)
		}
		if got := tt.o.Allows(); got != tt.allows {
			t.Errorf("Outcome(%d).Allows() = %v, want %v", tt.o, got, tt.allows)
		}
		if got := tt.o.Blocks(); got != tt.block {
			t.Errorf("Outcome(%d).Blocks() = %v, want %v", tt.o, got, tt.block)
		}
	}
}
