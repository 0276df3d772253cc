// Package hotparam enforces hot-parameter flow control: a limit per value of a request parameter
// (a token bucket, uniform queueing, or a concurrency limit), with per-value exceptions, in
// bounded memory.
package hotparam

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

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
	// release frees only a lease acquired without an id (the newest), never one held under an
	// id, so a client cannot free other requests' slots with bare releases.
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
	// request whose wait ends after it is blocked at once and consumes nothing. One that need
	// not wait passes even when the deadline has passed already.
	Deadline time.Time
	// SkipConcurrency leaves concurrency rules out (callers with no completion signal).
	SkipConcurrency bool
	// Domain is the call's rate-limit domain: the rules of that domain apply, besides those
	// without a domain. "" (ext_authz calls) is the rules without a domain alone.
	Domain string
}

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
	// Hold, for a held call (Wait > 0), is the throttle turns it took: a caller that gives the
	// call up during its wait passes it to Unhold, which gives them back. nil otherwise.
	Hold *Hold
}

// Options configure a Limiter.
type Options struct {
	Remote   Remote // state of Cluster rules; nil means every rule is local
	Fallback Fallback
	Replicas int // FallbackLocal divides counts by this; 0 or 1 means no division
	// OnFallback, when not nil, is called once per Check whose cluster rules fell back because
	// the Remote failed, with that error. It must be cheap and safe for concurrent use.
	OnFallback func(err error)
	// TopWindow is the window of the counts Top reports (a value's passed and blocked requests
	// in the current window and the one before) and of Sweep's idleness (a value asked in
	// neither is forgotten when back at its default state). 0 means each rule's Duration; at
	// least a second either way.
	TopWindow time.Duration
	// StateBudget bounds, in bytes, the states kept of evicted values over all rules (see
	// flood.go); 0 means DefaultStateBudget. RuleStateBudget is the budget of a rule whose
	// StateBudget is 0; 0 means DefaultRuleStateBudget. Overflow is what a rule whose
	// Overflow is OverflowDefault does once its budget (or the whole one) is full;
	// OverflowDefault means OverflowForget.
	StateBudget     int64
	RuleStateBudget int64
	Overflow        Overflow
	// OnOverflow, when not nil, is called when a rule forgets a state or refuses a new value
	// for a full budget, at most once a second per rule (by the instants of its Checks). It is
	// called with a lock held: it must be cheap (e.g. log a line) and must not call the
	// Limiter.
	OnOverflow func(OverflowEvent)
}

// RuleStats are counters of one rule.
type RuleStats struct {
	Rule      int
	Tracked   int    // values tracked now
	Evictions uint64 // values evicted to stay within Capacity
	// Parked is the evicted values whose states are kept (not back to the default yet, or
	// not swept since), in StateBytes bytes of ledger.
	Parked     int
	StateBytes int64
	// Overflows counts the states forgotten, or the new values refused, for a full budget.
	Overflows uint64
}

// Limiter holds a set of rules and the per-value state of each. It is safe for concurrent use.
//
// The zero Limiter has no rules and allows everything.
//
// A Check is all or nothing: it locks the state of every value it involves (in a fixed order),
// checks them all and commits all of them or none. Per rule kind:
//
//   - reject: a token bucket of Count+Burst tokens refilled at Count per Duration, counted
//     exactly in integers (a token is q units, the bucket gains p units a nanosecond, p/q being
//     Count/Duration reduced); a new value starts full;
//   - throttle: a value's requests are given slots exactly Duration/Count apart (a request of n
//     hits takes n slots); the wait for a slot is rounded up to the nanosecond and may be at most
//     MaxQueueingTime (and end by CheckOptions.Deadline); idle time earns no credit;
//   - concurrency: hits in flight, each acquire a lease that a Release entry gives back or that
//     expires after Lease; a value with nothing in flight is forgotten. A release with a LeaseID
//     frees only the value's lease of that id (nothing when the request it names was refused and
//     holds none); one without frees the latest leases first. Leases keep a 64-bit hash of their
//     id, not the id itself.
//
// Release entries give back concurrency, and tokens on reject rules with Refund (only what the
// acquire of the same Entry.LeaseID took, recorded for the rule's Lease); other rules,
// throttle ones included, ignore them. A release is applied whatever the outcome of the call and
// never blocks.
//
// A shadow rule is checked like the others and consumes when the call is allowed, so that its
// counts are real, but it never blocks the call; Decision.Shadow reports the first value it
// would have blocked. Statuses leave shadow rules out.
//
// Each rule tracks at most its Capacity values. Evicting a value to make room never hands it a
// new allowance: the state of a value not back to the default is parked, exactly, in its
// rule's ledger (16 bytes a value, within Rule.StateBudget and Options.StateBudget), and the
// value is created again from it (see flood.go); "a new value starts full" and "forgotten"
// above hold for values with no parked state. Past the budget, the rule's Overflow says
// whether states are forgotten or new values refused. A rule's per-value structures are made
// at its first value; Sweep, called periodically, forgets idle values and ended states and
// gives the memory back.
type Limiter struct {
	rules      []Rule
	compiled   []*ruleState
	byResource map[string][]int32 // every rule, domains or not
	scoped     *scopedIndex       // the rules by domain; nil when no rule has one (domain.go)
	opts       Options
	// seq numbers the stores of this Limiter and of those reloaded from it, which share them;
	// the numbers order the stores' locks. budget is what their ledgers hold, shared likewise.
	seq    *atomic.Uint64
	budget *budget
	// retired are rules of earlier sets that this one dropped, kept with their state until it
	// is back to the default (see retire).
	retired []retiredRule
}

// New builds a Limiter with fresh state for rules. The Limiter keeps rules (see Rules): the
// caller must not modify them afterwards.
func New(rules []Rule, opts Options) (*Limiter, error) { return build(rules, opts, nil) }

// Reload builds a Limiter for rules that keeps the state of every rule of l whose identity
// (resource, param, grade, behavior, duration, cluster) is unchanged.
//
// The state of a rule that rules drop is kept too, until Sweep finds it back to the default
// (within the rule's duration for a reject rule): a later Reload with a rule of that identity
// takes it again, so that deleting a rule (or every rule) and putting it back never hands a
// depleted value a fresh allowance.
//
// Rules of one identity are matched in order: the n-th such rule of the new set takes the state
// of the n-th of l. The kept state is shared with l, which stays usable; a changed threshold
// applies from the next Check on (a bucket larger than a lowered capacity is clamped to it, and a
// store is cut to a lowered Capacity). On error, l is unchanged.
func (l *Limiter) Reload(rules []Rule, opts Options) (*Limiter, error) {
	return build(rules, opts, l)
}

// Rules returns the rules in force. The caller must not modify them.
func (l *Limiter) Rules() []Rule { return l.rules }

// Names reports whether a rule (of any domain) names resource. A nil Limiter names none.
func (l *Limiter) Names(resource string) bool {
	return l != nil && len(l.byResource[resource]) > 0
}

// Reads reports whether a rule (of any domain) of resource reads param. A nil Limiter reads
// none.
func (l *Limiter) Reads(resource, param string) bool {
	if l == nil {
		return false
	}
	for _, i := range l.byResource[resource] {
		if l.rules[i].Param == param {
			return true
		}
	}
	return false
}

// Check checks every entry against every rule of its resource, all or nothing: a request blocked
// by any rule or value consumes nothing from the others. st, when not nil, has one element per
// entry and is filled with each entry's tightest status.
//
// Release entries are applied whatever the outcome and never block. Cluster rules are checked by
// Options.Remote after the local rules passed and committed; no lock is held during the Remote
// call. If the Remote blocks, the local commit is given back as far as other calls made since
// allow, never more than was taken (see cluster and revert in remote.go).
func (l *Limiter) Check(ctx context.Context, now time.Time, entries []Entry, opt CheckOptions, st []Status) Decision {
	st = st[:min(len(st), len(entries))]
	for i := range st {
		st[i] = Status{Rule: -1}
	}
	var buf [4]op // most calls have a few ops: no allocation for them
	ops, remote, pooled := l.collect(entries, opt, buf[:0])
	if pooled != nil {
		defer putOps(pooled, len(ops))
	}
	if len(ops) == 0 {
		return Decision{Allowed: true}
	}
	if len(st) < len(entries) {
		st = nil
	}
	t := now.UnixNano()
	var d Decision
	if remote == 0 {
		d = l.local(t, ops, &opt, st)
	} else {
		d = l.cluster(ctx, t, ops, &opt, st)
	}
	if d.Wait > 0 {
		d.Hold = holdOf(ops, d.Hold) // only a held call pays for it
	}
	return d
}

// Stats returns the counters of every rule.
func (l *Limiter) Stats() []RuleStats {
	out := make([]RuleStats, len(l.compiled))
	for i, rs := range l.compiled {
		out[i].Rule = i
		shards := rs.store.current()
		for j := range shards {
			sh := &shards[j]
			sh.mu.Lock()
			out[i].Tracked += sh.size
			out[i].Evictions += sh.evicted
			out[i].Parked += sh.ledger.n
			out[i].Overflows += sh.overflows
			out[i].StateBytes += int64(len(sh.ledger.tab)) * entryBytes
			sh.mu.Unlock()
		}
	}
	return out
}

// opPool holds the op slices of calls with more ops than Check's own buffer.
var opPool = sync.Pool{New: func() any { return new([]op) }}

// putOps clears the first n ops of p, those a call used (they point into stores and entries),
// and pools it.
func putOps(p *[]op, n int) {
	if cap(*p) > 1024 {
		return // a rare huge call: let it go
	}
	clear((*p)[:n])
	*p = (*p)[:0]
	opPool.Put(p)
}
