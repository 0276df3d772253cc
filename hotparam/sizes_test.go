package hotparam

import (
	"testing"
	"unsafe"
)

// TestSlotSize guards the per-value footprint the memory benchmark depends on, and the one
// cache line a decision on a tracked value reads: a slot of 64 bytes (its value inline up to
// shortKey bytes) and a link of 8.
func TestSlotSize(t *testing.T) {
	if got := unsafe.Sizeof(slot{}); got != 64 {
		t.Fatalf("slot is %d bytes, want 64", got)
	}
	if got := unsafe.Sizeof(link{}); got != 8 {
		t.Fatalf("link is %d bytes, want 8", got)
	}
}

// TestPageAligned checks that the runtime hands out a shard's pages of slots on a cache line's
// bound, so that no slot straddles two lines.
func TestPageAligned(t *testing.T) {
	s := newStore(1, 100*pageSize, nil)
	sh := &s.active()[0]
	for k := range 100 * pageSize {
		sh.alloc()
		if k%pageSize == 0 {
			p := sh.pages[len(sh.pages)-1]
			if at := uintptr(unsafe.Pointer(&p[0])); at%64 != 0 {
				t.Fatalf("page %d at %#x, not 64-byte aligned", len(sh.pages)-1, at)
			}
		}
	}
}

// TestRuleStateSize guards the per-rule footprint of an idle rule (bench/memory, rules): a
// compiled rule keeps only what a Check reads, in one 192-byte size class.
func TestRuleStateSize(t *testing.T) {
	if got := unsafe.Sizeof(ruleState{}); got > 192 {
		t.Fatalf("ruleState is %d bytes, want at most 192", got)
	}
}
