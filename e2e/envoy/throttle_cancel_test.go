package envoy

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestThrottleCancelIsSeen: a client that gives up on orders waiting their turn makes Envoy
// cancel their rate-limit calls; extauthz sees each cancel (result cancelled) and holds
// nothing more for them. The turns they were given stay taken, as in Sentinel's uniform
// queueing: the test reports what the same user's next orders see.
func TestThrottleCancelIsSeen(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var chans []<-chan outcome
	for i := range 6 { // turns at 0, 100, ..., 500ms: all within max_queueing_time
		chans = append(chans, s.send(ctx, h2, "POST", fmt.Sprintf("/orders?n=%d", i), orderHeaders("carol")...))
	}
	// The first is allowed at once; once it reached the upstream and the others wait, the
	// client goes away.
	if !s.up.Wait(10*time.Second, func(reqs []upRequest, inflight int) bool { return len(reqs)+inflight >= 1 }) {
		t.Fatal("no order reached the upstream")
	}
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
	if !eventually(10*time.Second, func() bool { return waiting() == 0 }) {
		t.Errorf("extauthz still holds %v orders after their client went away", waiting())
	}
	all := metric(t, s.svc.Get, "extauthz_decisions_total", `api="ratelimit"`, `resource="POST:/orders"`)
	if n := orderCalls(t, s, "cancelled"); n < 3 || all != 6 {
		t.Errorf("extauthz saw %v cancelled calls of %v, want one per order still waiting when its client went (3 to 5) of 6", n, all)
	}
	if n := s.envoy.Stat(t, "cluster.upstream.ratelimit.extauthz_rl.error"); n != 0 {
		t.Errorf("Envoy counted %d failed rate-limit calls, want 0: a cancel is no failure", n)
	}
	var next tally
	chans = chans[:0]
	for i := range 6 {
		chans = append(chans, s.send(context.Background(), h2, "POST", fmt.Sprintf("/orders?m=%d", i), orderHeaders("carol")...))
	}
	for _, ch := range chans {
		next.add(<-ch)
	}
	t.Logf("the same user's next 6 orders, sent at once: %v", &next)
}
