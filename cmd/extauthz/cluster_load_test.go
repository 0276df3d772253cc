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
	const (
		perSecond = 50
		burst     = 10
		capacity  = perSecond + burst
		clients   = 10 // per replica
		runFor    = 2500 * time.Millisecond
	)
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", fmt.Sprintf(`
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: %d, burst: %d, duration: 1s, cluster: true}
`, perSecond, burst))
	procs := startReplicas(t, dir, srv.Addr(), rules, 2)
	var admitted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	stopAt := begin.Add(runFor)
	var lastEnd atomic.Int64 // ns since begin of the latest answer
	for _, p := range procs {
		c := rlsv3.NewRateLimitServiceClient(dial(t, p.GRPCAddr))
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stopAt) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := c.ShouldRateLimit(ctx, rlRequest("POST:/order", "hot"))
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
						admitted.Add(1)
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
	allowance := capacity + perSecond*elapsed.Seconds()
	got := float64(admitted.Load())
	t.Logf("admitted %v, refused %d, failed %d in %v: allowance %.1f", got, refused.Load(), failed.Load(), elapsed, allowance)
	if failed.Load() != 0 {
		t.Errorf("%d calls failed", failed.Load())
	}
	if got > allowance {
		t.Errorf("admitted %v across both replicas, over the allowance %.1f", got, allowance)
	}
	// timing only: the bucket refills while the first calls connect, and calls near the end
	// may be answered after the last counted instant
	if low := capacity + perSecond*(elapsed.Seconds()-0.5); got < low {
		t.Errorf("admitted %v, want at least %.1f (the allowance less half a second of refill)", got, low)
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
