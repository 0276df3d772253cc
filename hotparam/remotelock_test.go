package hotparam

import (
	"context"
	"testing"
	"time"
)

// slowRemote is a Remote whose Eval reports that it started, then waits to be let go and allows
// everything. It is safe for concurrent use.
type slowRemote struct {
	entered chan struct{}
	proceed chan struct{}
}

var _ Remote = (*slowRemote)(nil)

func (r *slowRemote) Eval(ctx context.Context, ops []RemoteOp, res []RemoteResult) error {
	r.entered <- struct{}{}
	<-r.proceed
	return allowAll(ops, res)
}

// TestClusterHoldsNoLockAcrossRemote: while one call waits on the Remote, another call on the
// same value (so the same shard) of a local rule completes.
func TestClusterHoldsNoLockAcrossRemote(t *testing.T) {
	r := &slowRemote{entered: make(chan struct{}), proceed: make(chan struct{})}
	rules := []Rule{
		{Resource: "r", Param: "p", Count: 3, Duration: time.Second},
		{Resource: "r", Param: "q", Count: 10, Duration: time.Second, Cluster: true},
	}
	l, err := New(rules, Options{Remote: r})
	if err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan Decision, 1)
	go func() {
		e := Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"x"}}}}
		slowDone <- l.Check(context.Background(), t0, []Entry{e}, CheckOptions{}, nil)
	}()
	<-r.entered // the slow call has committed its local op and waits on the Remote

	fastDone := make(chan Decision, 1)
	go func() {
		st := make([]Status, 1)
		d := l.Check(context.Background(), t0, []Entry{one("v", 1)}, CheckOptions{}, st)
		d.Wait = time.Duration(st[0].Remaining) // carries the remaining tokens out
		fastDone <- d
	}()
	select {
	case d := <-fastDone:
		if !d.Allowed || d.Wait != 1 {
			t.Errorf("fast call %+v, want allowed with 1 token left (the slow call holds one)", d)
		}
	case <-time.After(10 * time.Second): // a guard against a hang, not a synchronisation
		close(r.proceed)
		t.Fatal("a call on the same value waited for another call's Remote round trip")
	}
	close(r.proceed)
	if d := <-slowDone; !d.Allowed {
		t.Fatalf("slow call %+v, want allowed", d)
	}
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed {
		t.Fatal("third token refused")
	}
	if d, _ := check(l, t0, one("v", 1)); d.Allowed {
		t.Fatal("fourth token given: the calls did not all count")
	}
}

// TestClusterRevertAfterOthersUsedTheValue: a call committed locally is blocked by the Remote
// after other calls used the same value in the meantime (run here from inside Eval, which holds
// no lock). What it gives back never exceeds what it took.
func TestClusterRevertAfterOthersUsedTheValue(t *testing.T) {
	type probe struct {
		at      time.Duration
		e       Entry
		allowed bool
		wait    time.Duration
	}
	tests := []struct {
		name   string
		local  Rule
		call   Entry            // its q value is blocked by the Remote
		during func(l *Limiter) // runs inside the Remote's Eval
		probes []probe          // after the blocked call
	}{
		{"reject: tokens taken meanwhile stay taken, ours come back",
			qps(2, time.Second), withQ(one("v", 1)),
			func(l *Limiter) { check(l, t0, one("v", 1)) },
			[]probe{{0, one("v", 1), true, 0}, {0, one("v", 1), false, 0}}},
		{"reject: a refund never fills the bucket above its capacity",
			qps(2, time.Second), withQ(one("v", 2)),
			func(l *Limiter) { check(l, at(2*time.Second), one("v", 1)) }, // refilled to 2, took 1
			[]probe{{2 * time.Second, one("v", 1), true, 0}, {2 * time.Second, one("v", 1), true, 0},
				{2 * time.Second, one("v", 1), false, 0}}},
		{"throttle: a slot nothing queued behind is given back",
			throttle(10, time.Second, time.Second), withQ(one("v", 1)),
			func(*Limiter) {},
			[]probe{{0, one("v", 1), true, 0}, {0, one("v", 1), true, 100 * time.Millisecond}}},
		{"throttle: a slot another request queued behind stays taken",
			throttle(10, time.Second, time.Second), withQ(one("v", 1)),
			func(l *Limiter) { check(l, t0, one("v", 1)) }, // reserved the slot at 100ms
			[]probe{{0, one("v", 1), true, 200 * time.Millisecond}}},
		{"concurrency: the lease acquired is removed",
			conc(1, time.Second), withQ(leased("v", "a", 1, false)),
			func(*Limiter) {},
			[]probe{{0, leased("v", "b", 1, false), true, 0}, {0, leased("v", "c", 1, false), false, 0}}},
		{"concurrency: a lease released meanwhile is not taken back twice",
			conc(1, time.Second), withQ(leased("v", "a", 1, false)),
			func(l *Limiter) {
				check(l, t0, leased("v", "a", 1, true))  // frees a's lease
				check(l, t0, leased("v", "b", 1, false)) // b takes the slot
			},
			[]probe{{0, leased("v", "c", 1, false), false, 0}, {0, leased("v", "b", 1, true), true, 0},
				{0, leased("v", "c", 1, false), true, 0}}},
		{"concurrency without ids: the count is right",
			conc(2, time.Second), withQ(one("v", 1)),
			func(l *Limiter) {
				check(l, t0, one("v", 1)) // 2 in flight
				check(l, t0, rel("v", 1)) // 1
				check(l, t0, one("v", 1)) // 2
			},
			[]probe{{0, one("v", 1), true, 0}, {0, one("v", 1), false, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l *Limiter
			f := &fakeRemote{eval: func(ops []RemoteOp, res []RemoteResult) error {
				tc.during(l)
				return blockValue("x")(ops, res)
			}}
			cluster := Rule{Resource: "r", Param: "q", Count: 10, Duration: time.Second, Cluster: true}
			var err error
			if l, err = New([]Rule{tc.local, cluster}, Options{Remote: f}); err != nil {
				t.Fatal(err)
			}
			if d, _ := check(l, t0, tc.call); d.Allowed || d.Block.Rule != 1 {
				t.Fatalf("call %+v, want blocked by the cluster rule", d)
			}
			for i, p := range tc.probes {
				d, _ := check(l, at(p.at), p.e)
				if d.Allowed != p.allowed || d.Wait != p.wait {
					t.Fatalf("probe %d: allowed %v wait %v, want %v %v (%+v)", i, d.Allowed, d.Wait, p.allowed, p.wait, d)
				}
			}
		})
	}
}

// withQ adds the value "x" of param q, which the tests' Remote blocks, to e.
func withQ(e Entry) Entry {
	e.Params = append(e.Params, Param{Name: "q", Values: []string{"x"}})
	return e
}

// TestFallbackLocalRevertsEarlyOps: with the Remote down, a call the local fallback blocks gives
// back what its local rules committed before the Remote call.
func TestFallbackLocalRevertsEarlyOps(t *testing.T) {
	rules := []Rule{
		{Resource: "r", Param: "p", Count: 5, Duration: time.Second},
		{Resource: "r", Param: "p", Count: 2, Duration: time.Second, Cluster: true},
	}
	f := &fakeRemote{eval: failing}
	l, err := New(rules, Options{Remote: f, Fallback: FallbackLocal})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false, false} {
		if d, _ := check(l, t0, one("v", 1)); d.Allowed != want || (!want && d.Block.Rule != 1) {
			t.Fatalf("call %d: %+v, want allowed %v (else blocked by the cluster rule)", i, d, want)
		}
	}
	f.eval = allowAll
	if d, _ := check(l, t0, one("v", 3)); !d.Allowed {
		t.Fatalf("%+v: the local rule lost tokens to calls the fallback blocked", d)
	}
	if d, _ := check(l, t0, one("v", 1)); d.Allowed || d.Block.Rule != 0 {
		t.Fatalf("%+v, want the local rule empty", d)
	}
}
