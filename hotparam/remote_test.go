package hotparam

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeRemote answers Eval with its func and records the ops it was given.
type fakeRemote struct {
	eval  func(ops []RemoteOp, res []RemoteResult) error
	calls [][]RemoteOp
}

var _ Remote = (*fakeRemote)(nil)

func (f *fakeRemote) Eval(ctx context.Context, ops []RemoteOp, res []RemoteResult) error {
	f.calls = append(f.calls, append([]RemoteOp(nil), ops...))
	return f.eval(ops, res)
}

// allowAll answers every op allowed with 7 remaining and a 5ms throttle wait.
func allowAll(ops []RemoteOp, res []RemoteResult) error {
	for i := range res {
		res[i] = RemoteResult{Allowed: true, Remaining: 7, ResetAfter: time.Second, Wait: 5 * time.Millisecond}
	}
	return nil
}

func blockValue(v string) func([]RemoteOp, []RemoteResult) error {
	return func(ops []RemoteOp, res []RemoteResult) error {
		for i, o := range ops {
			res[i] = RemoteResult{Allowed: o.Value != v, RetryAfter: 3 * time.Second}
		}
		return nil
	}
}

func failing([]RemoteOp, []RemoteResult) error { return errors.New("store down") }

func clusterRules() []Rule {
	local := Rule{Resource: "r", Param: "p", Count: 5, Duration: time.Second}
	shared := Rule{Resource: "r", Param: "p", Count: 10, Burst: 2, Duration: time.Second, Cluster: true,
		Items: map[string]int64{"vip": 50}}
	th := Rule{Resource: "r", Param: "q", Behavior: Throttle, Count: 5, Duration: time.Second,
		MaxQueueingTime: time.Second, Cluster: true, Shadow: true}
	return []Rule{local, shared, th}
}

func TestRemoteGetsClusterOpsOncePerCheck(t *testing.T) {
	f := &fakeRemote{eval: allowAll}
	l, err := New(clusterRules(), Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Resource: "r", Hits: 2, Params: []Param{{Name: "p", Values: []string{"vip"}}, {Name: "q", Values: []string{"x", "y"}}}}
	st := make([]Status, 1)
	d := l.Check(context.Background(), t0, []Entry{e}, CheckOptions{Deadline: at(300 * time.Millisecond)}, st)
	if !d.Allowed || d.Wait != 5*time.Millisecond {
		t.Fatalf("%+v", d)
	}
	if len(f.calls) != 1 || len(f.calls[0]) != 3 {
		t.Fatalf("calls %+v, want one call with 3 ops", f.calls)
	}
	got := f.calls[0]
	want0 := RemoteOp{RuleID: l.idOf(1), Value: "vip", Grade: QPS, Behavior: Reject, Count: 50, Burst: 2,
		Duration: time.Second, MaxWait: 0, Lease: DefaultLease, Hits: 2}
	if got[0] != want0 {
		t.Errorf("op 0 %+v, want %+v", got[0], want0)
	}
	want1 := RemoteOp{RuleID: l.idOf(2), Value: "x", Grade: QPS, Behavior: Throttle, Count: 5,
		Duration: time.Second, MaxWait: 300 * time.Millisecond, Lease: DefaultLease, Hits: 2, Shadow: true}
	if got[1] != want1 {
		t.Errorf("op 1 %+v, want %+v", got[1], want1)
	}
	if st[0].Rule != 0 || st[0].Remaining != 3 {
		t.Errorf("status %+v, want the local rule with 3 left (the Remote said 7)", st[0])
	}
	if s := l.Stats(); s[0].Tracked != 1 || s[1].Tracked != 0 || s[2].Tracked != 0 {
		t.Errorf("tracked %+v, want local state for the local rule only", s)
	}
}

func TestRemoteBlockUndoesLocalCommit(t *testing.T) {
	f := &fakeRemote{eval: blockValue("v")}
	l, err := New(clusterRules(), Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		d, st := check(l, t0, one("v", 5))
		if d.Allowed || d.Block.Rule != 1 || d.Block.Value != "v" || d.Block.RetryAfter != 3*time.Second {
			t.Fatalf("%+v, want blocked by the cluster rule", d)
		}
		if st[0].Rule != 1 || st[0].RetryAfter != 3*time.Second {
			t.Fatalf("status %+v, want the cluster rule's", st[0])
		}
	}
	f.eval = allowAll
	if d, _ := check(l, t0, one("v", 5)); !d.Allowed {
		t.Fatalf("the local rule lost tokens to calls the Remote blocked: %+v", d)
	}
	if d, _ := check(l, t0, one("w", 1)); !d.Allowed {
		t.Fatal("w blocked")
	}
	calls := len(f.calls)
	// the local rule blocks first: the Remote is not asked.
	if d, _ := check(l, t0, one("v", 1)); d.Allowed || d.Block.Rule != 0 {
		t.Fatalf("%+v, want blocked by the local rule", d)
	}
	if len(f.calls) != calls {
		t.Fatal("the Remote was asked for a call blocked locally")
	}
}

func TestRemoteShadowBlockDoesNotBlock(t *testing.T) {
	f := &fakeRemote{eval: blockValue("x")}
	l, err := New(clusterRules(), Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Resource: "r", Params: []Param{{Name: "q", Values: []string{"x"}}}}
	d, _ := check(l, t0, e)
	if !d.Allowed || !d.ShadowBlocked || d.Shadow.Rule != 2 || d.Shadow.Reason != ReasonThrottle {
		t.Fatalf("%+v, want allowed with rule 2 shadow-blocked", d)
	}
}

func TestRemoteFailureFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback Fallback
		replicas int
		passes   int // requests of 1 hit for value v that pass at one instant
	}{
		{"allow", FallbackAllow, 1, 5}, // the local rule (5) still applies
		{"deny", FallbackDeny, 1, 0},
		{"local", FallbackLocal, 1, 5},             // min(local 5, cluster 10+2)
		{"local per replica", FallbackLocal, 4, 3}, // (10+2)/4: 4 replicas admit 12, the rule's capacity
	} {
		f := &fakeRemote{eval: failing}
		l, err := New(clusterRules(), Options{Remote: f, Fallback: tc.fallback, Replicas: tc.replicas})
		if err != nil {
			t.Fatal(err)
		}
		passes := 0
		for range 20 {
			d, _ := check(l, t0, one("v", 1))
			if d.Allowed {
				passes++
				continue
			}
			if tc.fallback == FallbackDeny && (d.Block.Rule != 1 || d.Block.Reason != ReasonQPS) {
				t.Errorf("%s: %+v, want blocked by the cluster rule", tc.name, d)
			}
		}
		if passes != tc.passes {
			t.Errorf("%s: %d passed, want %d", tc.name, passes, tc.passes)
		}
		if tc.fallback == FallbackDeny {
			// nothing local was consumed by the denied calls
			f.eval = allowAll
			if d, _ := check(l, t0, one("v", 5)); !d.Allowed {
				t.Errorf("%s: local tokens spent by denied calls", tc.name)
			}
		}
	}
}

func TestRemoteFallbackLocalAppliesReleaseOnce(t *testing.T) {
	rules := []Rule{
		{Resource: "r", Param: "p", Grade: Concurrency, Count: 2},
		{Resource: "r", Param: "p", Grade: Concurrency, Count: 2, Cluster: true},
	}
	f := &fakeRemote{eval: allowAll}
	l, err := New(rules, Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	check(l, t0, one("v", 1))
	check(l, t0, one("v", 1)) // local: 2 in flight
	f.eval = failing
	check(l, t0, rel("v", 1)) // first pass applies the local release; the fallback pass must not
	if d, _ := check(l, t0, one("v", 1)); !d.Allowed {
		t.Fatal("the release was lost")
	}
	f.eval = allowAll
	if d, _ := check(l, t0, one("v", 1)); d.Allowed {
		t.Fatal("the release was applied twice")
	}
}

func TestNilRemoteKeepsClusterRulesLocal(t *testing.T) {
	l, err := New(clusterRules()[1:2], Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	passes := 0
	for range 20 {
		if d, _ := check(l, t0, one("v", 1)); d.Allowed {
			passes++
		}
	}
	if passes != 12 {
		t.Fatalf("%d passed, want the full count 10 + burst 2", passes)
	}
}

func TestRuleIDStableAcrossReload(t *testing.T) {
	l, err := New(clusterRules(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules := clusterRules()
	rules[1].Count = 99
	l2, err := l.Reload([]Rule{rules[2], rules[1]}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.idOf(1) != l.idOf(1) || l2.idOf(0) != l.idOf(2) {
		t.Fatalf("ids changed: %q %q vs %q %q", l2.idOf(0), l2.idOf(1), l.idOf(2), l.idOf(1))
	}
}

func TestRemoteOpCarriesLeaseID(t *testing.T) {
	rules := []Rule{
		{Resource: "r", Param: "p", Grade: Concurrency, Count: 2, Lease: time.Second, Cluster: true},
		{Resource: "r", Param: "p", Count: 5, Duration: time.Second, Cluster: true},
	}
	f := &fakeRemote{eval: allowAll}
	l, err := New(rules, Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	check(l, t0, leased("v", "req-1", 1, false))
	check(l, t0, leased("v", "req-1", 1, true))
	check(l, t0, one("v", 1))
	tests := []struct {
		call, op int
		want     RemoteOp
	}{
		{0, 0, RemoteOp{RuleID: l.idOf(0), Value: "v", Grade: Concurrency, Count: 2, Lease: time.Second, Hits: 1, LeaseID: "req-1"}},
		{0, 1, RemoteOp{RuleID: l.idOf(1), Value: "v", Count: 5, Duration: time.Second, Lease: DefaultLease, Hits: 1}}, // qps: no lease id
		{1, 0, RemoteOp{RuleID: l.idOf(0), Value: "v", Grade: Concurrency, Count: 2, Lease: time.Second, Hits: 1, Release: true, LeaseID: "req-1"}},
		{2, 0, RemoteOp{RuleID: l.idOf(0), Value: "v", Grade: Concurrency, Count: 2, Lease: time.Second, Hits: 1}},
	}
	if len(f.calls) != 3 || len(f.calls[1]) != 1 {
		t.Fatalf("calls %+v, want 3, the release's with the concurrency op only", f.calls)
	}
	for _, tc := range tests {
		if got := f.calls[tc.call][tc.op]; got != tc.want {
			t.Errorf("call %d op %d: %+v, want %+v", tc.call, tc.op, got, tc.want)
		}
	}
}
