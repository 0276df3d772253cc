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
