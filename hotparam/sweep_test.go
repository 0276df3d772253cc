package hotparam

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSweepForgetsOnlyIdleDefaultValues(t *testing.T) {
	cr := conc(2, time.Hour)
	cr.Resource = "c"
	l := mustNew(t, qps(10, time.Minute), cr)
	for i := range 1000 {
		check(l, t0, one("v"+strconv.Itoa(i), 1))
	}
	check(l, at(150*time.Second), one("recent", 1))
	check(l, at(150*time.Second), one("depleted", 10))
	check(l, t0, Entry{Resource: "c", Params: []Param{{Name: "p", Values: []string{"inflight"}}}})
	got := l.Sweep(at(3 * time.Minute))
	st := l.Stats()
	if got != 1000 || st[0].Tracked != 2 || st[1].Tracked != 1 {
		t.Fatalf("swept %d, tracked %+v; want 1000 swept, 2 and 1 left", got, st)
	}
	if d, _ := check(l, at(3*time.Minute), one("depleted", 6)); d.Allowed {
		t.Fatal("the depleted value was forgotten by Sweep")
	}
	// once all is idle, the rules drop their shards
	l.Sweep(at(2 * time.Hour))
	for i, rs := range l.compiled {
		if rs.store.current() != nil {
			t.Errorf("rule %d kept its shards with nothing tracked", i)
		}
	}
	if d, st := check(l, at(2*time.Hour), one("v1", 10)); !d.Allowed || st[0].Remaining != 0 {
		t.Fatalf("after the shards were dropped: %+v %+v", d, st[0])
	}
}

// TestSweepShrinksMemory: a rule that tracked 100,000 values and went idle costs about what it
// did before its first value, once swept.
func TestSweepShrinksMemory(t *testing.T) {
	l := mustNew(t, qps(10, time.Second))
	var before, loaded, swept runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		check(l, t0, one("value-"+strconv.Itoa(i), 1))
	}
	runtime.GC()
	runtime.ReadMemStats(&loaded)
	l.Sweep(at(time.Minute))
	runtime.GC()
	runtime.ReadMemStats(&swept)
	grown := int64(loaded.HeapAlloc) - int64(before.HeapAlloc)
	left := int64(swept.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap: +%d bytes with 100,000 values, %+d once swept", grown, left)
	if grown < 5_000_000 || left > 64<<10 {
		t.Fatalf("heap +%d bytes tracked, %+d swept; want the values' memory freed", grown, left)
	}
	runtime.KeepAlive(l)
}

// TestSweepRacesChecks: Sweep dropping values and shards while checks recreate them never
// forgets a depleted value. Each round's checks run at one instant; Sweep runs at that instant
// all along, forgetting the values of earlier rounds (refilled by then) and so dropping and
// recreating the store's shards.
func TestSweepRacesChecks(t *testing.T) {
	l := mustNew(t, qps(3, time.Second))
	for r := range 200 {
		now := at(time.Duration(r) * 10 * time.Second)
		stop := make(chan struct{})
		var sweeper sync.WaitGroup
		sweeper.Add(1)
		go func() {
			defer sweeper.Done()
			for {
				select {
				case <-stop:
					return
				default:
					l.Sweep(now)
				}
			}
		}()
		var wrong atomic.Int64
		var checkers sync.WaitGroup
		for g := range 4 {
			checkers.Add(1)
			go func() {
				defer checkers.Done()
				for i := range 5 {
					v := strconv.Itoa(r) + "-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
					if d, _ := check(l, now, one(v, 3)); !d.Allowed {
						wrong.Add(1)
					}
					if d, _ := check(l, now, one(v, 1)); d.Allowed {
						wrong.Add(1)
					}
				}
			}()
		}
		checkers.Wait()
		close(stop)
		sweeper.Wait()
		if n := wrong.Load(); n > 0 {
			t.Fatalf("round %d: %d wrong decisions while Sweep ran", r, n)
		}
	}
}

// TestSweepDropsRecordsOfARuleReloadedWithoutRefund: refund records left by a rule that no
// longer refunds expire, and the value is forgotten once idle.
func TestSweepDropsRecordsOfARuleReloadedWithoutRefund(t *testing.T) {
	r := refundRule(10, time.Second)
	r.Lease = 5 * time.Second
	l := mustNew(t, r)
	check(l, t0, withLease("v", 1, "a", false))
	l2, err := l.Reload([]Rule{qps(10, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := l2.Sweep(at(10 * time.Second)); n != 1 || l2.Stats()[0].Tracked != 0 {
		t.Fatalf("swept %d, tracked %d; want the value forgotten", n, l2.Stats()[0].Tracked)
	}
}
