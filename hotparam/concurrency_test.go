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

// leased is an entry of value v for lease id; rel marks it a release.
func leased(v, id string, hits int64, release bool) Entry {
	e := one(v, hits)
	e.LeaseID, e.Release = id, release
	return e
}

func TestConcurrencyLeaseIDs(t *testing.T) {
	type step struct {
		at       time.Duration
		e        Entry
		allowed  bool
		inflight int64 // after the step
	}
	tests := []struct {
		name  string
		lease time.Duration
		steps []step
	}{
		{"a refused request's release frees nothing", 0, []step{
			{0, leased("v", "a", 1, false), true, 1},
			{0, leased("v", "b", 1, false), true, 2},
			{1, leased("v", "c", 1, false), false, 2}, // refused: holds no lease
			{2, leased("v", "c", 1, true), true, 2},   // its release is a no-op
			{3, leased("v", "d", 1, false), false, 2}, // still full
		}},
		{"a matching release frees its own lease, once", 0, []step{
			{0, leased("v", "a", 1, false), true, 1},
			{0, leased("v", "b", 1, false), true, 2},
			{1, leased("v", "a", 1, true), true, 1},
			{2, leased("v", "a", 1, true), true, 1}, // a second release of a finds nothing
			{3, leased("v", "c", 1, false), true, 2},
			{4, leased("v", "b", 1, true), true, 1},
			{5, leased("v", "c", 1, true), true, 0},
		}},
		{"a release of another value's id frees nothing", 0, []step{
			{0, leased("v", "a", 1, false), true, 1},
			{1, leased("w", "a", 1, true), true, 1},
		}},
		{"hits: a release frees at most what its lease holds", 0, []step{
			{0, leased("v", "a", 2, false), true, 2},
			{1, leased("v", "a", 5, true), true, 0},
		}},
		{"leases with ids still expire", 10 * time.Second, []step{
			{0, leased("v", "a", 1, false), true, 1},
			{time.Second, leased("v", "b", 1, false), true, 2},
			{10*time.Second - 1, leased("v", "c", 1, false), false, 2},
			{10 * time.Second, leased("v", "c", 1, false), true, 2}, // a expired, c took its place
			{10 * time.Second, leased("v", "a", 1, true), true, 2},  // a is gone: no-op
			{11 * time.Second, leased("v", "d", 1, false), true, 2}, // b expired
		}},
		{"mixed: a release without id frees only a lease without id", 0, []step{
			{0, leased("v", "a", 1, false), true, 1},
			{0, one("v", 1), true, 2},
			{1, leased("v", "b", 1, false), false, 2},
			{2, rel("v", 1), true, 1},                 // frees the one without id
			{3, leased("v", "b", 1, false), true, 2},  //
			{4, rel("v", 1), true, 2},                 // a and b named themselves: frees nothing
			{4, rel("v", 1), true, 2},                 // however many are sent
			{5, leased("v", "c", 1, false), false, 2}, // so a bare release makes no room
			{6, leased("v", "b", 1, true), true, 1},   // b's own release frees b's lease
			{7, leased("v", "a", 1, true), true, 0},   // and a's
			{8, rel("v", 1), true, 0},                 // never below zero
			{9, leased("v", "x", 1, false), true, 1},  //
			{9, leased("v", "zz", 1, false), true, 2}, //
		}},
		{"without ids: a release frees the latest lease", 0, []step{
			{0, one("v", 1), true, 1},
			{0, one("v", 1), true, 2},
			{1, one("v", 1), false, 2},
			{2, rel("v", 1), true, 1},
			{3, one("v", 1), true, 2},
			{4, rel("v", 1), true, 1},
			{4, rel("v", 1), true, 0},
			{5, rel("v", 1), true, 0}, // never below zero
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, conc(2, tc.lease))
			for i, s := range tc.steps {
				d, _ := check(l, at(s.at), s.e)
				if d.Allowed != s.allowed {
					t.Fatalf("step %d: allowed %v, want %v (%+v)", i, d.Allowed, s.allowed, d)
				}
				if got := inflight(l, "v", at(s.at)); got != s.inflight {
					t.Fatalf("step %d: %d in flight, want %d", i, got, s.inflight)
				}
			}
		})
	}
}

// inflight is value v's count in flight under rule 0 of l at now, read through the status of a
// release of nothing (a lease id no acquire used).
func inflight(l *Limiter, v string, now time.Time) int64 {
	_, st := check(l, now, leased(v, "\x00probe", 1, true))
	if st[0].Rule < 0 {
		return 0
	}
	return st[0].Limit - st[0].Remaining
}
