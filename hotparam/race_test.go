package hotparam

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentChecksNeverOveradmit runs many goroutines on one value, and on pairs of values
// of two rules, at one instant: exactly the bucket's capacity passes.
func TestConcurrentChecksNeverOveradmit(t *testing.T) {
	r := qps(100, time.Second)
	r.Burst = 23
	other := Rule{Resource: "r", Param: "q", Count: 1000, Duration: time.Minute, Capacity: 4}
	l := mustNew(t, r, other, Rule{Resource: "r", Param: "c", Grade: Concurrency, Count: 3})
	var passed, inflight atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				e := Entry{Resource: "r", Params: []Param{
					{Name: "p", Values: []string{"hot"}},
					{Name: "q", Values: []string{"q" + strconv.Itoa((g+i)%7)}}, // evictions too
				}}
				d := l.Check(context.Background(), t0, []Entry{e}, CheckOptions{SkipConcurrency: i%2 == 0}, nil)
				if d.Allowed {
					passed.Add(1)
				}
				if i%10 == 0 { // concurrency churn on its own value
					c := Entry{Resource: "r", Params: []Param{{Name: "c", Values: []string{"x"}}}}
					if d := l.Check(context.Background(), t0, []Entry{c}, CheckOptions{}, nil); d.Allowed {
						inflight.Add(1)
						c.Release = true
						l.Check(context.Background(), t0, []Entry{c}, CheckOptions{}, nil)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := passed.Load(); got != 123 {
		t.Fatalf("passed %d, want exactly the capacity 123", got)
	}
	if inflight.Load() == 0 {
		t.Fatal("no concurrency acquire passed")
	}
	if s := l.Stats(); s[2].Tracked != 0 || s[1].Tracked > 4 {
		t.Fatalf("stats %+v: want nothing in flight and at most 4 q values", s)
	}
}

// TestConcurrentReloadSharesStateSafely checks on an old and a reloaded Limiter at once; their
// shared buckets admit the capacity of the tighter threshold at most.
func TestConcurrentReloadSharesStateSafely(t *testing.T) {
	a := mustNew(t, qps(40, time.Second), Rule{Resource: "r", Param: "q", Count: 1000, Duration: time.Second})
	b, err := a.Reload([]Rule{{Resource: "r", Param: "q", Count: 1000, Duration: time.Second}, qps(30, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := a
			if g%2 == 1 {
				l = b // rules in the other order: the lock order must not depend on it
			}
			for range 100 {
				e := Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"w"}}}}
				if d := l.Check(context.Background(), t0, []Entry{e}, CheckOptions{}, nil); d.Allowed {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := passed.Load(); got > 40 || got < 30 {
		t.Fatalf("passed %d, want between 30 and 40", got)
	}
}

// TestReloadUnderMixedLoad reloads again and again while checks of every rule kind, Top, Stats
// and Sweep run on the Limiter in force and on the ones before it: a reload shares the compiled
// rules it keeps with them, and must only read them (go test -race finds a write).
func TestReloadUnderMixedLoad(t *testing.T) {
	base := []Rule{
		qps(1000, time.Second),
		{Resource: "r", Param: "c", Grade: Concurrency, Count: 5, Capacity: 64},
		{Resource: "r", Param: "t", Count: 100, Duration: time.Second, Behavior: Throttle, MaxQueueingTime: time.Second},
	}
	var cur atomic.Pointer[Limiter]
	cur.Store(mustNew(t, base...))
	stop := make(chan struct{})
	var checks atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := cur.Load()
				now := at(time.Duration(i) * time.Millisecond)
				e := Entry{Resource: "r", LeaseID: "l" + strconv.Itoa(g), Params: []Param{
					{Name: "p", Values: []string{"v" + strconv.Itoa(i%50)}},
					{Name: "c", Values: []string{"c" + strconv.Itoa(i%3)}},
					{Name: "t", Values: []string{"t"}},
				}}
				if d := l.Check(context.Background(), now, []Entry{e}, CheckOptions{}, nil); d.Allowed {
					e.Release = true
					l.Check(context.Background(), now, []Entry{e}, CheckOptions{}, nil)
				}
				switch i % 64 {
				case 0:
					l.Top(now, 5)
				case 1:
					l.Stats()
				case 2:
					l.Sweep(now)
				}
				checks.Add(1)
			}
		}()
	}
	for i := range 200 {
		rules := append([]Rule(nil), base...)
		rules[0].Count = 1000 + int64(i%2) // changed, compiled again: takes the old store
		if i%3 == 0 {
			rules = append([]Rule{{Resource: "r", Param: "x", Count: 1, Duration: time.Second}}, rules...) // every rule moves
		}
		next, err := cur.Load().Reload(rules, Options{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Store(next)
	}
	for checks.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
}
