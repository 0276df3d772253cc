package hotparam

import (
	"context"
	"testing"
	"time"
)

func probe(v string, hits int64) Entry {
	e := one(v, hits)
	e.Probe = true
	return e
}

func TestProbeReject(t *testing.T) {
	l := mustNew(t, qps(3, time.Second))
	for i := range 5 {
		d, st := check(l, t0, probe("v", 3))
		if !d.Allowed || st[0].Remaining != 3 || st[0].Rule != 0 {
			t.Fatalf("probe %d of a full bucket: allowed %v remaining %d, want allowed and 3 left", i, d.Allowed, st[0].Remaining)
		}
	}
	if d, _ := check(l, t0, probe("v", 4)); d.Allowed || d.Block.Reason != ReasonQPS {
		t.Fatalf("a probe of 4 on a bucket of 3 allowed: %+v", d)
	}
	check(l, t0, one("v", 2))
	d, st := check(l, t0, probe("v", 2))
	if d.Allowed || st[0].Remaining != 1 || st[0].RetryAfter != time.Second/3+1 {
		t.Fatalf("probe of 2 with 1 left: %+v %+v, want blocked, 1 left, retry after 333ms", d, st[0])
	}
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed {
		t.Fatal("a refused probe consumed")
	}
	if d, _ := check(l, t0, probe("v", 1)); d.Allowed {
		t.Fatal("probe allowed on an empty bucket")
	}
}

func TestProbeThrottle(t *testing.T) {
	r := qps(10, time.Second)
	r.Behavior, r.MaxQueueingTime = Throttle, time.Second
	l := mustNew(t, r)
	for range 3 {
		if d, _ := check(l, t0, probe("v", 1)); !d.Allowed || d.Wait != 0 {
			t.Fatalf("probe of an idle throttle: %+v", d)
		}
	}
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed || d.Wait != 0 {
		t.Fatalf("first request waited: %+v", d)
	}
	// the next slot is 100ms away: a real request would wait, a probe is refused
	d, _ := check(l, t0, probe("v", 1))
	if d.Allowed || d.Block.Reason != ReasonThrottle || d.Block.RetryAfter != 100*time.Millisecond {
		t.Fatalf("probe needing a wait: %+v, want refused, retry after 100ms", d)
	}
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed || d.Wait != 100*time.Millisecond {
		t.Fatalf("a refused probe took a slot: %+v", d)
	}
	if d, _ := check(l, at(200*time.Millisecond), probe("v", 1)); !d.Allowed {
		t.Fatalf("probe once the slot came: %+v", d)
	}
}

func TestProbeConcurrency(t *testing.T) {
	l := mustNew(t, Rule{Resource: "r", Param: "p", Grade: Concurrency, Count: 2})
	for range 3 {
		if d, st := check(l, t0, probe("v", 2)); !d.Allowed || st[0].Remaining != 2 {
			t.Fatalf("probe of 2 free slots: %+v %+v", d, st[0])
		}
	}
	check(l, t0, one("v", 1))
	if d, _ := check(l, t0, probe("v", 2)); d.Allowed || d.Block.Reason != ReasonConcurrency {
		t.Fatalf("probe of 2 with 1 free: %+v", d)
	}
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed {
		t.Fatal("a probe held a slot")
	}
	if d, _ := check(l, t0, one("v", 1)); d.Allowed {
		t.Fatal("third in flight allowed")
	}
	// a probe that is also a release gives back nothing
	e := probe("v", 1)
	e.Release = true
	check(l, t0, e)
	if d, _ := check(l, t0, one("v", 1)); d.Allowed {
		t.Fatal("a probe release freed a slot")
	}
}

// TestProbeKeepsAllOrNothing: a probe that fails blocks the call, and the other entries
// consume nothing; a probe that passes lets the others consume.
func TestProbeKeepsAllOrNothing(t *testing.T) {
	l := mustNew(t, qps(1, time.Hour))
	if d, _ := check(l, t0, one("a", 1), probe("b", 2)); d.Allowed || d.Block.Entry != 1 {
		t.Fatalf("probe of 2 on a bucket of 1 did not block the call: %+v", d)
	}
	if d, _ := check(l, t0, one("a", 1), probe("b", 1)); !d.Allowed {
		t.Fatalf("a's token was spent by a blocked call: %+v", d)
	}
	if d, _ := check(l, t0, probe("a", 1)); d.Allowed {
		t.Fatal("a's token not taken by the call allowed")
	}
	if d, _ := check(l, t0, one("b", 1)); !d.Allowed {
		t.Fatal("b's probe consumed")
	}
}

func TestProbePassedToRemote(t *testing.T) {
	var got []RemoteOp
	rem := remoteFunc(func(ops []RemoteOp, res []RemoteResult) error {
		got = append(got, ops...)
		for i := range res {
			res[i].Allowed = true
		}
		return nil
	})
	r := qps(1, time.Second)
	r.Cluster = true
	l, err := New([]Rule{r}, Options{Remote: rem})
	if err != nil {
		t.Fatal(err)
	}
	check(l, t0, probe("v", 1))
	if len(got) != 1 || !got[0].Probe || got[0].Release {
		t.Fatalf("remote ops %+v, want one probe", got)
	}
}

type remoteFunc func(ops []RemoteOp, res []RemoteResult) error

func (f remoteFunc) Eval(_ context.Context, ops []RemoteOp, res []RemoteResult) error {
	return f(ops, res)
}
