package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// TransitionKind says what changed in a Transition.
type TransitionKind int

// Kinds of Transition, in the order an outage has them.
const (
	// Opened: the breaker opened; calls go to the fallback without trying Redis.
	Opened TransitionKind = iota + 1
	// FallbackStarted: the first decision left to the fallback (NoteFallback) since Opened.
	FallbackStarted
	// Closed: a probe succeeded, the breaker closed, calls go to Redis again.
	Closed
)

func (k TransitionKind) String() string {
	switch k {
	case Opened:
		return "opened"
	case FallbackStarted:
		return "fallback started"
	case Closed:
		return "closed"
	}
	return "unknown"
}

// Transition is one change of the store's availability, reported once through
// Options.OnTransition: never once per call.
type Transition struct {
	Kind TransitionKind
	// Err is the error that opened the breaker (Opened).
	Err error
	// Failures is the number of consecutive failed calls that opened the breaker; 0 when Redis
	// could not be reached at New (Opened).
	Failures int
	// Outage is the time since Opened (FallbackStarted, Closed).
	Outage time.Duration
	// The outage's counts, from Opened to Closed: calls sent to Redis that failed (probes not
	// included; the Failures that opened the breaker are), probes sent, calls answered
	// ErrUnavailable without trying Redis, and decisions the callers left to their fallback
	// (NoteFallback) (Closed).
	FailedCalls, Probes, ShortCircuits, Fallbacks uint64
}

// outage is the state of the outage under way, if any. It is safe for concurrent use.
type outage struct {
	mu    sync.Mutex // serialises the transitions, so that OnTransition sees them in order
	open  bool
	since time.Time
	base  Stats  // the counters at Opened
	fails uint64 // the failures that opened it
	// noteFallback is set at Opened and cleared at the first NoteFallback after it: the fast
	// path of NoteFallback is one load of it.
	noteFallback atomic.Bool
	fallbacks    atomic.Uint64
}

// NoteFallback tells the store that a caller decided a call by its fallback because the store
// failed (hotparam.Options.OnFallback). The store counts them for the outage's Closed
// transition and reports the first one after Opened as FallbackStarted. It is cheap: one
// atomic add, and one load while no report is due.
func (s *Store) NoteFallback() {
	s.out.fallbacks.Add(1)
	if !s.out.noteFallback.Load() {
		return
	}
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	if !s.out.open || !s.out.noteFallback.CompareAndSwap(true, false) {
		return
	}
	s.report(Transition{Kind: FallbackStarted, Outage: time.Since(s.out.since)})
}

// opened records that the breaker opened after failures consecutive failed calls, the last
// with err. The caller won the breaker's transition: it is called once per opening.
func (s *Store) opened(failures int, err error) {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	s.out.open, s.out.since, s.out.base, s.out.fails = true, time.Now(), s.counts(), uint64(failures)
	s.report(Transition{Kind: Opened, Err: err, Failures: failures})
	s.out.noteFallback.Store(true)
}

// recovered records that a probe closed the breaker.
func (s *Store) recovered() {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	if !s.out.open {
		return
	}
	now, b := s.counts(), s.out.base
	s.out.open = false
	s.out.noteFallback.Store(false)
	s.report(Transition{Kind: Closed, Outage: time.Since(s.out.since),
		FailedCalls: now.Errors - b.Errors + s.out.fails, Probes: now.Probes - b.Probes,
		ShortCircuits: now.ShortCircuits - b.ShortCircuits, Fallbacks: now.Fallbacks - b.Fallbacks})
}

// counts are the counters an outage's report is made of.
func (s *Store) counts() Stats {
	return Stats{Errors: s.errs.Load(), Probes: s.pr.Load(), ShortCircuits: s.shorts.Load(), Fallbacks: s.out.fallbacks.Load()}
}

// report hands t to Options.OnTransition. It requires out.mu held.
func (s *Store) report(t Transition) {
	if s.opts.OnTransition != nil {
		s.opts.OnTransition(t)
	}
}
