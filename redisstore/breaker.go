package redisstore

import "sync/atomic"

// breaker counts consecutive failures and opens after a threshold; it closes when a probe
// succeeds. It is safe for concurrent use.
type breaker struct {
	threshold int64
	fails     atomic.Int64
	open      atomic.Bool
	opens     atomic.Uint64
}

// allow reports whether a call may go to the server.
func (b *breaker) allow() bool { return !b.open.Load() }

// success records a call that reached the server.
func (b *breaker) success() { b.fails.Store(0) }

// failure records a call that did not reach the server, and opens the breaker at the threshold.
func (b *breaker) failure() {
	if b.fails.Add(1) >= b.threshold && b.open.CompareAndSwap(false, true) {
		b.opens.Add(1)
	}
}

// trip opens the breaker at once (the server was never reached).
func (b *breaker) trip() {
	if b.open.CompareAndSwap(false, true) {
		b.opens.Add(1)
	}
}

// reset closes the breaker after a successful probe.
func (b *breaker) reset() {
	b.fails.Store(0)
	b.open.Store(false)
}
