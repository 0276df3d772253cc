package envoy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// TestThrottleCancelGivesTheTurnsBack: a client that gives up on orders waiting their turn makes
// Envoy cancel their rate-limit calls; extauthz sees each cancel (result cancelled), holds
// nothing more for them, and gives their turns back. The same user's next order, sent while the
// abandoned turns (up to 600ms after the first) would still be ahead, is admitted at once, and
// the ones after it come at the rule's pace (100ms apart), as if the abandoned turns had never
// been taken.
func TestThrottleCancelGivesTheTurnsBack(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var chans []<-chan outcome
	start := time.Now()
	for i := range 6 { // turns at 0, 100, ..., 500ms: all within max_queueing_time
		chans = append(chans, s.send(ctx, h2, "POST", fmt.Sprintf("/orders?n=%d", i), orderHeaders("carol")...))
	}
	// The first is allowed at once; once it reached the upstream and the others wait, the
	// client goes away.
	if !s.up.Wait(10*time.Second, func(reqs []upRequest, inflight int) bool { return len(reqs)+inflight >= 1 }) {
		t.Fatal("no order reached the upstream")
	}
	first := time.Now() // the first order was let through by now: its turn is no later
	waiting := func() float64 { return metric(t, s.svc.Get, "extauthz_queue_waiting") }
	if !eventually(10*time.Second, func() bool { return waiting() >= 3 }) {
		t.Fatalf("%v orders wait their turn, want most of the 5 after the first", waiting())
	}
	cancel()
	var ta tally
	for _, ch := range chans {
		ta.add(<-ch)
	}
	t.Logf("6 orders at once, the client gone while they waited: %v", &ta)
	// a held call gives its turns back before it stops counting as waiting
	if !eventually(10*time.Second, func() bool { return waiting() == 0 }) {
		t.Fatalf("extauthz still holds %v orders after their client went away", waiting())
	}
	all := metric(t, s.svc.Get, "extauthz_decisions_total", `api="ratelimit"`, `resource="POST:/orders"`)
	cancelled := orderCalls(t, s, "cancelled")
	if cancelled < 3 || all != 6 {
		t.Fatalf("extauthz saw %v cancelled calls of %v, want one per order still waiting when its client went (3 to 5) of 6", cancelled, all)
	}
	if n := s.envoy.Stat(t, "cluster.upstream.ratelimit.extauthz_rl.error"); n != 0 {
		t.Errorf("Envoy counted %d failed rate-limit calls, want 0: a cancel is no failure", n)
	}

	// The orders let through took the first turns; the next free one is right after them.
	// Without the give-back it would be 600ms after the first turn, after the abandoned ones.
	passed := time.Duration(6-cancelled) * 100 * time.Millisecond
	time.Sleep(time.Until(first.Add(passed)))
	late := time.Since(start)
	if late >= 550*time.Millisecond {
		t.Fatalf("the cancels were seen %v after the first order: too late to tell a turn given back from one run out (600ms)", late)
	}
	waits := metric(t, s.svc.Get, "extauthz_queue_wait_seconds_count")
	next := time.Now()
	if a := s.do(h2, "POST", "/orders?m=0", orderHeaders("carol")...); a.status != http.StatusOK {
		t.Fatalf("the next order, %v after the first: %d %s, want 200", late, a.status, a.body)
	}
	if n := metric(t, s.svc.Get, "extauthz_queue_wait_seconds_count") - waits; n != 0 {
		t.Errorf("the next order, %v after the first, was held: the abandoned turns (to 600ms) stayed taken", late)
	}
	// five more at once: every one admitted, at the pace (the k-th answered no sooner than
	// (k+1)*100ms after the order before them)
	answered := make(chan time.Duration, 5)
	var more tally
	for i := range 5 {
		ch := s.send(context.Background(), h2, "POST", fmt.Sprintf("/orders?m=%d", i+1), orderHeaders("carol")...)
		go func() {
			o := <-ch
			more.add(o)
			answered <- time.Since(next)
		}()
	}
	var at []time.Duration
	for range 5 {
		at = append(at, <-answered)
	}
	slices.Sort(at)
	t.Logf("the next order %v after the first; the 5 after it answered %v later: %v", late, at, &more)
	if more.get("200") != 5 {
		t.Errorf("5 orders after the next one: %v, want all admitted in their turns (within 500ms)", &more)
	}
	for k, d := range at {
		if want := time.Duration(k+1) * 100 * time.Millisecond; d < want {
			t.Errorf("order %d after the next one answered %v after it, want no sooner than %v: faster than the rule", k+1, d, want)
		}
	}
	if n := metric(t, s.svc.Get, "extauthz_queue_wait_seconds_count") - waits; n != 5 {
		t.Errorf("%v of the 5 orders after the next one were held, want 5", n)
	}
}

// TestClusterThrottleCancelGivesTheTurnsBack: the orders rule as a cluster rule (4 a second per
// user, so 250ms apart, queueing up to 900ms) on two replicas and one Redis. A client that
// abandons its queued orders, spread by Envoy over both replicas, gets their turns back in
// Redis: the next order, through either replica, is admitted at once while the abandoned turns
// (to 1s) would still be ahead, and the ones after it come at the rule's pace.
func TestClusterThrottleCancelGivesTheTurnsBack(t *testing.T) {
	redis := redistest.Start(t)
	s := newStack(t, stackOptions{
		rules: edited(t, rulesYAML, "    count: 10\n    duration: 1s\n    behavior: throttle\n    max_queueing_time: 500ms\n",
			"    count: 4\n    duration: 1s\n    behavior: throttle\n    max_queueing_time: 900ms\n    cluster: true\n"),
		env:      []string{"EXTAUTHZ_STORE_REDIS_ADDRS=" + redis.Addr(), "EXTAUTHZ_STORE_REDIS_TIMEOUT=1s"},
		replicas: 2,
	})
	sum := func(name string, labels ...string) float64 {
		n := 0.0
		for _, v := range perReplica(t, s, name, labels...) {
			n += v
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	var chans []<-chan outcome
	start := time.Now()
	for i := range 4 { // turns at 0, 250, 500 and 750ms
		c := h1
		if i%2 == 1 {
			c = h2
		}
		chans = append(chans, s.send(ctx, c, "POST", fmt.Sprintf("/orders?n=%d", i), orderHeaders("erin")...))
	}
	if !s.up.Wait(10*time.Second, func(reqs []upRequest, inflight int) bool { return len(reqs)+inflight >= 1 }) {
		t.Fatal("no order reached the upstream")
	}
	first := time.Now() // the first order was let through by now: its turn is no later
	if !eventually(10*time.Second, func() bool { return sum("extauthz_queue_waiting") >= 2 }) {
		t.Fatal("the orders after the first were not held")
	}
	cancel()
	var ta tally
	for _, ch := range chans {
		ta.add(<-ch)
	}
	var cancelled float64
	if !eventually(10*time.Second, func() bool {
		cancelled = sum("extauthz_decisions_total", `resource="POST:/orders"`, `result="cancelled"`)
		return sum("extauthz_queue_waiting") == 0 && cancelled >= 2
	}) {
		t.Fatalf("extauthz did not see the held orders cancelled: %v", &ta)
	}
	served := perReplica(t, s, "extauthz_decisions_total", `api="ratelimit"`, `resource="POST:/orders"`)
	t.Logf("4 orders at once over the replicas (%v calls each), the client gone while they waited: %v", served, &ta)
	passed := time.Duration(4-cancelled) * 250 * time.Millisecond
	time.Sleep(time.Until(first.Add(passed)))
	late := time.Since(start)
	if late >= 900*time.Millisecond {
		t.Fatalf("the cancels were seen %v after the first order: too late to tell turns given back from turns run out (1s)", late)
	}
	held := sum("extauthz_queue_wait_seconds_count")
	next := time.Now()
	if a := s.do(h2, "POST", "/orders?m=0", orderHeaders("erin")...); a.status != http.StatusOK {
		t.Fatalf("the next order, %v after the first: %d %s, want 200", late, a.status, a.body)
	}
	if n := sum("extauthz_queue_wait_seconds_count") - held; n != 0 {
		t.Errorf("the next order, %v after the first, was held: the abandoned turns (to 1s) stayed taken in Redis", late)
	}
	answered := make(chan time.Duration, 3)
	var more tally
	for i := range 3 {
		c := h1
		if i%2 == 1 {
			c = h2
		}
		ch := s.send(context.Background(), c, "POST", fmt.Sprintf("/orders?m=%d", i+1), orderHeaders("erin")...)
		go func() {
			more.add(<-ch)
			answered <- time.Since(next)
		}()
	}
	var at []time.Duration
	for range 3 {
		at = append(at, <-answered)
	}
	slices.Sort(at)
	t.Logf("the next order %v after the first; the 3 after it answered %v later: %v", late, at, &more)
	if more.get("200") != 3 {
		t.Errorf("3 orders after the next one: %v, want all admitted in their turns (within 900ms)", &more)
	}
	for k, d := range at {
		if want := time.Duration(k+1) * 250 * time.Millisecond; d < want {
			t.Errorf("order %d after the next one answered %v after it, want no sooner than %v: faster than the rule", k+1, d, want)
		}
	}
}
