package hotparam

import (
	"context"
	"testing"
	"time"
)

func conc(count int64, lease time.Duration) Rule {
	return Rule{Resource: "r", Param: "p", Grade: Concurrency, Count: count, Lease: lease}
}

func rel(v string, hits int64) Entry {
	e := one(v, hits)
	e.Release = true
	return e
}

func TestConcurrencyAcquireRelease(t *testing.T) {
	l := mustNew(t, conc(2, 0))
	steps := []struct {
		at        time.Duration
		e         Entry
		allowed   bool
		remaining int64
		tracked   int
	}{
		{0, one("v", 1), true, 1, 1},
		{0, one("v", 1), true, 0, 1},
		{0, one("v", 1), false, 0, 1},
		{1, rel("v", 1), true, 1, 1},
		{2, one("v", 1), true, 0, 1},
		{3, rel("v", 5), true, 2, 0}, // never below zero; forgotten at zero
		{4, rel("v", 1), true, 2, 0}, // a release of nothing in flight
		{5, one("v", 2), true, 0, 1}, // hits take that many slots
		{6, one("v", 1), false, 0, 1},
	}
	for i, s := range steps {
		d, st := check(l, at(s.at), s.e)
		if d.Allowed != s.allowed || st[0].Remaining != s.remaining {
			t.Fatalf("step %d: allowed %v remaining %d, want %v %d", i, d.Allowed, st[0].Remaining, s.allowed, s.remaining)
		}
		if !d.Allowed && d.Block.Reason != ReasonConcurrency {
			t.Fatalf("step %d: reason %v, want concurrency", i, d.Block.Reason)
		}
		if got := l.Stats()[0].Tracked; got != s.tracked {
			t.Fatalf("step %d: tracked %d, want %d", i, got, s.tracked)
		}
	}
}

func TestConcurrencyLeaseExpires(t *testing.T) {
	l := mustNew(t, conc(1, 10*time.Second))
	steps := []struct {
		at      time.Duration
		allowed bool
		retry   time.Duration
	}{
		{0, true, 0},
		{10*time.Second - 1, false, 1}, // the lease holds until its end
		{10 * time.Second, true, 0},    // the release was lost: the lease expired
		{15 * time.Second, false, 5 * time.Second},
	}
	for i, s := range steps {
		d, _ := check(l, at(s.at), one("v", 1))
		if d.Allowed != s.allowed || (!d.Allowed && d.Block.RetryAfter != s.retry) {
			t.Fatalf("step %d: %+v, want allowed %v retry %v", i, d, s.allowed, s.retry)
		}
	}
}

func TestConcurrencyDefaultLease(t *testing.T) {
	l := mustNew(t, conc(1, 0))
	check(l, at(0), one("v", 1))
	if d, _ := check(l, at(DefaultLease-1), one("v", 1)); d.Allowed {
		t.Fatal("admitted before the default lease ended")
	}
	if d, _ := check(l, at(DefaultLease), one("v", 1)); !d.Allowed {
		t.Fatal("blocked after the default lease ended")
	}
}

func TestSkipConcurrency(t *testing.T) {
	l := mustNew(t, conc(0, 0))
	ctx := context.Background()
	if d := l.Check(ctx, t0, []Entry{one("v", 1)}, CheckOptions{SkipConcurrency: true}, nil); !d.Allowed {
		t.Fatal("SkipConcurrency still applied a concurrency rule")
	}
	if d := l.Check(ctx, t0, []Entry{one("v", 1)}, CheckOptions{}, nil); d.Allowed {
		t.Fatal("count 0 concurrency rule admitted a request")
	}
	if got := l.Stats()[0].Tracked; got != 0 {
		t.Fatalf("tracked %d values with nothing in flight", got)
	}
}
