package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// sameDecision compares two engines' decisions but for their Holds, which are each engine's own
// record of a held call's turns.
func sameDecision(a, b hotparam.Decision) bool {
	a.Hold, b.Hold = nil, nil
	return a == b
}

// unholdOf is the op that gives back the turn op took, answered in r.
func unholdOf(op hotparam.RemoteOp, r hotparam.RemoteResult) hotparam.RemoteOp {
	op.Release, op.Unhold, op.Turn = true, true, r.Turn
	return op
}

// TestUnholdTurn: a throttle turn is given back in Redis when the schedule still ends where it
// left it, and not when a turn was taken after it, nor once the rule's count changed.
func TestUnholdTurn(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "u", Value: "v", Behavior: hotparam.Throttle, Count: 3,
		Duration: time.Second, MaxWait: 2 * time.Second, Hits: 1}
	wait := func(want time.Duration) hotparam.RemoteResult {
		t.Helper()
		r := eval(t, s, op)[0]
		if !r.Allowed || r.Wait != want || r.Turn == (hotparam.Turn{}) {
			t.Fatalf("turn: %+v, want allowed, wait %v and where it ends", r, want)
		}
		return r
	}
	given := func(u hotparam.RemoteOp, want bool) {
		t.Helper()
		if r := eval(t, s, u)[0]; r.Allowed != want {
			t.Fatalf("unhold %+v: given back %v, want %v", u.Turn, r.Allowed, want)
		}
	}
	clk.set(0)
	wait(0)
	b := wait(333333334) // slots a third of a second apart, kept exactly
	c := wait(666666667)
	given(unholdOf(op, b), false) // c is queued behind it
	given(unholdOf(op, c), true)
	given(unholdOf(op, c), false) // once
	clk.set(100 * ms)
	wait(666666667 - 100*ms) // c's turn, taken again
	d := wait(time.Second - 100*ms)
	changed := op
	changed.Count = 4
	given(unholdOf(changed, d), false) // stored with another count: left as it is
	given(unholdOf(op, d), true)

	// a turn given back that was the schedule's only one leaves no state
	op.Value = "w"
	clk.set(time.Second)
	w := wait(0)
	given(unholdOf(op, w), true)
	if got := srv.CLI("EXISTS", key(DefaultPrefix, &op)); got != "0" {
		t.Errorf("the schedule of a turn given back: EXISTS got %s, want 0", got)
	}
}

// TestUnholdClusterRule: through the Limiter, a held call of a cluster throttle rule given up
// while its turn is the latest gives it back in Redis, like the memory engine; one with a turn
// behind it keeps it (in memory it comes back with the one behind; in Redis it stays taken).
func TestUnholdClusterRule(t *testing.T) {
	s, _, clk := newTestStore(t)
	rules := []hotparam.Rule{{Resource: "r", Param: "p", Behavior: hotparam.Throttle, Count: 10,
		Duration: time.Second, MaxQueueingTime: time.Second, Cluster: true}}
	remote, err := hotparam.New(rules, hotparam.Options{Remote: s})
	if err != nil {
		t.Fatal(err)
	}
	local, err := hotparam.New(rules, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := []hotparam.Entry{{Resource: "r", Params: []hotparam.Param{{Name: "p", Values: []string{"v"}}}}}
	check := func(in time.Duration, want time.Duration) [2]*hotparam.Hold {
		t.Helper()
		clk.set(in)
		var h [2]*hotparam.Hold
		for i, l := range []*hotparam.Limiter{remote, local} {
			d := l.Check(ctx, t0.Add(in), e, hotparam.CheckOptions{}, nil)
			if !d.Allowed || d.Wait != want || (d.Hold != nil) != (want > 0) {
				t.Fatalf("engine %d at %v: %+v, want held %v", i, in, d, want)
			}
			h[i] = d.Hold
		}
		return h
	}
	unhold := func(in time.Duration, h [2]*hotparam.Hold, want [2]int) {
		t.Helper()
		clk.set(in)
		for i, l := range []*hotparam.Limiter{remote, local} {
			if got := l.Unhold(ctx, t0.Add(in), h[i]); got != want[i] {
				t.Fatalf("engine %d: Unhold at %v gave back %d, want %d", i, in, got, want[i])
			}
		}
	}
	check(0, 0)
	b := check(0, 100*ms)
	c := check(0, 200*ms)
	unhold(10*ms, c, [2]int{1, 1})
	check(10*ms, 190*ms) // c's turn again, in both
	d := check(10*ms, 290*ms)
	unhold(20*ms, b, [2]int{0, 0}) // turns queued behind it
	unhold(20*ms, d, [2]int{1, 1})
	// the 200ms turn taken at 10ms is the latest now, but it is still held; the next is 300ms
	check(20*ms, 280*ms)
}

// TestUnholdDropsCachedRefusal: a turn given back through this replica drops the refusal its
// cache of blocked values kept for that value, so that the next request, which Redis now
// admits, is not refused from the cache.
func TestUnholdDropsCachedRefusal(t *testing.T) {
	s, _, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "c", Value: "v", Behavior: hotparam.Throttle, Count: 5,
		Duration: time.Second, MaxWait: 200 * ms, Hits: 1}
	clk.set(0)
	eval(t, s, op)
	b := eval(t, s, op)[0] // 200ms
	if r := eval(t, s, op)[0]; r.Allowed {
		t.Fatalf("a third turn at 400ms: %+v, want refused (max wait 200ms)", r)
	}
	if r := eval(t, s, unholdOf(op, b))[0]; !r.Allowed {
		t.Fatal("the latest turn was not given back")
	}
	hits := s.Stats().CacheHits
	if r := eval(t, s, op)[0]; !r.Allowed || r.Wait != 200*ms {
		t.Errorf("after the turn was given back: %+v, want its turn (200ms)", r)
	}
	if n := s.Stats().CacheHits - hits; n != 0 {
		t.Errorf("%d answers from the cache after the give-back, want 0", n)
	}
}
