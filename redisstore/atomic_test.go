package redisstore

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func qps(id, value string, count int64) hotparam.RemoteOp {
	return hotparam.RemoteOp{RuleID: id, Value: value, Count: count, Duration: time.Second, Hits: 1}
}

func conc(id, value string, count int64) hotparam.RemoteOp {
	return hotparam.RemoteOp{RuleID: id, Value: value, Grade: hotparam.Concurrency, Count: count,
		Lease: time.Minute, Hits: 1}
}

func allowed(res []hotparam.RemoteResult) []bool {
	a := make([]bool, len(res))
	for i, r := range res {
		a[i] = r.Allowed
	}
	return a
}

func TestAllOrNothing(t *testing.T) {
	shadow := func(o hotparam.RemoteOp) hotparam.RemoteOp { o.Shadow = true; return o }
	release := func(o hotparam.RemoteOp) hotparam.RemoteOp { o.Release = true; return o }
	tests := []struct {
		name string
		call []hotparam.RemoteOp // checked at t0
		want []bool              // per op of call
		// then each op of after is checked alone, at t0, and must get afterWant
		after     []hotparam.RemoteOp
		afterWant []hotparam.RemoteResult
	}{
		{
			name:      "a blocked op consumes nothing from the others",
			call:      []hotparam.RemoteOp{qps("a", "x", 2), qps("b", "y", 0), conc("c", "z", 1)},
			want:      []bool{true, false, true},
			after:     []hotparam.RemoteOp{qps("a", "x", 2), conc("c", "z", 1)},
			afterWant: []hotparam.RemoteResult{ok(1, 500*ms, 0, 0), ok(0, 0, 0, 0)},
		},
		{
			name:      "all pass: all consume",
			call:      []hotparam.RemoteOp{qps("a", "x", 2), conc("c", "z", 1)},
			want:      []bool{true, true},
			after:     []hotparam.RemoteOp{qps("a", "x", 2), conc("c", "z", 1)},
			afterWant: []hotparam.RemoteResult{ok(0, time.Second, 0, 0), no(0, 0, time.Minute)},
		},
		{
			name: "the same key twice needs both tokens",
			call: []hotparam.RemoteOp{qps("a", "x", 1), qps("a", "x", 1)},
			want: []bool{true, false},
			// nothing consumed: the one token is still there
			after:     []hotparam.RemoteOp{qps("a", "x", 1)},
			afterWant: []hotparam.RemoteResult{ok(0, time.Second, 0, 0)},
		},
		{
			name:      "a blocked shadow op blocks nothing, consumes nothing",
			call:      []hotparam.RemoteOp{qps("a", "x", 2), shadow(qps("s", "x", 0)), shadow(qps("t", "y", 3))},
			want:      []bool{true, false, true},
			after:     []hotparam.RemoteOp{qps("a", "x", 2), qps("t", "y", 3)},
			afterWant: []hotparam.RemoteResult{ok(0, time.Second, 0, 0), ok(1, 666666667, 0, 0)},
		},
		{
			name: "a release applies even when the call blocks",
			call: []hotparam.RemoteOp{conc("c", "z", 1), release(conc("c", "z", 1)), qps("b", "y", 0)},
			want: []bool{true, true, false},
			// the release freed the slot taken by the setup call below; the acquire took nothing
			after:     []hotparam.RemoteOp{conc("c", "z", 1)},
			afterWant: []hotparam.RemoteResult{ok(0, 0, 0, 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newTestStore(t)
			if tt.call[0].RuleID == "c" {
				eval(t, s, conc("c", "z", 1)) // one slot in use before the call
			}
			got := allowed(eval(t, s, tt.call...))
			for i := range tt.want {
				if got[i] != tt.want[i] {
					t.Errorf("call op %d allowed: got %v, want %v", i, got[i], tt.want[i])
				}
			}
			for i, op := range tt.after {
				if got := eval(t, s, op)[0]; got != tt.afterWant[i] {
					t.Errorf("after, op %d (%s): got %+v, want %+v", i, op.RuleID, got, tt.afterWant[i])
				}
			}
		})
	}
}

func TestEvalErrors(t *testing.T) {
	s, _, _ := newTestStore(t)
	ops := []hotparam.RemoteOp{qps("a", "x", 1)}
	if err := s.Eval(t.Context(), ops, nil); err == nil {
		t.Error("Eval with too few results: got nil error")
	}
	bad := []hotparam.RemoteOp{{RuleID: "a", Value: "x", Count: 1, Duration: 500 * time.Nanosecond}}
	if err := s.Eval(t.Context(), bad, make([]hotparam.RemoteResult, 1)); err == nil {
		t.Error("Eval with a sub-microsecond duration: got nil error")
	}
	if got := s.Stats().Calls; got != 0 {
		t.Errorf("invalid calls must not reach Redis: Calls got %d, want 0", got)
	}
}
