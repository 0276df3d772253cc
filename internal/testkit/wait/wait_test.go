package wait

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsWhenTheConditionHolds(t *testing.T) {
	calls := 0
	err := Until(time.Minute, time.Millisecond, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestUntilStopsAtOnceOnStop(t *testing.T) {
	exited := errors.New("exited at start")
	calls := 0
	err := Until(time.Minute, time.Millisecond, func() error { calls++; return Stop(exited) })
	if !errors.Is(err, exited) || calls != 1 {
		t.Fatalf("Until = %v after %d calls, want %v after 1", err, calls, exited)
	}
}

func TestUntilGivesUpWithTheLastError(t *testing.T) {
	err := Until(5*time.Millisecond, time.Millisecond, func() error { return errors.New("still down") })
	if err == nil || !strings.Contains(err.Error(), "still down") || !strings.Contains(err.Error(), "5ms") {
		t.Fatalf("Until = %v, want the limit and the last error", err)
	}
}
