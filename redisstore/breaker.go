package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

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

// settle records the outcome of one script call sent to Redis on behalf of callers Eval calls
// (one, or a batch's), which took lat and ended with err: the counters, the last error, the
// breaker (one success or failure for the script call, whatever the number of callers) and
// Options.Observe (once per caller). parent is the callers' context before the call's own
// deadline: when it is done, the caller gave up, and the failure is no fault of Redis.
func (s *Store) settle(parent context.Context, callers int, lat time.Duration, err error) {
	s.calls.Add(uint64(callers))
	s.latency.Add(int64(lat) * int64(callers))
	s.setErr(err)
	switch {
	case err == nil:
		s.br.success()
	case parent.Err() != nil:
		s.errs.Add(uint64(callers))
		// the caller gave up (its own deadline or cancellation): no fault of Redis
	case unavailable(err):
		s.errs.Add(uint64(callers))
		if opened, n := s.br.failure(); opened {
			s.opened(n, err)
		}
	default:
		s.errs.Add(uint64(callers))
		s.br.success() // Redis answered: it is up, the call was wrong
	}
	if s.opts.Observe != nil {
		for range callers {
			s.opts.Observe(lat, err)
		}
	}
}
