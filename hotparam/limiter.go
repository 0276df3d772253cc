package hotparam

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

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
type Limiter struct {
	rules      []Rule
	compiled   []*ruleState
	byResource map[string][]int32
	opts       Options
	// seq numbers the stores of this Limiter and of those reloaded from it, which share them;
	// the numbers order the stores' locks.
	seq *atomic.Uint64
}

// New builds a Limiter with fresh state for rules.
func New(rules []Rule, opts Options) (*Limiter, error) { return build(rules, opts, nil) }

// Reload builds a Limiter for rules that keeps the state of every rule of l whose identity
// (resource, param, grade, behavior, duration, cluster) is unchanged.
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
	ops := buf[:0]
	if n := l.countOps(entries, opt); n > len(buf) {
		p := opPool.Get().(*[]op)
		if cap(*p) < n {
			*p = make([]op, 0, n)
		}
		defer putOps(p)
		ops = (*p)[:0]
	}
	ops, remote := l.collect(entries, opt, ops)
	if len(ops) == 0 {
		return Decision{Allowed: true}
	}
	if len(st) < len(entries) {
		st = nil
	}
	t := now.UnixNano()
	if remote == 0 {
		return l.local(t, ops, false, &opt, st)
	}
	return l.cluster(ctx, t, ops, &opt, st)
}

// local checks the active ops on local state.
func (l *Limiter) local(now int64, ops []op, fb bool, opt *CheckOptions, st []Status) Decision {
	l.lock(now, ops, fb)
	blocked := l.eval(now, ops, fb, opt)
	if blocked {
		undo(ops)
	}
	l.finish(now, ops, !blocked, opt, st)
	unlock(ops)
	d := Decision{Allowed: !blocked}
	decide(&d, ops, !blocked)
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
			sh.mu.Unlock()
		}
	}
	return out
}

// opPool holds the op slices of calls with more ops than Check's own buffer.
var opPool = sync.Pool{New: func() any { return new([]op) }}

// putOps clears the ops of p (they point into stores and entries) and pools it.
func putOps(p *[]op) {
	if cap(*p) > 1024 {
		return // a rare huge call: let it go
	}
	clear((*p)[:cap(*p)])
	opPool.Put(p)
}
