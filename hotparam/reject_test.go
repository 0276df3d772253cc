package hotparam

import (
	"errors"
	"math"
	"testing"
	"time"
)

// step is one request of a step table: at instant at, asking hits tokens.
type step struct {
	at        time.Duration
	hits      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

func runSteps(t *testing.T, l *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		d, st := check(l, at(s.at), one("v", s.hits))
		if d.Allowed != s.allowed {
			t.Fatalf("step %d (at %v, hits %d): allowed = %v, want %v", i, s.at, s.hits, d.Allowed, s.allowed)
		}
		if got := st[0].Remaining; got != s.remaining {
			t.Errorf("step %d: remaining = %d, want %d", i, got, s.remaining)
		}
		if got := st[0].RetryAfter; got != s.retry {
			t.Errorf("step %d: status retry = %v, want %v", i, got, s.retry)
		}
		if !d.Allowed && d.Block.RetryAfter != s.retry {
			t.Errorf("step %d: block retry = %v, want %v", i, d.Block.RetryAfter, s.retry)
		}
		if got := st[0].ResetAfter; got != s.reset {
			t.Errorf("step %d: reset = %v, want %v", i, got, s.reset)
		}
	}
}

func TestRejectRefillsExactlyBetweenWindowEdges(t *testing.T) {
	// 10 per second: a token every 100ms, refilled continuously.
	l := mustNew(t, qps(10, time.Second))
	ms := time.Millisecond
	runSteps(t, l, []step{
		{at: 0, hits: 10, allowed: true, remaining: 0, reset: time.Second},
		{at: 0, hits: 1, allowed: false, remaining: 0, retry: 100 * ms, reset: time.Second},
		// half a second later: exactly 5 tokens, not a new window's 10.
		{at: 500 * ms, hits: 6, allowed: false, remaining: 5, retry: 100 * ms, reset: 500 * ms},
		{at: 500 * ms, hits: 5, allowed: true, remaining: 0, reset: time.Second},
		{at: 600*ms - 1, hits: 1, allowed: false, remaining: 0, retry: 1, reset: 900*ms + 1},
		{at: 600 * ms, hits: 1, allowed: true, remaining: 0, reset: time.Second},
		// an idle stretch fills the bucket, never beyond its capacity.
		{at: 10 * time.Second, hits: 1, allowed: true, remaining: 9, reset: 100 * ms},
	})
}

func TestRejectBurst(t *testing.T) {
	r := qps(2, time.Second)
	r.Burst = 3
	l := mustNew(t, r)
	runSteps(t, l, []step{
		{at: 0, hits: 5, allowed: true, remaining: 0, reset: 2500 * time.Millisecond},
		{at: 0, hits: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond, reset: 2500 * time.Millisecond},
		{at: 2 * time.Second, hits: 4, allowed: true, remaining: 0, reset: 2500 * time.Millisecond},
		{at: 5 * time.Second, hits: 1, allowed: true, remaining: 4, reset: 500 * time.Millisecond},
	})
}

func TestRejectCountZeroBlocksAll(t *testing.T) {
	r := qps(0, time.Second)
	r.Burst = 5 // burst does not open a count-0 rule
	l := mustNew(t, r)
	runSteps(t, l, []step{
		{at: 0, hits: 1, allowed: false, remaining: 0, retry: time.Second},
		{at: time.Hour, hits: 1, allowed: false, remaining: 0, retry: time.Second},
	})
}

func TestRejectMoreThanCapacityConsumesNothing(t *testing.T) {
	r := qps(4, time.Second)
	r.Burst = 1
	l := mustNew(t, r)
	runSteps(t, l, []step{
		{at: 0, hits: 6, allowed: false, remaining: 5, retry: time.Second},
		{at: 0, hits: 5, allowed: true, remaining: 0, reset: 1250 * time.Millisecond},
	})
}

func TestRejectNonIntegerRateHasNoDrift(t *testing.T) {
	// 3 per second: a token every 333333333.3ns. Taking one the moment it is whole, for 1000
	// seconds, must pass exactly 3000 requests after the first 3, with no fraction lost.
	l := mustNew(t, qps(3, time.Second))
	if d, _ := check(l, at(0), one("v", 3)); !d.Allowed {
		t.Fatal("first 3 blocked")
	}
	passed := 0
	for k := int64(1); k <= 3000; k++ {
		// the k-th token is whole at ceil(k*1e9/3) ns.
		due := time.Duration((k*int64(time.Second) + 2) / 3)
		if d, _ := check(l, at(due-1), one("v", 1)); d.Allowed {
			t.Fatalf("token %d passed 1ns early", k)
		}
		if d, _ := check(l, at(due), one("v", 1)); d.Allowed {
			passed++
		}
	}
	if passed != 3000 {
		t.Fatalf("passed %d, want 3000", passed)
	}
}

func TestRejectItemsOverrideCount(t *testing.T) {
	r := qps(1, time.Second)
	r.Burst = 1
	r.Items = map[string]int64{"vip": 100}
	l := mustNew(t, r)
	for _, tc := range []struct {
		value string
		want  int64 // requests that pass at one instant: count + burst
	}{{"vip", 101}, {"plain", 2}} {
		var got int64
		for range 200 {
			if d, _ := check(l, at(0), one(tc.value, 1)); d.Allowed {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("%s: passed %d, want %d", tc.value, got, tc.want)
		}
	}
}

func TestRefundNeverAboveCapacity(t *testing.T) {
	r := qps(10, time.Second)
	r.Refund = true
	l := mustNew(t, r)
	acq := func(n int64, id string) Entry { e := one("v", n); e.LeaseID = id; return e }
	rel := func(n int64, id string) Entry { e := acq(n, id); e.Release = true; return e }
	steps := []struct {
		at        time.Duration
		e         Entry
		allowed   bool
		remaining int64
	}{
		{0, acq(8, "a"), true, 2},
		{0, acq(2, "b"), true, 0},
		{0, rel(3, "a"), true, 3},
		{500 * time.Millisecond, rel(100, "a"), true, 10}, // 3+5 refilled+5 left of a's 8: capped
		{500 * time.Millisecond, acq(10, "c"), true, 0},
		{500 * time.Millisecond, acq(1, "d"), false, 0},
	}
	for i, s := range steps {
		d, st := check(l, at(s.at), s.e)
		if d.Allowed != s.allowed || st[0].Remaining != s.remaining {
			t.Errorf("step %d: allowed %v remaining %d, want %v %d", i, d.Allowed, st[0].Remaining, s.allowed, s.remaining)
		}
	}
}

func TestReleaseIgnoredWithoutRefund(t *testing.T) {
	l := mustNew(t, qps(2, time.Second))
	check(l, at(0), one("v", 2))
	e := one("v", 2)
	e.Release = true
	if d, _ := check(l, at(0), e); !d.Allowed {
		t.Fatal("a release blocked")
	}
	if d, _ := check(l, at(0), one("v", 1)); d.Allowed {
		t.Fatal("a release gave tokens back to a rule without refund")
	}
}

func TestNewLimitRepresentable(t *testing.T) {
	for _, tc := range []struct {
		name         string
		count, burst int64
		d            time.Duration
		wantErr      bool
	}{
		{"per second", 1_000_000, 0, time.Second, false},
		{"daily quota reduced by gcd", 1_000_000, 0, 24 * time.Hour, false},
		{"coprime and huge", math.MaxInt64 / 3, 0, 24*time.Hour + 1, true},
		{"burst overflow", math.MaxInt64, 1, time.Second, true},
	} {
		_, err := rejectKind{}.newLimit(tc.count, tc.burst, tc.d)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
		}
		if err != nil && !errors.Is(err, errUnrepresentable) {
			t.Errorf("%s: err = %v, want errUnrepresentable", tc.name, err)
		}
	}
	if _, err := New([]Rule{{Resource: "r", Param: "p", Count: math.MaxInt64 / 3, Duration: 24*time.Hour + 1}}, Options{}); err == nil {
		t.Error("New accepted a rule it cannot count exactly")
	}
}

func TestRescaleRoundsDown(t *testing.T) {
	for _, tc := range []struct {
		v        int64
		from, to uint64
		want     int64
	}{
		{10, 3, 3, 10},
		{10, 3, 6, 20},
		{10, 6, 3, 5},
		{11, 6, 3, 5},
		{math.MaxInt64, 1, 4, 100},
	} {
		if got := rescale(tc.v, tc.from, tc.to, 100); got != tc.want {
			t.Errorf("rescale(%d, %d, %d) = %d, want %d", tc.v, tc.from, tc.to, got, tc.want)
		}
	}
}

func TestRejectEarlierInstantAddsNothing(t *testing.T) {
	l := mustNew(t, qps(10, time.Second))
	runSteps(t, l, []step{
		{at: time.Second, hits: 10, allowed: true, remaining: 0, reset: time.Second},
		// a caller whose clock lags: no tokens from the past, and the bucket's clock stays put.
		{at: 500 * time.Millisecond, hits: 1, allowed: false, remaining: 0, retry: 600 * time.Millisecond, reset: 1500 * time.Millisecond},
		{at: time.Second + 100*time.Millisecond, hits: 1, allowed: true, remaining: 0, reset: time.Second},
	})
}
