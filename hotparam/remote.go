package hotparam

import (
	"context"
	"time"
)

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
	// Postpaid is the rule's Rule.Postpaid. A charge (an entry asking tokens of a postpaid
	// rule) is sent as a Release with Postpaid set: it takes Hits whatever is left, into debt
	// down to one bucket below empty, and like a release it is applied whatever the outcome,
	// never refused and never undone. (A postpaid rule ignores real releases: none is sent.)
	Postpaid bool
	Shadow   bool // evaluated and reported, never blocks the others
	// Unhold (a throttle op, sent with Release) gives back the Hits slots of a turn an earlier
	// call took, if the value's schedule still ends where that turn left it (Turn, as the
	// store answered it): nothing was queued behind it. A store may also remember a turn with
	// others queued behind it and give it back once they are, as Limiter.Unhold does in
	// memory. It is never refused; its result's Allowed reports whether it gave turns back,
	// and Remaining how many.
	Unhold bool
	Turn   Turn
}

// Turn is where a value's throttle schedule ends after a turn taken in the store, in the
// store's own terms (for the Redis store, microseconds and a fraction); zero when unknown.
type Turn struct{ At, Frac int64 }

// RemoteResult is the store's answer for one RemoteOp.
type RemoteResult struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Wait       time.Duration // throttle
	// Turn, for a throttle op that took a turn, is where the value's schedule ends after it:
	// RemoteOp.Unhold names it to give the turn back. A store that cannot tell leaves it zero
	// (its turns are never given back).
	Turn Turn
}

// Remote keeps the state of Cluster rules in a store shared by replicas, with the store's own
// clock.
type Remote interface {
	// Eval checks ops atomically, all or nothing: unless every op that is not Shadow is
	// allowed, nothing is consumed. res has len(ops) elements and is filled in. An error means
	// the store could not answer in time (the caller applies its fallback): nothing was
	// consumed, unless the call reached the store and ran there after its deadline, which is
	// not given back. Eval does not keep ops or res once it returns.
	Eval(ctx context.Context, ops []RemoteOp, res []RemoteResult) error
}

// RemoteChecker is implemented by a Remote that cannot represent every rule (its arithmetic has
// narrower bounds than the local engine's). New and Reload call CheckOp for each Cluster rule,
// with its largest count, and refuse a rule the Remote rejects.
type RemoteChecker interface {
	CheckOp(op RemoteOp) error
}

// cluster checks a call with ops for the Remote, holding no lock across the Remote's round trip
// (which may take as long as the store's timeout, and would otherwise hold up every value of the
// locked shards behind it):
//
//  1. the local ops are checked and committed under their shards' locks, which are then
//     released; a call blocked here does not ask the Remote;
//  2. the Remote checks all the cluster ops at once;
//  3. the locks are taken again to count the outcome and, if the Remote blocked (or the
//     fallback blocks), to give back what step 1 committed.
//
// Other calls may use the same values between 1 and 3, so step 3 cannot restore the states
// saved in step 1. It gives back what it can without ever giving more than the call took (see
// revert): tokens are refunded, clamped to the bucket's capacity; the lease acquired is removed
// if it is still held; a throttle slot is given back only if no reservation was made after it,
// and otherwise stays taken. A blocked call thus never holds concurrency, and never holds
// tokens unless a throttle slot had others queued behind it by then.
func (l *Limiter) cluster(ctx context.Context, now int64, ops []op, opt *CheckOptions, st []Status) Decision {
	l.lock(now, ops, false)
	if l.reserve(now, ops, false, opt) {
		var d Decision
		l.settle(&d, now, ops, false, opt, st)
		return d
	}
	for i := range ops {
		ops[i].early = ops[i].sh != nil
	}
	unlock(ops)

	rops := make([]RemoteOp, 0, len(ops))
	for i := range ops {
		o := &ops[i]
		o.rk = -1
		if o.remote {
			o.rk = int32(len(rops))
			rops = append(rops, remoteOp(now, o, opt))
		}
	}
	res := make([]RemoteResult, len(rops))
	if err := l.opts.Remote.Eval(ctx, rops, res); err != nil {
		if l.opts.OnFallback != nil {
			l.opts.OnFallback(err)
		}
		return l.fallback(now, ops, opt, st)
	}
	var block, shadow *op // the first cluster op that blocked, and the first shadow one
	for i := range ops {
		o := &ops[i]
		if o.rk < 0 || res[o.rk].Allowed || o.release || o.charge() {
			continue
		}
		if o.rs.shadow {
			if shadow == nil || o.seq < shadow.seq {
				shadow = o
			}
		} else if block == nil || o.seq < block.seq {
			block = o
		}
	}
	allowed := block == nil
	var bl, sh Block // built now: ops are reordered when locked again
	if block != nil {
		bl = blockOf(block)
		bl.RetryAfter = res[block.rk].RetryAfter
	}
	if shadow != nil {
		sh = blockOf(shadow)
		sh.RetryAfter = res[shadow.rk].RetryAfter
	}
	shadowSeq := int32(-1)
	if shadow != nil {
		shadowSeq = shadow.seq
	}

	l.lock(now, ops, false)
	var d Decision
	localShadow := l.settle(&d, now, ops, allowed, opt, st)
	if !allowed {
		d.Block = bl
	}
	if shadowSeq >= 0 && (localShadow < 0 || shadowSeq < localShadow) {
		d.ShadowBlocked, d.Shadow = true, sh
	}
	for i := range ops {
		o := &ops[i]
		if o.rk < 0 {
			continue
		}
		r := &res[o.rk]
		if allowed && r.Wait > d.Wait {
			d.Wait = r.Wait
		}
		if st == nil || o.rs.shadow {
			continue
		}
		c := Status{Rule: int(o.rs.index), Limit: rops[o.rk].Count, Duration: o.rs.statusDur,
			Remaining: r.Remaining, ResetAfter: r.ResetAfter}
		if !r.Allowed {
			c.RetryAfter = max(r.RetryAfter, 1)
		}
		offer(&st[o.entry], c)
	}
	if d.Wait > 0 {
		d.Hold = remoteHold(ops, rops, res) // only a held call pays for it
	}
	return d
}

// fallback finishes a call whose Remote failed, its local ops committed early.
func (l *Limiter) fallback(now int64, ops []op, opt *CheckOptions, st []Status) Decision {
	switch l.opts.Fallback {
	case FallbackAllow:
		l.lock(now, ops, false)
		var d Decision
		l.settle(&d, now, ops, true, opt, st)
		return d
	case FallbackDeny:
		var first *op
		for i := range ops {
			o := &ops[i]
			if o.remote && !o.release && !o.charge() && !o.rs.shadow && (first == nil || o.seq < first.seq) {
				first = o
			}
		}
		allowed := first == nil
		var bl Block
		if !allowed {
			bl = blockOf(first)
		}
		l.lock(now, ops, false)
		var d Decision
		l.settle(&d, now, ops, allowed, opt, st)
		if !allowed {
			d.Block = bl
		}
		return d
	}
	// FallbackLocal: the cluster ops run on local state, beside the early ones, which keep
	// what they committed unless this pass blocks.
	l.lock(now, ops, true)
	var d Decision
	l.settle(&d, now, ops, !l.reserve(now, ops, true, opt), opt, st)
	return d
}

// revert gives back what the early ops committed before their locks were released, in reverse
// order, as far as it can be done without giving back more than was taken: other calls may
// have used the values since (see each kind's revert: reject refunds the tokens, throttle
// gives the slot back if nothing was reserved after it, concurrency removes the lease if it
// is still held). Requires the ops locked again.
//
// A value evicted meanwhile took what it held with it: there is nothing to give back.
func revert(now int64, ops []op) {
	for i := len(ops) - 1; i >= 0; i-- {
		o := &ops[i]
		if o.sh == nil || !o.early || !o.applied {
			continue
		}
		o.applied = false
		if o.gone {
			continue
		}
		o.rs.kind.revert(o, &o.sh.at(o.slot).st, now)
	}
}

// remoteOp is o as the Remote takes it.
func remoteOp(now int64, o *op, opt *CheckOptions) RemoteOp {
	rs, cl := o.rs, o.rs.cl
	lim := rs.limitOf(o.value, false)
	return RemoteOp{
		RuleID:   cl.id,
		Value:    o.value,
		Grade:    cl.grade,
		Behavior: cl.behavior,
		Count:    lim.count,
		Burst:    cl.burst,
		Duration: cl.duration,
		MaxWait:  durationOf(maxWait(o.rs, now, opt)),
		Lease:    durationOf(o.rs.lease),
		Hits:     o.hits,
		Release:  o.release || o.charge(),
		Probe:    o.probe,
		LeaseID:  o.leaseID,
		Refund:   rs.refund,
		Postpaid: rs.postpaid,
		Shadow:   rs.shadow,
	}
}

// charge reports whether o is a postpaid rule's charge (see Rule.Postpaid).
func (o *op) charge() bool { return o.rs.postpaid && !o.probe && !o.release }
