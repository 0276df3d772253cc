package hotparam

import (
	"testing"
	"time"
)

// TestKindOf: each grade and behavior compiles to its kind, and kind's dispatch reaches that
// kind's own methods.
func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rule
		want kind
		impl kindMethods
	}{
		{"reject", Rule{Grade: QPS, Behavior: Reject}, kindReject, rejectKind{}},
		{"throttle", Rule{Grade: QPS, Behavior: Throttle}, kindThrottle, throttleKind{}},
		{"concurrency", Rule{Grade: Concurrency}, kindConcurrency, concurrencyKind{}},
	} {
		k, err := kindOf(&tc.r)
		if err != nil || k != tc.want {
			t.Errorf("%s: kindOf = %v, %v, want %v", tc.name, k, err, tc.want)
			continue
		}
		if got, want := k.reason(), tc.impl.reason(); got != want {
			t.Errorf("%s: reason %v, want %v", tc.name, got, want)
		}
		if got, want := k.inFlight(), tc.impl.inFlight(); got != want {
			t.Errorf("%s: inFlight %v, want %v", tc.name, got, want)
		}
		if got, want := k.holds(), tc.impl.holds(); got != want {
			t.Errorf("%s: holds %v, want %v", tc.name, got, want)
		}
		r := Rule{Duration: time.Minute}
		if got, want := k.statusDuration(&r), tc.impl.statusDuration(&r); got != want {
			t.Errorf("%s: statusDuration %v, want %v", tc.name, got, want)
		}
	}
	for _, r := range []Rule{{Grade: 7}, {Grade: QPS, Behavior: 7}} {
		if _, err := kindOf(&r); err == nil {
			t.Errorf("kindOf(grade %d, behavior %d): no error", r.Grade, r.Behavior)
		}
	}
}
