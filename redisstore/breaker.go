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
// It reports whether this call opened it (one caller per opening), and the consecutive failures.
func (b *breaker) failure() (opened bool, fails int) {
	n := b.fails.Add(1)
	if n >= b.threshold && b.open.CompareAndSwap(false, true) {
		b.opens.Add(1)
		return true, int(n)
	}
	return false, int(n)
}

// trip opens the breaker at once (the server was never reached), and reports whether it did.
func (b *breaker) trip() bool {
	if b.open.CompareAndSwap(false, true) {
		b.opens.Add(1)
		return true
	}
	return false
}

// reset closes the breaker after a successful probe, and reports whether it was open.
func (b *breaker) reset() bool {
	b.fails.Store(0)
	return b.open.CompareAndSwap(true, false)
}
