package main

import (
	"testing"
	"time"
)

// A process started to be ready on a line of its output stops, however its exit is waited for:
// stop must not wait a second time for what start's copy of its output already waits for.
func TestStopAProcessStartedWithReady(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		p, err := start(dir, "sh", func(line string) bool { return line == "ready" }, nil,
			"sh", "-c", "echo ready; exec sleep 60")
		if err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { p.stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second):
			t.Fatalf("stop %d did not return within 15s", i)
		}
	}
}
