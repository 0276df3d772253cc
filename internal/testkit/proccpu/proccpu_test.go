package proccpu

import (
	"testing"
	"time"
)

// Work on this goroutine shows in Used: it grows by at least part of the time spun.
func TestUsedGrowsWithWork(t *testing.T) {
	before := Used(t)
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if d := Used(t) - before; d < 10*time.Millisecond {
		t.Errorf("Used grew by %v over 50ms of spinning, want at least 10ms", d)
	}
}
