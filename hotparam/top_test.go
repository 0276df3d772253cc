package hotparam

import (
	"slices"
	"testing"
	"time"
)

func TestTopByPassedAndBlocked(t *testing.T) {
	l := mustNew(t, qps(2, time.Second), conc(100, 0))
	// in window [t0, t0+1s): a 5 requests (2 pass), b 2 (2 pass), c 1 (1 pass)
	for v, n := range map[string]int{"a": 5, "b": 2, "c": 1} {
		for range n {
			check(l, t0, one(v, 1))
		}
	}
	// next window: b 3 more (2 pass), d 4 (2 pass)
	for v, n := range map[string]int{"b": 3, "d": 4} {
		for range n {
			check(l, at(time.Second), one(v, 1))
		}
	}
	top := l.Top(at(time.Second+time.Millisecond), 2)
	if len(top) != 2 || top[0].Rule != 0 || top[0].Resource != "r" || top[0].Param != "p" {
		t.Fatalf("top %+v", top)
	}
	wantPassed := []TopValue{{"b", 4, 1, 0}, {"a", 2, 3, 2}}
	wantBlocked := []TopValue{{"a", 2, 3, 2}, {"d", 2, 2, 0}}
	if !slices.Equal(top[0].ByPassed, wantPassed) {
		t.Errorf("by passed %+v, want %+v", top[0].ByPassed, wantPassed)
	}
	if !slices.Equal(top[0].ByBlocked, wantBlocked) {
		t.Errorf("by blocked %+v, want %+v", top[0].ByBlocked, wantBlocked)
	}
	// the concurrency rule counts the calls that passed (a call blocked by the other rule did not);
	// a tie goes to the smaller value.
	if got := top[1].ByPassed; !slices.Equal(got, []TopValue{{"b", 4, 0, 96}, {"a", 2, 0, 98}}) {
		t.Errorf("concurrency top %+v", got)
	}
	// two windows later, the first window's counts are gone; the second's remain.
	top = l.Top(at(2*time.Second), 10)
	want := []TopValue{{"b", 2, 1, 2}, {"d", 2, 2, 2}}
	if !slices.Equal(top[0].ByPassed, want) {
		t.Errorf("a window later: %+v, want %+v", top[0].ByPassed, want)
	}
	if top = l.Top(at(3*time.Second), 10); len(top[0].ByPassed) != 0 || len(top[0].ByBlocked) != 0 {
		t.Errorf("old counts reported: %+v", top[0])
	}
	if top = l.Top(at(time.Second), 0); top[0].ByPassed != nil {
		t.Errorf("n = 0 listed values")
	}
}

func TestTopRemainingOfThrottle(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	for range 3 {
		check(l, t0, one("v", 1))
	}
	// slots 0, 100ms and 200ms taken: within a second of queueing, 300ms..1s are free
	top := l.Top(t0, 1)
	if got := top[0].ByPassed; len(got) != 1 || got[0].Remaining != 8 {
		t.Fatalf("throttle top %+v, want 8 remaining", got)
	}
}

func TestTopWindowOption(t *testing.T) {
	// A 1s rule counted over 10s windows: counts from 9s ago still show, and go only after the
	// window before the current one has passed too.
	l, err := New([]Rule{qps(100, time.Second)}, Options{TopWindow: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Windows are aligned on Unix time: start at one.
	base := t0.Truncate(10 * time.Second).Add(10 * time.Second)
	w := func(d time.Duration) time.Time { return base.Add(d) }
	check(l, w(0), one("a", 1))
	check(l, w(9*time.Second), one("a", 1))
	if got := l.Top(w(9*time.Second), 1)[0].ByPassed; len(got) != 1 || got[0].Passed != 2 {
		t.Fatalf("within a 10s window: %+v, want a with 2 passed", got)
	}
	if got := l.Top(w(19*time.Second), 1)[0].ByPassed; len(got) != 1 || got[0].Passed != 2 {
		t.Fatalf("in the next window: %+v, want the previous window's 2 passed", got)
	}
	if got := l.Top(w(30*time.Second), 1)[0].ByPassed; len(got) != 0 {
		t.Fatalf("two windows later: %+v, want nothing", got)
	}
	// Without the option the rule's own 1s window applies: 9s later the first count is gone.
	d := mustNew(t, qps(100, time.Second))
	check(d, w(0), one("a", 1))
	if got := d.Top(w(9*time.Second), 1)[0].ByPassed; len(got) != 0 {
		t.Fatalf("default window: %+v, want nothing after 9s", got)
	}
}
