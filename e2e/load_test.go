package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestLoadOneValue: 200 concurrent clients for 10 seconds on one client IP of GET:/search
// (100 a second, burst 20). The bucket allows capacity + rate × elapsed; the admitted count
// must be within 1% of that and never above it.
func TestLoadOneValue(t *testing.T) {
	const (
		clients  = 200
		runFor   = 10 * time.Second
		rate     = 100.0 // per second
		capacity = 120   // count 100 + burst 20
	)
	s := sharedService(t)
	// No q and a browser user agent: only the per-IP descriptor.
	rr := limitRequest(t, req("GET", "/search", "198.51.100.77", "x-origin", "web", "user-agent", "Mozilla/5.0"), false)
	if len(rr.GetDescriptors()) != 1 {
		t.Fatalf("descriptors = %v, want only remote_address", rr.GetDescriptors())
	}
	var ok, over, calls atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	stopAt := start.Add(runFor)
	var lastStart atomic.Int64 // nanoseconds since start of the last call issued
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				lastStart.Store(int64(time.Since(start)))
				cctx, ccancel := context.WithTimeout(ctx, rlFilter.GetTimeout().AsDuration())
				resp, err := s.rls.ShouldRateLimit(cctx, rr)
				ccancel()
				calls.Add(1)
				switch {
				case err != nil:
					firstErr.CompareAndSwap(nil, err)
					return
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				default:
					over.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.Load(); err != nil {
		t.Fatalf("a call failed: %v", err)
	}
	// Tokens can only have been taken between the first call's start and the last answer.
	most := capacity + rate*elapsed.Seconds()
	// The last call was issued at lastStart; the bucket had refilled at least this much by then
	// (the first call cannot have arrived before start).
	least := capacity + rate*time.Duration(lastStart.Load()).Seconds()
	got := float64(ok.Load())
	t.Logf("%d calls in %v (%.0f/s): %d admitted, %d over the limit; bucket allows %.0f to %.0f",
		calls.Load(), elapsed, float64(calls.Load())/elapsed.Seconds(), ok.Load(), over.Load(), least, most)
	if over.Load() == 0 {
		t.Fatal("no call was over the limit: the load did not exceed the rate")
	}
	if got > most+1 {
		t.Errorf("admitted %.0f, more than the bucket allows (%.1f)", got, most)
	}
	if got < 0.99*least {
		t.Errorf("admitted %.0f, less than 99%% of what the bucket allows (%.1f)", got, least)
	}
}
