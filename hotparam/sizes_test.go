package hotparam

import (
	"testing"
	"unsafe"
)

// TestSlotSize guards the per-value footprint the memory benchmark depends on.
func TestSlotSize(t *testing.T) {
	if got := unsafe.Sizeof(slot{}); got > 72 {
		t.Fatalf("slot is %d bytes, want at most 72", got)
	}
}
