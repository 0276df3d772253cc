package redisstore

import (
	"context"
	"math/rand/v2"
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
// left it; one with a turn taken after it is remembered and given back with that one; none is
// given back once the rule's count changed.
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
	given := func(u hotparam.RemoteOp, want int64) {
		t.Helper()
		if r := eval(t, s, u)[0]; r.Allowed != (want > 0) || (want > 0 && r.Remaining != want) {
			t.Fatalf("unhold %+v: %+v, want %d turns given back", u.Turn, r, want)
		}
	}
	record := givenUpKey(DefaultPrefix, &op)
	clk.set(0)
	wait(0)
	b := wait(333333334) // slots a third of a second apart, kept exactly
	c := wait(666666667)
	given(unholdOf(op, b), 0) // c is queued behind it: remembered
	if got := srv.CLI("EXISTS", record); got != "1" {
		t.Fatalf("a turn given up behind another: EXISTS %s got %s, want 1", record, got)
	}
	given(unholdOf(op, c), 2) // c, and b with it
	if got := srv.CLI("EXISTS", record); got != "0" {
		t.Errorf("every turn given up came back: EXISTS %s got %s, want 0", record, got)
	}
	clk.set(100 * ms)
	wait(333333334 - 100*ms) // b's turn, taken again
	d := wait(666666667 - 100*ms)
	changed := op
	changed.Count = 4
	given(unholdOf(changed, d), 0) // stored with another count: left as it is
	given(unholdOf(op, d), 1)

	// a remembered turn whose end has passed is forgotten: there is nothing left to give back
	clk.set(time.Second)
	e := wait(0)
	f := wait(333333334)
	given(unholdOf(op, e), 0)
	clk.set(1500 * ms)
	given(unholdOf(op, f), 1)
	wait(0) // 1.5s, with no credit for the turns in the past

	// a turn given back that was the schedule's only one leaves no state
	op.Value = "w"
	clk.set(2 * time.Second)
	w := wait(0)
	given(unholdOf(op, w), 1)
	if got := srv.CLI("EXISTS", key(DefaultPrefix, &op)); got != "0" {
		t.Errorf("the schedule of a turn given back: EXISTS got %s, want 0", got)
	}
}

// TestUnholdClusterRule: through the Limiter, the turns of held calls of a cluster throttle rule
// given up come back in Redis as in memory: at once when the latest, else with the turns behind
// them.
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
	c2 := check(10*ms, 190*ms) // c's turn again, in both
	d := check(10*ms, 290*ms)
	unhold(20*ms, b, [2]int{0, 0}) // turns queued behind it
	unhold(20*ms, d, [2]int{1, 1})
	// the 200ms turn taken at 10ms is the latest now, but it is still held; the next is 300ms
	h := check(20*ms, 280*ms)
	unhold(30*ms, h, [2]int{1, 1})
	unhold(30*ms, c2, [2]int{2, 2}) // the 200ms turn, and b's (100ms) with it
	check(30*ms, 70*ms)
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

// TestUnholdParityRandom: seeded random throttled calls of two values (one or two hits) and
// random give-ups of the calls still held, in the same order at the same instants, get the same
// decisions from Redis and from memory, and give back the same turns.
func TestUnholdParityRandom(t *testing.T) {
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
	rng := rand.New(rand.NewPCG(19, 3))
	var held [][2]*hotparam.Hold
	in := time.Duration(0)
	checks, given := 0, 0
	for i := range 3000 {
		in += time.Duration(rng.IntN(40000)) * time.Microsecond
		now := t0.Add(in)
		clk.now = now
		if len(held) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(held))
			h := held[k]
			held = append(held[:k], held[k+1:]...)
			g, w := remote.Unhold(ctx, now, h[0]), local.Unhold(ctx, now, h[1])
			if g != w {
				t.Fatalf("step %d at %v: Redis gave back %d turns, memory %d", i, in, g, w)
			}
			given += g
			continue
		}
		v := []string{"a", "b"}[rng.IntN(2)]
		e := []hotparam.Entry{{Resource: "r", Params: []hotparam.Param{{Name: "p", Values: []string{v}}}, Hits: int64(1 + rng.IntN(2))}}
		got := remote.Check(ctx, now, e, hotparam.CheckOptions{}, nil)
		want := local.Check(ctx, now, e, hotparam.CheckOptions{}, nil)
		if !sameDecision(got, want) || (got.Hold != nil) != (want.Hold != nil) {
			t.Fatalf("step %d at %v, %s: Redis %+v, memory %+v", i, in, v, got, want)
		}
		checks++
		if got.Hold != nil && rng.IntN(2) == 0 {
			held = append(held, [2]*hotparam.Hold{got.Hold, want.Hold})
		}
	}
	if given < 100 {
		t.Fatalf("%d turns given back in %d calls, want the test to exercise it", given, checks)
	}
	t.Logf("%d calls, %d turns given back, the same in both", checks, given)
}
