package envoy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBurstAfterStartRefusesNoStream sends 2,000 orders at once, right after Envoy is ready:
// 400 users with 5 orders each, so that each user's orders wait their turns (0 to 400ms) and
// the calls in flight to extauthz outnumber its grpc.max_concurrent_streams (1,024 per
// connection). Envoy must honour the service's limit (open another connection) rather than
// send streams the service refuses: a REFUSED_STREAM would reach ext_authz as a failed call (a
// 503) and the rate-limit filter as one it lets through unlimited.
//
// The Check and rate-limit timeouts, the retries' max_interval that Envoy takes as each try's
// timeout, and the test upstream's connect_timeout are raised to 5s (0.5s, 1s and 0.25s
// shipped) by named edits: on a loaded two-core
// machine, 2,000 requests arriving at once take Envoy and the service longer than 0.5s to get
// through, which would fail Checks by timeout whatever the streams do.
func TestBurstAfterStartRefusesNoStream(t *testing.T) {
	s := newStack(t, stackOptions{bootstrap: edited(t, envoyYAML,
		"                timeout: 0.5s\n", "                timeout: 5s\n",
		"{base_interval: 0.01s, max_interval: 0.5s}", "{base_interval: 0.01s, max_interval: 5s}",
		"              timeout: 1s\n", "              timeout: 5s\n",
		"{base_interval: 0.01s, max_interval: 1s}", "{base_interval: 0.01s, max_interval: 5s}",
		// The test upstream, a Go server on the same two cores, accepts 2,000 connections at
		// once slower than the shipped 0.25s connect_timeout on a loaded machine.
		"  - name: upstream\n    type: STRICT_DNS\n    connect_timeout: 0.25s\n",
		"  - name: upstream\n    type: STRICT_DNS\n    connect_timeout: 5s\n")})
	const users, each = 400, 5
	var ta tally
	var wg sync.WaitGroup
	start := make(chan struct{})
	for u := range users {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ta.add(<-s.send(context.Background(), h2, "POST", fmt.Sprintf("/orders?u=%d&i=%d", u, i), orderHeaders(fmt.Sprintf("burst%d", u))...))
			}()
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	st := s.envoy.Stats(t)
	t.Logf("%d orders at once after start: %v in %v", users*each, &ta, time.Since(began))
	t.Logf("envoy: %d calls to extauthz over %d connections (%d waited for one), %d reset by the service; "+
		"Check ok %d error %d, rate limit ok %d error %d; upstream connections that failed %d",
		st["cluster.extauthz.upstream_rq_total"], st["cluster.extauthz.upstream_cx_total"],
		st["cluster.extauthz.upstream_rq_pending_total"], st["cluster.extauthz.upstream_rq_rx_reset"],
		st["http.ingress.ext_authz.extauthz.ok"], st["http.ingress.ext_authz.extauthz.error"],
		st["cluster.upstream.ratelimit.extauthz_rl.ok"], st["cluster.upstream.ratelimit.extauthz_rl.error"],
		st["cluster.upstream.upstream_rq_pending_failure_eject"])
	t.Logf("envoy to extauthz: connect timeouts %d, calls failed with their connection %d, retried %d (%d over max_retries), timed out %d",
		st["cluster.extauthz.upstream_cx_connect_timeout"], st["cluster.extauthz.upstream_rq_pending_failure_eject"],
		st["cluster.extauthz.upstream_rq_retry"], st["cluster.extauthz.upstream_rq_retry_overflow"],
		st["cluster.extauthz.upstream_rq_timeout"]+st["cluster.extauthz.upstream_rq_per_try_timeout"])
	for _, k := range []string{
		"cluster.extauthz.upstream_rq_rx_reset", // REFUSED_STREAM, or any reset by the service
		"cluster.extauthz.upstream_rq_pending_overflow",
		"cluster.extauthz.upstream_rq_overflow",
		"cluster.extauthz.upstream_rq_retry_overflow",
		"cluster.upstream.ratelimit.extauthz_rl.error",
	} {
		if st[k] != 0 {
			t.Errorf("%s = %d, want 0", k, st[k])
		}
	}
	// Every order allowed by extauthz, unless a connection to it timed out opening: Envoy's
	// event loop, busy with the burst, can fire the 0.25s connect_timeout first, failing the
	// calls waiting for that connection (they are retried, but a retry may time out too).
	failed := st["http.ingress.ext_authz.extauthz.error"]
	if slow := st["cluster.extauthz.upstream_cx_connect_timeout"]; slow == 0 && failed != 0 ||
		failed > st["cluster.extauthz.upstream_rq_pending_failure_eject"] {
		t.Errorf("%d Checks failed, with %d connections to extauthz timing out (%d calls failing with them)",
			failed, slow, st["cluster.extauthz.upstream_rq_pending_failure_eject"])
	}
	if n := st["cluster.upstream.ratelimit.extauthz_rl.ok"]; n != users*each-failed {
		t.Errorf("%d rate-limit calls answered OK, want one per order past ext_authz (%d)", n, users*each-failed)
	}
	// What a client saw besides 200 is those failed Checks, and the test upstream's own cluster
	// refusing the burst: a failed connection, or its circuit breakers (Envoy's defaults, 1,024
	// requests and pending requests) overflowing with 2,000 requests at once.
	upstream := st["cluster.upstream.upstream_rq_pending_failure_eject"] + st["cluster.upstream.upstream_rq_pending_overflow"] +
		st["cluster.upstream.upstream_rq_overflow"]
	if nonOK(&ta) != int(failed+upstream) || ta.get("error") != 0 {
		t.Errorf("clients saw %v; %d failed Checks and %d requests the upstream's cluster refused explain a non-200",
			&ta, failed, upstream)
	}
}
