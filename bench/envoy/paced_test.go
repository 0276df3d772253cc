package main

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The paced no-op answers its calls no closer than its rate allows, and a call given up waits no
// more.
func TestPacedSpacesItsAnswers(t *testing.T) {
	p := newPaced(10000) // a turn every 100µs
	start := time.Now()
	var last <-chan struct{}
	for range 300 {
		last = p.turn()
	}
	<-last
	if d := time.Since(start); d < 29900*time.Microsecond {
		t.Errorf("the 300th turn came %v after the first, want at least 29.9ms", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	for range 1000 { // 100ms of turns ahead
		p.turn()
	}
	cancel()
	if _, err := p.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}); err != context.Canceled {
		t.Errorf("a call given up answered %v, want %v", err, context.Canceled)
	}
	r, err := p.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{})
	if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("a call waited for its turn answered %v, %v; want OK", r, err)
	}
	if d := time.Since(start); d < 130*time.Millisecond {
		t.Errorf("the call after 1,300 turns was answered %v after the first, want at least 130ms", d)
	}
}
