package hotparam

import (
	"context"
	"testing"
	"time"
)

func throttle(count int64, d, maxQ time.Duration) Rule {
	return Rule{Resource: "r", Param: "p", Grade: QPS, Behavior: Throttle, Count: count, Duration: d, MaxQueueingTime: maxQ}
}

type throttleStep struct {
	at      time.Duration
	hits    int64
	allowed bool
	wait    time.Duration
	retry   time.Duration
}

func runThrottle(t *testing.T, l *Limiter, opt CheckOptions, steps []throttleStep) {
	t.Helper()
	for i, s := range steps {
		d := l.Check(context.Background(), at(s.at), []Entry{one("v", s.hits)}, opt, nil)
		if d.Allowed != s.allowed || d.Wait != s.wait {
			t.Fatalf("step %d (at %v): allowed %v wait %v, want %v %v", i, s.at, d.Allowed, d.Wait, s.allowed, s.wait)
		}
		if !d.Allowed && (d.Block.Reason != ReasonThrottle || d.Block.RetryAfter != s.retry) {
			t.Fatalf("step %d: block %+v, want reason throttle retry %v", i, d.Block, s.retry)
		}
	}
}

func TestThrottleSpaces5000PerSecond200us(t *testing.T) {
	us := time.Microsecond
	t.Run("no queueing", func(t *testing.T) {
		l := mustNew(t, throttle(5000, time.Second, 0))
		runThrottle(t, l, CheckOptions{}, []throttleStep{
			{at: 0, hits: 1, allowed: true},
			{at: 0, hits: 1, allowed: false, retry: 200 * us},
			{at: 200*us - 1, hits: 1, allowed: false, retry: 1},
			{at: 200 * us, hits: 1, allowed: true},
			{at: 400 * us, hits: 1, allowed: true},
		})
	})
	t.Run("queueing up to 1ms", func(t *testing.T) {
		l := mustNew(t, throttle(5000, time.Second, time.Millisecond))
		steps := []throttleStep{}
		for k := range 6 { // waits 0, 200µs, ... 1ms: a wait equal to the maximum passes
			steps = append(steps, throttleStep{at: 0, hits: 1, allowed: true, wait: time.Duration(k) * 200 * us})
		}
		steps = append(steps,
			throttleStep{at: 0, hits: 1, allowed: false, retry: 200 * us},
			// the blocked request took no slot: the next slot is still 1.2ms.
			throttleStep{at: 200*us - 1, hits: 1, allowed: false, retry: 1},
			throttleStep{at: 200 * us, hits: 1, allowed: true, wait: time.Millisecond},
		)
		runThrottle(t, l, CheckOptions{}, steps)
	})
}

func TestThrottleThreePerSecondNoDrift(t *testing.T) {
	// slots at k*1e9/3 ns exactly; waits rounded up to the nanosecond, with no drift.
	l := mustNew(t, throttle(3, time.Second, time.Hour))
	for k := int64(0); k < 3000; k++ {
		d := l.Check(context.Background(), t0, []Entry{one("v", 1)}, CheckOptions{}, nil)
		want := time.Duration((k*int64(time.Second) + 2) / 3)
		if !d.Allowed || d.Wait != want {
			t.Fatalf("request %d: allowed %v wait %v, want wait %v", k, d.Allowed, d.Wait, want)
		}
	}
}

func TestThrottleHitsTakeSlots(t *testing.T) {
	ms := time.Millisecond
	l := mustNew(t, throttle(10, time.Second, time.Second))
	runThrottle(t, l, CheckOptions{}, []throttleStep{
		{at: 0, hits: 3, allowed: true, wait: 0},          // slots 0, 100, 200ms
		{at: 0, hits: 1, allowed: true, wait: 300 * ms},   // slot 300ms
		{at: 0, hits: 7, allowed: true, wait: 400 * ms},   // slots 400..1000ms
		{at: 0, hits: 1, allowed: false, retry: 100 * ms}, // slot 1.1s: beyond 1s of queueing
		{at: 5 * time.Second, hits: 1, allowed: true},     // idle time gives no credit...
		{at: 5 * time.Second, hits: 1, allowed: true, wait: 100 * ms},
	})
}

func TestThrottleDeadlineConsumesNothing(t *testing.T) {
	ms := time.Millisecond
	l := mustNew(t, throttle(10, time.Second, time.Second))
	runThrottle(t, l, CheckOptions{}, []throttleStep{{at: 0, hits: 1, allowed: true}})
	// the next slot is at 100ms; a deadline 50ms away cuts the wait.
	runThrottle(t, l, CheckOptions{Deadline: at(50 * ms)}, []throttleStep{{at: 0, hits: 1, allowed: false, retry: 50 * ms}})
	runThrottle(t, l, CheckOptions{Deadline: at(100 * ms)}, []throttleStep{{at: 0, hits: 1, allowed: true, wait: 100 * ms}})
	// the blocked request took nothing: the following slot is 200ms.
	runThrottle(t, l, CheckOptions{}, []throttleStep{{at: 0, hits: 1, allowed: true, wait: 200 * ms}})
}

func TestThrottleStatus(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, 250*time.Millisecond))
	for _, tc := range []struct {
		at        time.Duration
		remaining int64 // single requests admitted now: slots within 250ms of queueing
		reset     time.Duration
	}{
		{0, 2, 100 * time.Millisecond}, // after slot 0: slots 100, 200ms remain
		{0, 1, 200 * time.Millisecond}, // after 100ms
		{0, 0, 300 * time.Millisecond}, // after 200ms
		{time.Second, 2, 100 * time.Millisecond},
	} {
		d, st := check(l, at(tc.at), one("v", 1))
		if !d.Allowed || st[0].Remaining != tc.remaining || st[0].ResetAfter != tc.reset || st[0].Limit != 10 {
			t.Errorf("at %v: allowed %v status %+v, want remaining %d reset %v", tc.at, d.Allowed, st[0], tc.remaining, tc.reset)
		}
	}
}
