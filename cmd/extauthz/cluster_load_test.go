package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// Two extauthz processes share one redis-server; 10 gRPC clients on each hammer one value of a
// cluster rule of N a second. The bucket admits at most capacity + N × elapsed across both
// replicas: never more, and not much less (the clients keep it empty).
func TestBinaryClusterLoadTwoReplicas(t *testing.T) {
	testClusterLoad(t, 1, 50, 10)
}

// The same with store.redis.book_ahead: the replica that takes a hot value's last token books
// the next 100ms of tokens in the same script call and gives them out itself. The bucket still
// admits exactly its allowance across both replicas, in far fewer script calls than tokens.
func TestBinaryClusterLoadBookingAhead(t *testing.T) {
	srv, procs, admitted := testClusterLoad(t, 1, 50, 10, "book_ahead: 100ms")
	scripts := srv.CommandCalls("evalsha") + srv.CommandCalls("eval")
	var booked, given float64
	for _, p := range procs {
		_, body := p.Get(t, "/metrics")
		booked += metricValue(body, `extauthz_redis_booked_tokens_total{outcome="booked"}`)
		given += metricValue(body, `extauthz_redis_booked_tokens_total{outcome="given"}`)
	}
	t.Logf("%d admitted in %d script calls; %v tokens booked, %v given out of bookings", admitted, scripts, booked, given)
	// without booking: a script call a token after the first burst, and more for the calls that
	// came as a token was due; with it, about one a booking of 5
	if booked == 0 || given == 0 || given > booked || int64(scripts)*2 > admitted {
		t.Errorf("%d admitted in %d script calls, %v tokens booked, %v given out of bookings: want bookings given out, and half as many script calls as admissions or fewer",
			admitted, scripts, booked, given)
	}
}

// A value refused before a quiet spell does not book when a burst of its calls comes back and
// takes what its bucket gained: no call was refused since the token before, and the tokens a
// short burst booked would only go back, in a script call each. Refused in that burst, it books
// with its next token.
func TestBinaryBookingAfterQuietSpell(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 10, duration: 1s, cluster: true}
`)
	p := startReplicas(t, dir, srv.Addr(), rules, 1, "book_ahead: 200ms")[0]
	c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
	call := func() bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, rlRequest("POST:/order", "hot"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}
	booked := func() float64 {
		t.Helper()
		_, body := p.Get(t, "/metrics")
		return metricValue(body, `extauthz_redis_booked_tokens_total{outcome="booked"}`)
	}
	// burst takes the bucket's ten tokens (a token comes every 100ms: the calls take far less),
	// and one call more, refused
	burst := func() {
		t.Helper()
		admitted := 0
		for range 11 {
			if call() {
				admitted++
			}
		}
		if admitted < 10 || admitted > 11 {
			t.Fatalf("a burst of 11 calls of a full bucket of 10 admitted %d", admitted)
		}
	}
	burst()
	time.Sleep(1200 * time.Millisecond) // the bucket full again
	burst()
	if n := booked(); n != 0 {
		t.Errorf("%v tokens booked by the burst after the quiet spell, want none", n)
	}
	time.Sleep(150 * time.Millisecond) // the next token is due, the value refused since the last
	if !call() {
		t.Fatal("the call after the next token was due refused")
	}
	if n := booked(); n != 2 {
		t.Errorf("%v tokens booked with the token after a refusal, want 2 (200ms at 10 a second)", n)
	}
}

// The same with 16 values asked for in turn, each over its own limit: the calls of many values
// share script calls (their lane is the whole Redis), and each value's bucket still admits
// exactly its own allowance.
func TestBinaryClusterLoadManyValues(t *testing.T) {
	testClusterLoad(t, 16, 20, 5)
}

// testClusterLoad runs two replicas on one redis-server under 10 clients each, asking for values
// values in turn of a cluster rule of perSecond a second with burst, for 2.5 s, and checks each
// value's admitted calls against its bucket's allowance. The replicas have the store.redis
// options given. It returns the Redis, the replicas and the calls admitted in all.
func testClusterLoad(t *testing.T, values, perSecond, burst int, redisOptions ...string) (*redistest.Server, []*proc, int64) {
	const (
		clients = 10 // per replica
		runFor  = 2500 * time.Millisecond
	)
	capacity := perSecond + burst
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", fmt.Sprintf(`
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: %d, burst: %d, duration: 1s, cluster: true}
`, perSecond, burst))
	procs := startReplicas(t, dir, srv.Addr(), rules, 2, redisOptions...)
	name := func(v int) string {
		if values == 1 {
			return "hot"
		}
		return "hot-" + strconv.Itoa(v)
	}
	admitted := make([]atomic.Int64, values)
	var refused, failed atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	stopAt := begin.Add(runFor)
	var lastEnd atomic.Int64 // ns since begin of the latest answer
	for pi, p := range procs {
		c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
		for ci := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := pi*clients + ci; time.Now().Before(stopAt); n++ {
					v := n % values
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := c.ShouldRateLimit(ctx, rlRequest("POST:/order", name(v)))
					cancel()
					end := int64(time.Since(begin))
					for {
						cur := lastEnd.Load()
						if end <= cur || lastEnd.CompareAndSwap(cur, end) {
							break
						}
					}
					switch {
					case err != nil:
						failed.Add(1)
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						admitted[v].Add(1)
					default:
						refused.Add(1)
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Duration(lastEnd.Load())
	allowance := float64(capacity) + float64(perSecond)*elapsed.Seconds()
	// timing only: the bucket refills while the first calls connect, and calls near the end
	// may be answered after the last counted instant
	low := float64(capacity) + float64(perSecond)*(elapsed.Seconds()-0.5)
	counts := make([]int64, values)
	for v := range admitted {
		counts[v] = admitted[v].Load()
	}
	t.Logf("admitted %v, refused %d, failed %d in %v: allowance %.1f a value", counts, refused.Load(), failed.Load(), elapsed, allowance)
	if failed.Load() != 0 {
		t.Errorf("%d calls failed", failed.Load())
	}
	for v := range admitted {
		got := float64(admitted[v].Load())
		if got > allowance {
			t.Errorf("%s: admitted %v across both replicas, over the allowance %.1f", name(v), got, allowance)
		}
		if got < low {
			t.Errorf("%s: admitted %v, want at least %.1f (the allowance less half a second of refill)", name(v), got, low)
		}
	}
	if refused.Load() == 0 {
		t.Error("no call refused: the load did not reach the limit")
	}
	// both replicas went to Redis, and did not fall back
	for i, p := range procs {
		_, body := p.Get(t, "/metrics")
		if metricValue(body, `extauthz_redis_calls_total{result="ok"}`) == 0 {
			t.Errorf("replica %d made no successful Redis call", i)
		}
		if n := metricValue(body, `extauthz_redis_fallbacks_total{policy="deny"}`); n != 0 {
			t.Errorf("replica %d fell back %v times", i, n)
		}
	}
	var all int64
	for v := range counts {
		all += counts[v]
	}
	return srv, procs, all
}

// metricValue returns the value of the sample named exactly by series (name and labels) in a
// Prometheus text exposition, or 0 when there is none.
func metricValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, series+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			return v
		}
	}
	return 0
}
