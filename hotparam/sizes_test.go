package hotparam

import (
	"testing"
	"unsafe"
)

// TestSlotSize guards the per-value footprint the memory benchmark depends on: 72 bytes and,
// since a value of up to shortKey bytes lives in the slot instead of a 16-byte allocation of
// its own, 16 more.
func TestSlotSize(t *testing.T) {
	if got := unsafe.Sizeof(slot{}); got > 88 {
		t.Fatalf("slot is %d bytes, want at most 88", got)
	}
}

// TestRuleStateSize guards the per-rule footprint of an idle rule (bench/memory, rules): a
// compiled rule keeps only what a Check reads, in one 192-byte size class.
func TestRuleStateSize(t *testing.T) {
	if got := unsafe.Sizeof(ruleState{}); got > 192 {
		t.Fatalf("ruleState is %d bytes, want at most 192", got)
	}
}
