package policy

import (
	"testing"
	"time"
)

// TestWakeupsNeverEarly: a channel for a wait of w is closed no sooner than w after it was
// asked for, whatever the wait's place in its interval.
func TestWakeupsNeverEarly(t *testing.T) {
	var k wakeups
	for _, w := range []time.Duration{time.Nanosecond, 300 * time.Microsecond, HoldResolution,
		HoldResolution + 1, 2500 * time.Microsecond, 20 * time.Millisecond} {
		began := time.Now()
		ch, _ := k.at(w)
		<-ch
		if took := time.Since(began); took < w {
			t.Errorf("wait of %v: woken after %v", w, took)
		}
	}
}

// TestWakeupsBatchByInterval: calls whose turns fall in the same interval share one channel,
// closed at the interval's end; a turn in the next interval gets the next one; a fired
// interval is forgotten.
func TestWakeupsBatchByInterval(t *testing.T) {
	now := 200 * time.Microsecond
	k := wakeups{since: func(time.Time) time.Duration { return now }}
	a, _ := k.at(500 * time.Microsecond) // turn at 0.7ms: the interval ending at 1ms
	now = 300 * time.Microsecond
	b, _ := k.at(700 * time.Microsecond) // turn at exactly 1ms: the same
	c, _ := k.at(701 * time.Microsecond) // turn just after 1ms: the next
	if a != b {
		t.Error("turns at 0.7ms and 1ms got different channels, want one")
	}
	if a == c {
		t.Error("a turn after 1ms shares the channel of the interval ending at 1ms")
	}
	<-a
	<-c
	k.mu.Lock()
	left := len(k.batches)
	k.mu.Unlock()
	if left != 0 {
		t.Errorf("%d intervals kept after they fired, want 0", left)
	}
}
