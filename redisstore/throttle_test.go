package redisstore

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func waited(rem int64, reset, wait time.Duration) hotparam.RemoteResult {
	return hotparam.RemoteResult{Allowed: true, Remaining: rem, ResetAfter: reset, Wait: wait}
}

func TestThrottle(t *testing.T) {
	s, _, clk := newTestStore(t)
	th := func(id string, count int64, maxWait time.Duration) hotparam.RemoteOp {
		return hotparam.RemoteOp{RuleID: id, Value: "v", Behavior: hotparam.Throttle, Count: count,
			Duration: time.Second, MaxWait: maxWait}
	}
	tests := []struct {
		name  string
		op    hotparam.RemoteOp
		steps []step
	}{
		{
			name: "5 per second spaced 200ms, wait up to 500ms",
			op:   th("t1", 5, 500*ms),
			steps: []step{
				// slots left after each pass: those whose wait stays within 500ms
				{0, 1, false, waited(2, 200*ms, 0)},
				{0, 1, false, waited(1, 400*ms, 200*ms)},
				{0, 1, false, waited(0, 600*ms, 400*ms)},
				{0, 1, false, no(0, 600*ms, 100*ms)},            // a wait of 600ms is over 500ms
				{100 * ms, 1, false, waited(0, 700*ms, 500*ms)}, // a wait equal to max passes
				{2 * time.Second, 2, false, waited(1, 400*ms, 0)},
				{2 * time.Second, 1, false, waited(0, 600*ms, 400*ms)},
			},
		},
		{
			name: "3 per second: nanosecond spacing, no drift",
			op:   th("t2", 3, time.Second),
			steps: []step{
				{0, 1, false, waited(3, 333333334, 0)},
				{0, 1, false, waited(2, 666666667, 333333334)},
				{0, 1, false, waited(1, time.Second, 666666667)},
				{0, 1, false, waited(0, 1333333334, time.Second)},
				{0, 1, false, no(0, 1333333334, 333333334)},
			},
		},
		{
			name: "5000 per second spaced 200us",
			op:   th("t3", 5000, 0),
			steps: []step{
				{0, 1, false, waited(0, 200*time.Microsecond, 0)},
				{0, 1, false, no(0, 200*time.Microsecond, 200*time.Microsecond)},
				{200 * time.Microsecond, 1, false, waited(0, 200*time.Microsecond, 0)},
			},
		},
		{
			name:  "count 0 blocks all",
			op:    th("t4", 0, time.Second),
			steps: []step{{0, 1, false, no(0, 0, 1)}}, // the wait of a duration, less the max wait, at least 1ns: as locally
		},
		{
			name: "refund moves the schedule back, not before now",
			op:   func() hotparam.RemoteOp { o := th("t5", 5, time.Second); o.Refund, o.LeaseID = true, "L"; return o }(),
			steps: []step{
				{0, 3, false, waited(3, 600*ms, 0)},
				{0, 1, true, waited(4, 400*ms, 0)},
				{0, 9, true, waited(6, 0, 0)}, // the 2 hits left of the lease's 3
				{0, 1, false, waited(5, 200*ms, 0)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, s, clk, tt.op, tt.steps) })
	}
}

func TestThrottleCountChange(t *testing.T) {
	s, _, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "chg", Value: "v", Behavior: hotparam.Throttle, Count: 3,
		Duration: time.Second, MaxWait: time.Second, Hits: 1}
	clk.set(0)
	eval(t, s, op) // free at 333333 1/3 us, the third kept in units of 1/3
	op.Count = 4   // spacing 250ms; the stored third of a microsecond rounds down
	got := eval(t, s, op)[0]
	got.Turn = hotparam.Turn{} // where a turn ends: see unhold_test.go
	if want := waited(2, 583333*time.Microsecond, 333333*time.Microsecond); got != want {
		t.Errorf("after the count changed from 3 to 4: got %+v, want %+v", got, want)
	}
}
