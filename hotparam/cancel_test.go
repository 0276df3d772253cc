package hotparam

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

const ms = time.Millisecond

// hold checks one request of value v at instant in, expecting it held for wait, and returns
// its Hold.
func hold(t *testing.T, l *Limiter, in time.Duration, v string, wait time.Duration) *Hold {
	t.Helper()
	d, _ := check(l, at(in), one(v, 1))
	if !d.Allowed || d.Wait != wait {
		t.Fatalf("at %v, %q: allowed %v wait %v, want held %v", in, v, d.Allowed, d.Wait, wait)
	}
	if (d.Hold != nil) != (wait > 0) {
		t.Fatalf("at %v, %q: hold %v for a wait of %v, want one exactly for a held call", in, v, d.Hold, wait)
	}
	return d.Hold
}

func unhold(t *testing.T, l *Limiter, in time.Duration, h *Hold, want int) {
	t.Helper()
	if got := l.Unhold(context.Background(), at(in), h); got != want {
		t.Fatalf("Unhold at %v gave back %d turns, want %d", in, got, want)
	}
}

// TestUnholdGivesBackTheLatestTurn: 10 a second (100ms apart). Requests at 0 get turns 0, 100
// and 200ms; the last one given up at 50ms is undone, and the next request takes its turn
// (200ms) as if it had never been taken; the spacing after it is exact.
func TestUnholdGivesBackTheLatestTurn(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	hold(t, l, 0, "v", 0)
	hold(t, l, 0, "v", 100*ms)
	c := hold(t, l, 0, "v", 200*ms)
	unhold(t, l, 50*ms, c, 1)
	hold(t, l, 50*ms, "v", 150*ms) // turn 200ms, the one given back
	hold(t, l, 50*ms, "v", 250*ms) // 300ms: exactly one spacing after it
	unhold(t, l, 60*ms, c, 0)      // a Hold gives back once
}

// TestUnholdBehindLaterTurnsGivesNothing: the turn at 100ms has the one at 200ms queued behind
// it; giving it up moves no one: the next request still gets 300ms.
func TestUnholdBehindLaterTurnsGivesNothing(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	hold(t, l, 0, "v", 0)
	b := hold(t, l, 0, "v", 100*ms)
	hold(t, l, 0, "v", 200*ms) // stays, and keeps its turn
	unhold(t, l, 50*ms, b, 0)
	hold(t, l, 50*ms, "v", 250*ms)
}

// TestUnholdQueueGivenBackInAnyOrder: a client abandons its queue of five turns (100 to
// 500ms) in every order; once the last of them is given up, the queue is gone: the next
// request gets 100ms, one spacing after the turn that passed at 0, never sooner.
func TestUnholdQueueGivenBackInAnyOrder(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 3, 0, 4, 2}} {
		l := mustNew(t, throttle(10, time.Second, time.Second))
		hold(t, l, 0, "v", 0)
		var hs []*Hold
		for k := 1; k <= 5; k++ {
			hs = append(hs, hold(t, l, 0, "v", time.Duration(k)*100*ms))
		}
		given := 0
		for _, k := range order {
			given += l.Unhold(context.Background(), at(30*ms), hs[k])
		}
		if given != 5 {
			t.Fatalf("order %v: %d turns given back, want 5", order, given)
		}
		hold(t, l, 30*ms, "v", 70*ms) // turn 100ms
		hold(t, l, 30*ms, "v", 170*ms)
	}
}

// TestUnholdPartOfAQueue: of turns 100, 200 and 300ms the last two are given up (the middle
// one first): both come back; the one at 100ms, still held, keeps its turn.
func TestUnholdPartOfAQueue(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	hold(t, l, 0, "v", 0)
	hold(t, l, 0, "v", 100*ms)
	c := hold(t, l, 0, "v", 200*ms)
	d := hold(t, l, 0, "v", 300*ms)
	unhold(t, l, 10*ms, c, 0)
	unhold(t, l, 20*ms, d, 2)
	hold(t, l, 20*ms, "v", 180*ms) // turn 200ms
}

// TestUnholdNeverSoonerThanTheSpacing: the turn given back is the value's next; a request
// after it comes one spacing after the last turn that stays, even when the turn given back
// was due already (a cancel that raced the end of the wait).
func TestUnholdNeverSoonerThanTheSpacing(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	hold(t, l, 0, "v", 0)
	b := hold(t, l, 0, "v", 100*ms)
	unhold(t, l, 30*ms, b, 1)
	c := hold(t, l, 30*ms, "v", 70*ms) // 100ms: one spacing after the turn at 0
	unhold(t, l, 150*ms, c, 1)         // given up after its turn (100ms) had come
	hold(t, l, 150*ms, "v", 0)         // 150ms: more than a spacing after 0
	hold(t, l, 150*ms, "v", 100*ms)
}

// TestUnholdCallOfSeveralTurns: one call takes turns on two values and twice on a third; all
// are given back, the third's last first.
func TestUnholdCallOfSeveralTurns(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	for _, v := range []string{"a", "b", "c"} {
		hold(t, l, 0, v, 0)
	}
	e := Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"a", "b", "c", "c"}}}}
	d, _ := check(l, t0, e)
	if !d.Allowed || d.Wait != 200*ms || d.Hold == nil {
		t.Fatalf("call of 4 values: %+v, want held 200ms", d)
	}
	unhold(t, l, 10*ms, d.Hold, 4)
	for _, v := range []string{"a", "b", "c"} {
		hold(t, l, 10*ms, v, 90*ms)
	}
}

// TestUnholdEvictedValue: a value evicted during the wait took its state with it (parked):
// nothing is given back and nothing fails; the parked turn stays taken.
func TestUnholdEvictedValue(t *testing.T) {
	r := throttle(10, time.Second, time.Second)
	r.Capacity = 1
	l := mustNew(t, r)
	hold(t, l, 0, "v", 0)
	h := hold(t, l, 0, "v", 100*ms)
	hold(t, l, 0, "w", 0) // evicts v
	unhold(t, l, 10*ms, h, 0)
	hold(t, l, 10*ms, "v", 190*ms) // v's schedule, parked at 200ms, comes back
}

// TestUnholdGivenUpBounded: a shard remembers at most maxGivenUp turns given up (the others
// stay taken), and forgets them once their turns are past.
func TestUnholdGivenUpBounded(t *testing.T) {
	l := mustNew(t, throttle(1000, time.Second, time.Hour))
	hold(t, l, 0, "v", 0)
	var hs []*Hold
	for k := 1; k <= 2*maxGivenUp+1; k++ {
		hs = append(hs, hold(t, l, 0, "v", time.Duration(k)*ms))
	}
	// each has a later one behind it: the second half is remembered, the first finds no room
	for _, h := range append(slices.Clone(hs[maxGivenUp:2*maxGivenUp]), hs[:maxGivenUp]...) {
		unhold(t, l, 0, h, 0)
	}
	st := l.compiled[0].store
	sh := &st.current()[st.hash("v")&st.mask]
	if n := len(sh.turns); n != maxGivenUp {
		t.Fatalf("%d turns given up remembered, want %d", n, maxGivenUp)
	}
	unhold(t, l, 0, hs[2*maxGivenUp], 1+maxGivenUp) // the second half comes back with it
	if n := len(sh.turns); n != 0 {
		t.Fatalf("%d turns given up remembered after they came back, want 0", n)
	}
	h := hold(t, l, 0, "v", time.Duration(maxGivenUp+1)*ms) // the first half stays taken
	hold(t, l, 0, "v", time.Duration(maxGivenUp+2)*ms)
	unhold(t, l, 0, h, 0)
	if n := len(sh.turns); n != 1 {
		t.Fatalf("%d turns given up remembered, want 1", n)
	}
	// forgotten at the shard's next Unhold once past
	hold(t, l, time.Second, "v", 0)
	unhold(t, l, time.Second, hold(t, l, time.Second, "v", ms), 1)
	if n := len(sh.turns); n != 0 {
		t.Fatalf("%d turns given up remembered after their time, want 0", n)
	}
}

// TestUnholdAllocatesOnlyForHeldCalls: a call that is not held pays nothing for Hold.
func TestUnholdAllocatesOnlyForHeldCalls(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	es := []Entry{one("v", 1)}
	k := 0
	if n := testing.AllocsPerRun(100, func() {
		k++
		if d := l.Check(context.Background(), at(time.Duration(k)*time.Second), es, CheckOptions{}, nil); d.Hold != nil {
			t.Fatal("a call not held has a Hold")
		}
	}); n != 0 {
		t.Errorf("%v allocations per call not held, want 0", n)
	}
}

// TestUnholdRaceKeepsSpacing: goroutines take turns on one value and give up a third of them at
// random moments; under -race, the turns of the requests let through stay at least one
// spacing (1ms) apart, and once every queued request is given up or through, the next
// request waits only for what stayed taken.
func TestUnholdRaceKeepsSpacing(t *testing.T) {
	l := mustNew(t, throttle(1000, time.Second, time.Hour))
	var clock sync.Mutex
	now := time.Duration(0)
	tick := func() time.Duration {
		clock.Lock()
		defer clock.Unlock()
		now += 10 * time.Microsecond
		return now
	}
	var mu sync.Mutex
	var passed []time.Duration // turns of the requests let through
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				in := tick()
				d := l.Check(context.Background(), at(in), []Entry{one("v", 1)}, CheckOptions{}, nil)
				if !d.Allowed {
					t.Errorf("refused with an hour of queueing: %+v", d)
					return
				}
				if d.Hold != nil && rng.IntN(3) == 0 {
					l.Unhold(context.Background(), at(tick()), d.Hold)
					continue
				}
				mu.Lock()
				passed = append(passed, in+d.Wait)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(passed)
	for i := 1; i < len(passed); i++ {
		if gap := passed[i] - passed[i-1]; gap < ms {
			t.Fatalf("turns %v and %v let through %v apart, want at least 1ms", passed[i-1], passed[i], gap)
		}
	}
	if len(passed) < 1000 {
		t.Fatalf("%d requests let through, want most of 2400", len(passed))
	}
	kept := int((passed[len(passed)-1]-passed[0])/ms) + 1 - len(passed)
	t.Logf("%d of 2400 requests let through, turns %v to %v: %d turns given up stayed taken",
		len(passed), passed[0], passed[len(passed)-1], kept)
}

// TestUnholdAcrossReload: a call held before a reload that keeps its rule gives its turn back
// to the state the new rules share. Once a call under a changed count has counted the schedule
// in the new units, the turn taken before stays taken.
func TestUnholdAcrossReload(t *testing.T) {
	l := mustNew(t, throttle(10, time.Second, time.Second))
	hold(t, l, 0, "v", 0)
	b := hold(t, l, 0, "v", 100*ms)
	l2, err := l.Reload([]Rule{throttle(10, time.Second, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	unhold(t, l, 10*ms, b, 1)
	hold(t, l2, 10*ms, "v", 90*ms) // b's turn, under the new rules
	c := hold(t, l2, 10*ms, "v", 190*ms)
	l3, err := l2.Reload([]Rule{throttle(20, time.Second, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	probe := one("v", 1)
	probe.Probe = true
	if d, _ := check(l3, at(20*ms), probe); d.Allowed {
		t.Fatalf("a probe while turns are queued: %+v, want refused", d)
	}
	unhold(t, l2, 30*ms, c, 0)
	hold(t, l3, 30*ms, "v", 270*ms) // 300ms: c's turn stayed taken
}
