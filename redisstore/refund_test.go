package redisstore

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// refundStep is one call of a refund rule's op with a lease id at an instant.
type refundStep struct {
	at    time.Duration
	hits  int64
	rel   bool
	lease string
	want  bool  // allowed (releases always are)
	rem   int64 // remaining after the call
}

// A refund gives back at most what the acquisition of the same lease consumed: nothing for a
// refused request, nothing without a lease id, never twice, nothing once the lease is over.
func TestRefundOnlyWhatTheLeaseConsumed(t *testing.T) {
	s, _, clk := newTestStore(t)
	bucket := hotparam.RemoteOp{RuleID: "rf", Value: "v", Count: 3, Duration: time.Hour, Refund: true,
		Lease: 10 * time.Second}
	throttle := hotparam.RemoteOp{RuleID: "rt", Value: "v", Behavior: hotparam.Throttle, Count: 1,
		Duration: time.Hour, MaxWait: 0, Refund: true, Lease: 10 * time.Second}
	tests := []struct {
		name  string
		op    hotparam.RemoteOp
		steps []refundStep
	}{
		{"a refused request gets nothing back", bucket, []refundStep{
			{0, 3, false, "a", true, 0},
			// 20 over-limit requests, each followed by its release: none admitted
			{0, 1, false, "b", false, 0}, {0, 1, true, "b", true, 0},
			{0, 1, false, "c", false, 0}, {0, 1, true, "c", true, 0},
			{0, 1, false, "d", false, 0}, {0, 1, true, "d", true, 0},
		}},
		{"no lease id, nothing back", bucket, []refundStep{
			{0, 3, false, "", true, 0},
			{0, 3, true, "", true, 0},
			{0, 1, false, "", false, 0},
		}},
		{"at most what was consumed, never twice", bucket, []refundStep{
			{0, 2, false, "a", true, 1},
			{0, 5, true, "a", true, 3}, // 2 back, not 5
			{0, 2, false, "b", true, 1},
			{0, 2, true, "b", true, 3},
			{0, 2, true, "b", true, 3}, // the second release of b: nothing
			{0, 3, false, "c", true, 0},
			{0, 1, true, "c", true, 1}, // a part, then the rest, and no more
			{0, 2, true, "c", true, 3},
			{0, 3, false, "d", true, 0},
			{0, 3, true, "c", true, 0},
			{0, 3, true, "x", true, 0}, // an id that never acquired
		}},
		{"the record ends with the lease", bucket, []refundStep{
			{0, 3, false, "a", true, 0},
			{10*time.Second + time.Microsecond, 3, true, "a", true, 0}, // the 10s lease is over
			{10*time.Second + time.Microsecond, 1, false, "b", false, 0},
			{11 * time.Second, 1, false, "b", false, 0},
			{11 * time.Second, 1, true, "b", true, 0},
			{12 * time.Second, 1, false, "b", false, 0},
		}},
		{"the record lasts the lease", bucket, []refundStep{
			{0, 3, false, "a", true, 0},
			{10*time.Second - time.Microsecond, 3, true, "a", true, 3},
		}},
		{"throttle: the slot of a refused request is not given back", throttle, []refundStep{
			{0, 1, false, "a", true, 0},
			{0, 1, false, "b", false, 0},
			{0, 1, true, "b", true, 0},
			{0, 1, false, "c", false, 0},
			{0, 1, true, "a", true, 0},
			{0, 1, false, "d", true, 0},
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := tt.op
			op.Value = "v" + strconv.Itoa(i)
			for j, st := range tt.steps {
				clk.set(st.at)
				o := op
				o.Hits, o.Release, o.LeaseID = st.hits, st.rel, st.lease
				got := eval(t, s, o)[0]
				want := st.want || st.rel
				if got.Allowed != want || (op.Behavior == hotparam.Reject && got.Remaining != st.rem) {
					t.Errorf("step %d (t0+%v hits %d release %v lease %q): got allowed %v remaining %d, want %v %d",
						j, st.at, st.hits, st.rel, st.lease, got.Allowed, got.Remaining, want, st.rem)
				}
			}
		})
	}
}

// A call that one op blocks consumes nothing, so its refund op's lease records nothing.
func TestRefundNothingWhenAnotherOpBlocked(t *testing.T) {
	s, _, clk := newTestStore(t)
	clk.set(0)
	refund := hotparam.RemoteOp{RuleID: "rf", Value: "v", Count: 3, Duration: time.Hour, Refund: true,
		LeaseID: "a", Hits: 1}
	strict := hotparam.RemoteOp{RuleID: "st", Value: "v", Count: 0, Duration: time.Hour, Hits: 1}
	if r := eval(t, s, refund, strict); r[0].Allowed && r[1].Allowed {
		t.Fatal("count 0 allowed")
	}
	one := refund
	one.Hits = 3
	one.LeaseID = "b"
	if r := eval(t, s, one)[0]; !r.Allowed {
		t.Fatalf("three of three after a blocked call: %+v", r)
	}
	rel := refund
	rel.Release, rel.Hits = true, 1
	if r := eval(t, s, rel)[0]; r.Remaining != 0 {
		t.Errorf("the release of the blocked call's lease gave back: remaining %d, want 0", r.Remaining)
	}
}

// Lease records are keys that expire with the lease, and a release that gives all back deletes
// its record.
func TestRefundRecordKeys(t *testing.T) {
	s, srv, clk := newTestStore(t)
	clk.setReal()
	op := hotparam.RemoteOp{RuleID: "rk", Value: "v", Count: 5, Duration: time.Hour, Refund: true,
		LeaseID: "lease-1", Lease: 30 * time.Second, Hits: 2}
	k := refundKey(DefaultPrefix, &op)
	eval(t, s, op)
	c := s.client.Load().c
	v, err := c.Do(t.Context(), c.B().Get().Key(k).Build()).ToString()
	if err != nil || len(v) != 16 || math.Float64frombits(binary.LittleEndian.Uint64([]byte(v))) != 2 {
		t.Errorf("record of 2 hits: GET got %q, %v", v, err)
	}
	if pttl, _ := strconv.Atoi(srv.CLI("PTTL", k)); pttl <= 29000 || pttl > 30001 {
		t.Errorf("record PTTL: got %d, want 30000 (the lease) or a little less", pttl)
	}
	rel := op
	rel.Release = true
	eval(t, s, rel)
	if got := srv.CLI("EXISTS", k); got != "0" {
		t.Errorf("record after its release: EXISTS got %s, want 0", got)
	}
	if slot(k) != slot(key(DefaultPrefix, &op)) {
		t.Errorf("record %q and state %q in different slots", k, key(DefaultPrefix, &op))
	}
}
