package main

import (
	"context"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// paced is the no-op with a throttle and nothing else: every ShouldRateLimit takes the next
// turn of one schedule of rate a second (turns 1/rate apart, none before its call came) and is
// answered OK at the first millisecond at or after its turn, together with every other call
// due in that millisecond, one timer a millisecond. That is how extauthz answers the calls a
// throttle rule holds (policy's HoldResolution), so what holding costs the paced no-op is the
// floor of what it costs extauthz: the gRPC stack and Go's scheduler, without a rule.
type paced struct {
	noop
	gap   time.Duration // between turns
	epoch time.Time

	mu   sync.Mutex
	next time.Duration           // the next turn free, since epoch
	due  map[int64]chan struct{} // by millisecond since epoch: closed when it ends
}

func newPaced(rate int) *paced {
	return &paced{gap: time.Second / time.Duration(rate), epoch: time.Now(), due: map[int64]chan struct{}{}}
}

// ShouldRateLimit answers at the call's turn; a call given up before it answers its context's
// error (its turn stays taken, as a turn of extauthz's held calls stays taken until given
// back).
func (p *paced) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	select {
	case <-p.turn():
		return p.noop.ShouldRateLimit(ctx, req)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// turn takes the next turn and returns the channel closed at the end of its millisecond.
func (p *paced) turn() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Since(p.epoch)
	t := max(p.next, now)
	p.next = t + p.gap
	ms := int64((t + time.Millisecond - 1) / time.Millisecond)
	if ch, ok := p.due[ms]; ok {
		return ch
	}
	ch := make(chan struct{})
	p.due[ms] = ch
	time.AfterFunc(time.Duration(ms)*time.Millisecond-now, func() {
		p.mu.Lock()
		delete(p.due, ms)
		p.mu.Unlock()
		close(ch)
	})
	return ch
}
