package envoy

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The orders route of envoy.yaml: a throttle rule (10 a second per user, so 100ms apart, and
// max_queueing_time 500ms in rules.yaml) on the rate-limit path, where the service holds the
// answer until the request's turn.

func orderHeaders(user string) []string {
	return []string{"x-origin", "web", "x-user-id", user}
}

// orderCalls is how many ShouldRateLimit calls on orders extauthz has answered with result.
func orderCalls(t *testing.T, s *stack, result string) float64 {
	return metric(t, s.svc.Get, "extauthz_decisions_total", `api="ratelimit"`, `resource="POST:/orders"`, `result="`+result+`"`)
}

// TestThrottleWaitCutToEnvoysTimeout runs the rate-limit filter with a 250ms timeout (1s
// shipped), shorter than the rule's max_queueing_time: Envoy sends it as the call's gRPC
// deadline, and the service queues no request whose turn comes after it. Of 8 orders of one
// user sent at once, the turns at 0, 100 and 200ms are held and allowed; the others are
// refused at once with 429, taking no turn. No call reaches Envoy's timeout, so
// none is let through by the filter failing open.
func TestThrottleWaitCutToEnvoysTimeout(t *testing.T) {
	s := newStack(t, stackOptions{bootstrap: edited(t, envoyYAML,
		"              timeout: 1s\n", "              timeout: 0.25s\n")})
	var ta tally
	var chans []<-chan outcome
	start := time.Now()
	for i := range 8 {
		chans = append(chans, s.send(context.Background(), h2, "POST", fmt.Sprintf("/orders?n=%d", i), orderHeaders("alice")...))
	}
	for _, ch := range chans {
		ta.add(<-ch)
	}
	took := time.Since(start)
	t.Logf("8 orders at once, rate-limit timeout 250ms: %v in %v", &ta, took)
	// Sent together, 3 get turns within the deadline (0, 100, 200ms); the later ones arrive
	// the client's spread later, which can let one more in on a slow machine.
	if ta.get("200") < 3 || ta.get("429") < 1 || ta.get("200")+ta.get("429") != 8 {
		t.Errorf("8 orders at once: %v, want 3 (or a few more) allowed in their turns and the rest refused", &ta)
	}
	st := s.envoy.Stats(t)
	if n := st["cluster.upstream.ratelimit.extauthz_rl.error"]; n != 0 {
		t.Errorf("%d rate-limit calls failed (Envoy's timeout), want 0: the filter let them through", n)
	}
	if n := st["cluster.upstream.ratelimit.extauthz_rl.over_limit"]; n != int64(ta.get("429")) {
		t.Errorf("Envoy counted %d over-limit answers, want one per refused order (%d)", n, ta.get("429"))
	}
	// The refused orders took no turn: the next one comes at 300ms, within the timeout.
	if a := s.do(h1, "POST", "/orders?n=next", orderHeaders("alice")...); a.status != http.StatusOK {
		t.Errorf("the order after the burst: %d %s, want 200: a refused order kept its turn", a.status, a.body)
	}
}
