package envoy

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// clusterStack is two extauthz replicas on one real Redis as the two endpoints of Envoy's
// extauthz cluster, with the per-item rule (30 an hour, so that nothing refills during the
// test) and the per-user concurrency rule of rules.yaml marked cluster: true. Redis gets a 1s
// deadline (5ms by default) so that a slow machine makes no call fall back to a replica's
// own state.
func clusterStack(t *testing.T) *stack {
	t.Helper()
	redis := redistest.Start(t)
	return newStack(t, stackOptions{
		rules: edited(t, rulesYAML,
			"    count: 5\n    duration: 1s\n    burst: 2\n", "    count: 30\n    duration: 1h\n    cluster: true\n",
			"    count: 2\n    lease: 60s\n", "    count: 2\n    lease: 60s\n    cluster: true\n"),
		env:      []string{"EXTAUTHZ_STORE_REDIS_ADDRS=" + redis.Addr(), "EXTAUTHZ_STORE_REDIS_TIMEOUT=1s"},
		replicas: 2,
	})
}

// perReplica is a metric on each replica.
func perReplica(t *testing.T, s *stack, name string, labels ...string) []float64 {
	var out []float64
	for _, p := range s.svcs {
		out = append(out, metric(t, p.Get, name, labels...))
	}
	return out
}

// TestClusterRuleExactThroughEnvoy: 100 requests at once for one item, spread by Envoy over
// both replicas, admit exactly the rule's 30; then a user's two download slots, held through
// either replica, refuse a third on both, and are free again once released.
func TestClusterRuleExactThroughEnvoy(t *testing.T) {
	s := clusterStack(t)
	var ta tally
	var chans []<-chan outcome
	for i := range 100 {
		c := h1
		if i%2 == 1 {
			c = h2
		}
		chans = append(chans, s.send(context.Background(), c, "GET", "/items?item_id=shared", "x-origin", "web"))
	}
	for _, ch := range chans {
		ta.add(<-ch)
	}
	calls := perReplica(t, s, "extauthz_decisions_total", `api="ratelimit"`, `resource="GET:/items"`)
	t.Logf("100 requests for one item over 2 replicas: %v; rate-limit calls per replica %v", &ta, calls)
	if ta.get("200") != 30 || ta.get("429") != 70 {
		t.Errorf("100 requests for one item: %v, want exactly 30 allowed and 70 refused", &ta)
	}
	for i, n := range calls {
		if n == 0 {
			t.Errorf("replica %d answered no rate-limit call: Envoy did not spread the load", i)
		}
	}

	held, cancel := holdAll(t, s, h2, "/downloads/cluster/", []string{"dana"})
	for i := range 4 {
		c := h1
		if i%2 == 1 {
			c = h2
		}
		if a := s.do(c, "GET", fmt.Sprintf("/downloads/third/%d", i), downloadHeaders("dana", 0)...); a.status != http.StatusTooManyRequests {
			t.Errorf("download %d with both slots held on the cluster: %d, want 429", i, a.status)
		}
	}
	cancel()
	for _, ch := range held {
		<-ch
	}
	// 6 acquires and 6 releases, on whichever replica Envoy sent them.
	total := func() float64 {
		var n float64
		for _, v := range perReplica(t, s, "extauthz_decisions_total", `api="ratelimit"`, `resource="GET:/downloads"`) {
			n += v
		}
		return n
	}
	if !eventually(10*time.Second, func() bool { return total() == 12 }) {
		t.Fatalf("the replicas answered %v rate-limit calls on downloads, want 12", total())
	}
	held, cancel = holdAll(t, s, h1, "/downloads/again/", []string{"dana"})
	cancel()
	for _, ch := range held {
		<-ch
	}
	if fb := perReplica(t, s, "extauthz_redis_fallbacks_total"); fb[0]+fb[1] != 0 {
		t.Errorf("calls fell back to a replica's own state: %v", fb)
	}
}
