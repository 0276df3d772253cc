package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

const ms = time.Millisecond

func TestBucket(t *testing.T) {
	s, _, clk := newTestStore(t)
	tests := []struct {
		name  string
		op    hotparam.RemoteOp
		steps []step
	}{
		{
			name: "5 per second",
			op:   hotparam.RemoteOp{RuleID: "r1", Value: "a", Count: 5, Duration: time.Second},
			steps: []step{
				{0, 1, false, ok(4, 200*ms, 0, 0)},
				{0, 4, false, ok(0, time.Second, 0, 0)},
				{0, 1, false, no(0, time.Second, 200*ms)},
				{100 * ms, 1, false, no(0, 900*ms, 100*ms)},
				{200 * ms, 1, false, ok(0, time.Second, 0, 0)},
				{700 * ms, 0, false, ok(1, 700*ms, 0, 0)},                 // hits 0 means 1; 2.5 tokens refilled
				{10 * time.Second, 6, false, no(5, 0, time.Second)},       // more than capacity: nothing consumed; a duration, as locally
				{10 * time.Second, 1 << 62, false, no(5, 0, time.Second)}, // cut to capacity+1: no overflow
				{10 * time.Second, 5, false, ok(0, time.Second, 0, 0)},
			},
		},
		{
			name: "burst adds capacity, not rate",
			op:   hotparam.RemoteOp{RuleID: "r2", Value: "a", Count: 2, Burst: 3, Duration: time.Second},
			steps: []step{
				{0, 5, false, ok(0, 2500*ms, 0, 0)},
				{0, 1, false, no(0, 2500*ms, 500*ms)},
				{500 * ms, 1, false, ok(0, 2500*ms, 0, 0)},
				{1500 * ms, 3, false, no(2, 1500*ms, 500*ms)},
			},
		},
		{
			name: "a third of a token is not lost",
			op:   hotparam.RemoteOp{RuleID: "r3", Value: "a", Count: 3, Duration: time.Second},
			steps: []step{
				{0, 3, false, ok(0, time.Second, 0, 0)},
				// 333333us refill 999999/1000000 of a token: 1/3 us (334ns rounded up) short
				{333333 * time.Microsecond, 1, false, no(0, 666667*time.Microsecond, 334)},
				{333334 * time.Microsecond, 1, false, ok(0, 999999334, 0, 0)}, // 2/1000000 token left
			},
		},
		{
			name: "multi-second window",
			op:   hotparam.RemoteOp{RuleID: "r4", Value: "a", Count: 2, Duration: 10 * time.Second},
			steps: []step{
				{0, 2, false, ok(0, 10*time.Second, 0, 0)},
				{4 * time.Second, 1, false, no(0, 6*time.Second, time.Second)},
				{5 * time.Second, 1, false, ok(0, 10*time.Second, 0, 0)},
			},
		},
		{
			name: "a million per day: exact to the microsecond",
			op:   hotparam.RemoteOp{RuleID: "r8", Value: "a", Count: 1e6, Duration: 24 * time.Hour},
			steps: []step{
				{0, 1e6, false, ok(0, 24*time.Hour, 0, 0)},
				{86399 * time.Microsecond, 1, false, no(0, 24*time.Hour-86399*time.Microsecond, time.Microsecond)},
				{86400 * time.Microsecond, 1, false, ok(0, 24*time.Hour, 0, 0)},
			},
		},
		{
			name: "count 0 blocks all",
			op:   hotparam.RemoteOp{RuleID: "r5", Value: "a", Count: 0, Burst: 4, Duration: time.Second},
			steps: []step{
				{0, 1, false, no(0, 0, time.Second)}, // a duration, as locally
				{time.Hour, 1, false, no(0, 0, time.Second)},
			},
		},
		{
			name: "refund gives back, never above capacity",
			op:   hotparam.RemoteOp{RuleID: "r6", Value: "a", Count: 4, Duration: time.Second, Refund: true, LeaseID: "L"},
			steps: []step{
				{0, 4, false, ok(0, time.Second, 0, 0)},
				{0, 3, true, ok(3, 250*ms, 0, 0)},
				{0, 3, false, ok(0, time.Second, 0, 0)},
				{0, 9, true, ok(4, 0, 0, 0)},
			},
		},
		{
			name: "release without refund changes nothing",
			op:   hotparam.RemoteOp{RuleID: "r7", Value: "a", Count: 4, Duration: time.Second},
			steps: []step{
				{0, 4, false, ok(0, time.Second, 0, 0)},
				{0, 4, true, ok(0, time.Second, 0, 0)},
				{0, 1, false, no(0, time.Second, 250*ms)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, s, clk, tt.op, tt.steps) })
	}
}

func TestBucketKeyExpiresWhenFull(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "ttl", Value: "v", Count: 5, Duration: 100 * time.Second, Hits: 1, Refund: true,
		LeaseID: "L"}
	k := key(DefaultPrefix, &op)
	clk.setReal()
	eval(t, s, op)
	// PTTL counts down in real time while redis-cli starts: allow a second for that, and 1ms
	// for rounding up to whole milliseconds.
	if pttl, _ := strconv.Atoi(srv.CLI("PTTL", k)); pttl <= 19000 || pttl > 20001 {
		t.Errorf("PTTL after one token of five per 100s: got %d, want 20000 (ms until full) or a little less", pttl)
	}
	rel := op
	rel.Release = true
	eval(t, s, rel)
	if got := srv.CLI("EXISTS", k); got != "0" {
		t.Errorf("a full bucket is no state: EXISTS got %s, want 0", got)
	}
}

func TestRedisClock(t *testing.T) {
	s, _, _ := newTestStore(t)
	s.clock = nil
	s.blk = nil // every answer from Redis, on its clock
	op := hotparam.RemoteOp{RuleID: "clock", Value: "v", Count: 2, Duration: time.Second, Hits: 1}
	before := time.Now()
	eval(t, s, op)
	eval(t, s, op)
	got := eval(t, s, op)[0]
	elapsed := time.Since(before)
	if got.Allowed {
		t.Fatalf("third of two per second: got allowed")
	}
	if got.RetryAfter > 500*ms || got.RetryAfter < 500*ms-elapsed {
		t.Errorf("RetryAfter: got %v, want within %v of 500ms", got.RetryAfter, elapsed)
	}
}

func TestBucketCountChangeKeepsTokens(t *testing.T) {
	s, _, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "chg", Value: "v", Count: 4, Duration: time.Second, Hits: 2}
	clk.set(0)
	eval(t, s, op) // 2 of 4 left, stored in units of 1/250000 token
	op.Count, op.Hits = 6, 1
	got := eval(t, s, op)[0] // read in units of 1/500000 token: still 2, one taken
	if want := ok(1, 5*time.Second/6+1, 0, 0); got != want {
		t.Errorf("after the count changed from 4 to 6: got %+v, want %+v", got, want)
	}
}

// On the fast path (one bucket acquisition, no refund record), a key lives at least until its
// bucket is full again: a take that leaves it living long enough keeps its expiry (KEEPTTL),
// one that does not moves it to the full time plus a slack, the time an empty bucket takes to
// fill, at most 10s.
func TestBucketFastPathExpiry(t *testing.T) {
	s, srv, clk := newTestStore(t)
	clk.now = time.Now().Truncate(time.Millisecond) // PEXPIRETIME is whole milliseconds
	expiry := func(op hotparam.RemoteOp) int64 {
		t.Helper()
		ms, err := strconv.ParseInt(srv.CLI("PEXPIRETIME", key(DefaultPrefix, &op)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return ms - clk.now.UnixMilli()
	}
	// 100 per 10s: a token fills in 100ms, an empty bucket in 10s (the slack).
	op := hotparam.RemoteOp{RuleID: "fast", Value: "v", Count: 100, Duration: 10 * time.Second, Hits: 1}
	for i, step := range []struct {
		hits int64
		want int64 // ms from now
	}{
		{1, 100 + 10_000}, // a new key: full in 100ms, plus the slack
		{1, 10_100},       // full in 200ms: kept
		{98, 10_100},      // empty, full in 10s: kept
	} {
		op.Hits = step.hits
		if got := eval(t, s, op)[0]; !got.Allowed {
			t.Fatalf("step %d refused: %+v", i, got)
		}
		if got := expiry(op); got != step.want {
			t.Errorf("step %d: expires in %dms, want %d", i, got, step.want)
		}
	}
	// 5 per 100s: a token fills in 20s, more than the slack of 10s; every take moves the expiry.
	op = hotparam.RemoteOp{RuleID: "slow", Value: "v", Count: 5, Duration: 100 * time.Second, Hits: 1}
	for i, want := range []int64{20_000 + 10_000, 40_000 + 10_000} {
		eval(t, s, op)
		if got := expiry(op); got != want {
			t.Errorf("slow step %d: expires in %dms, want %d", i, got, want)
		}
	}
}
