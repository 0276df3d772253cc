// Package hotparam enforces hot-parameter flow control: a limit per value of a request parameter
// (a token bucket, uniform queueing, or a concurrency limit), with per-value exceptions, in
// bounded memory.
package hotparam

import (
	"context"
	"time"
)

// Grade is what a rule limits: tokens per duration, or requests in flight.
type Grade uint8

const (
	QPS Grade = iota
	Concurrency
)

// Behavior is what a QPS rule does with a request over the limit.
type Behavior uint8

const (
	// Reject blocks at once (a token bucket).
	Reject Behavior = iota
	// Throttle spaces the requests of one value Duration/Count apart and makes a request wait
	// for its slot, up to MaxQueueingTime.
	Throttle
)

// Defaults applied by New when a rule leaves the field zero.
const (
	DefaultLease    = 60 * time.Second
	DefaultCapacity = 100000
)

// Rule limits each value of one param of one resource.
type Rule struct {
	Resource        string
	Param           string
	Grade           Grade
	Count           int64            // QPS: tokens per Duration; Concurrency: most in flight per value
	Duration        time.Duration    // QPS: the refill period of Count tokens
	Burst           int64            // QPS: extra bucket capacity
	Behavior        Behavior         // QPS only
	MaxQueueingTime time.Duration    // Throttle: longest wait
	Items           map[string]int64 // per-value exceptions to Count
	Lease           time.Duration    // Concurrency: an acquire never released is freed after this
	Capacity        int              // most distinct values tracked at once
	Refund          bool             // QPS: Release entries give back what their lease took
	Cluster         bool             // state kept in the shared store (Remote)
	Shadow          bool             // evaluated and reported, never blocks
	// Match, when not nil, limits only the values it matches; the others pass this rule
	// untouched (no state is kept for them).
	Match Matcher
}

// Matcher selects the values of a param that a rule limits. It must be safe for concurrent use.
type Matcher interface {
	Match(value string) bool
}

// Param is a request parameter and its values; a request passes a rule only if every value does.
type Param struct {
	Name   string
	Values []string
}

// Entry is one thing to check: a resource with its params, asking for Hits tokens.
type Entry struct {
	Resource string
	Params   []Param
	Hits     int64 // tokens asked; 0 means 1
	// Probe checks without consuming: the entry is decided (and its Status filled) as if it
	// asked Hits tokens, but takes no token, no slot and no place in a queue. Envoy sends it as
	// a descriptor's explicit hits_addend of 0. A reject rule allows it iff Hits tokens are
	// there, a throttle rule iff its next slot is free now (no wait), a concurrency rule iff
	// Hits slots are free. A probe that is also a Release does nothing. Cluster rules pass it
	// to the Remote (RemoteOp.Probe).
	Probe bool
	// Release marks negative hits: it gives back concurrency, and tokens on Refund rules; other
	// rules ignore it. A release never blocks.
	Release bool
	// LeaseID, when not empty, names the concurrency lease this entry acquires, or the one it
	// releases: a release then frees only a lease of that id held for the same value, and is a
	// no-op when there is none (a request that was refused never held one). Without it a
	// release frees the value's newest lease.
	//
	// On a Refund rule it names what the acquire consumed: a release gives back at most the
	// tokens the acquire of the same id took for that value and were not given back yet, and
	// nothing without an id, for a refused request, or after the rule's Lease. Up to 64 such
	// records are kept per value (24 bytes each; the oldest is forgotten first).
	LeaseID string
}

// CheckOptions tune one Check.
type CheckOptions struct {
	// Deadline, when not zero, is the latest instant a throttled request may be answered: a
	// request whose wait ends after it is blocked at once and consumes nothing.
	Deadline time.Time
	// SkipConcurrency leaves concurrency rules out (callers with no completion signal).
	SkipConcurrency bool
}

// Reason says why a rule blocked.
type Reason uint8

const (
	ReasonNone        Reason = iota
	ReasonQPS                // token bucket empty, or the request asks more than its capacity
	ReasonThrottle           // the wait would exceed MaxQueueingTime or the deadline
	ReasonConcurrency        // too many in flight
)

// Block describes the rule and value that blocked (or, for shadow rules, would have).
type Block struct {
	Entry      int // index into the entries given to Check
	Rule       int // index into the rules given to New
	Param      string
	Value      string
	Reason     Reason
	RetryAfter time.Duration // until this request's tokens would be available
}

// Status is the tightest limit that applied to one entry, for rate-limit headers.
type Status struct {
	Rule       int // -1 when no rule applied
	Limit      int64
	Duration   time.Duration
	Remaining  int64         // whole tokens (or free slots) left after this request
	ResetAfter time.Duration // until the value's bucket is full again
	RetryAfter time.Duration // when blocked: until this request's tokens would be available
}

// Decision is the outcome of one Check.
type Decision struct {
	Allowed bool
	Wait    time.Duration // throttle: hold the answer this long before letting it through
	Block   Block         // when !Allowed: the first rule and value that blocked
	// ShadowBlocked reports that a shadow rule would have blocked; Shadow says which.
	ShadowBlocked bool
	Shadow        Block
}

// RemoteOp is one value's check of one Cluster rule in the shared store.
type RemoteOp struct {
	RuleID   string // stable identity of the rule (kept across reloads that keep its state)
	Value    string
	Grade    Grade
	Behavior Behavior
	Count    int64 // the limit for this value (an exception item applied)
	Burst    int64
	Duration time.Duration
	// MaxWait is the longest a throttled request may wait: the rule's MaxQueueingTime, cut to
	// the caller's deadline.
	MaxWait time.Duration
	Lease   time.Duration
	Hits    int64 // >= 1
	Release bool  // give back (concurrency; tokens when Refund)
	// Probe decides the op as if it asked Hits, consuming nothing (Entry.Probe): reject, allowed
	// iff Hits tokens are there; throttle, iff the next slot is free now (no wait); concurrency,
	// iff Hits slots are free. Never set with Release.
	Probe   bool
	LeaseID string // concurrency: the lease acquired or released; "" as in Entry.LeaseID
	Refund  bool
	Shadow  bool // evaluated and reported, never blocks the others
}

// RemoteResult is the store's answer for one RemoteOp.
type RemoteResult struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Wait       time.Duration // throttle
}

// Remote keeps the state of Cluster rules in a store shared by replicas, with the store's own
// clock.
type Remote interface {
	// Eval checks ops atomically, all or nothing: unless every op that is not Shadow is
	// allowed, nothing is consumed. res has len(ops) elements and is filled in. An error means
	// the store could not answer (the caller applies its fallback); nothing was consumed.
	Eval(ctx context.Context, ops []RemoteOp, res []RemoteResult) error
}

// Fallback is what a Cluster rule does when the Remote fails.
type Fallback uint8

const (
	// FallbackLocal enforces the rule on this replica's own state (Sentinel's
	// fallbackToLocalWhenFail), its counts divided by Options.Replicas.
	FallbackLocal Fallback = iota
	FallbackAllow
	FallbackDeny
)

// Options configure a Limiter.
type Options struct {
	Remote   Remote // state of Cluster rules; nil means every rule is local
	Fallback Fallback
	Replicas int // FallbackLocal divides counts by this; 0 or 1 means no division
	// OnFallback, when not nil, is called once per Check whose cluster rules fell back because
	// the Remote failed, with that error. It must be cheap and safe for concurrent use.
	OnFallback func(err error)
}

// RemoteChecker is implemented by a Remote that cannot represent every rule (its arithmetic has
// narrower bounds than the local engine's). New and Reload call CheckOp for each Cluster rule,
// with its largest count, and refuse a rule the Remote rejects.
type RemoteChecker interface {
	CheckOp(op RemoteOp) error
}

// RuleStats are counters of one rule.
type RuleStats struct {
	Rule      int
	Tracked   int    // values tracked now
	Evictions uint64 // values evicted to stay within Capacity
}

// TopValue is one value's counts in the recent window.
type TopValue struct {
	Value   string
	Passed  uint64
	Blocked uint64
}

// RuleTop lists a rule's busiest values.
type RuleTop struct {
	Rule      int
	Resource  string
	Param     string
	ByPassed  []TopValue
	ByBlocked []TopValue
}
