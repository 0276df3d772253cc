package hotparam

import "time"

// op is one value's check of one rule within a Check call: its plan, fixed when the call is
// collected; what the call has done to the value, kept from pass to pass; and the scratch of
// the pass running it.
type op struct {
	plan
	done
	pass
}

// plan is what an op checks.
type plan struct {
	seq     int32 // position in the call's order: entries, then their rules, then values
	entry   int32 // index of the entry
	rs      *ruleState
	value   string
	hits    int64 // >= 1
	release bool
	probe   bool   // decided as if it asked hits, consuming nothing
	leaseID string // concurrency and refund rules: the entry's LeaseID
	remote  bool   // a cluster rule checked by the Remote (unless falling back to local state)
	rk      int32  // index of the op's RemoteOp in the call's Remote.Eval, -1 for none
}

// done is what the call did to an op's value so far, for the passes that follow.
type done struct {
	// released: the release was applied (a call that starts again on a Remote failure does not
	// apply it twice)
	released bool
	// early: checked and committed before the call's Remote.Eval, its lock released since (see
	// Limiter.cluster); gone: its value was no longer tracked when locked again.
	early, gone bool
	applied     bool  // this op consumed (given back if the call is blocked)
	saved       state // the value's state before this op changed it, to undo it
	after       state // throttle: the value's state right after this op's reservation
	leases      int32 // concurrency: the value's lease count before this op's acquire
	// recorded: a refund rule's op noted what it took under its lease id, until exp
	recorded bool
	exp      int64
}

// pass is the scratch of the pass running an op on local state.
type pass struct {
	lim     *limit
	sh      *shard // nil when the op does not run in this pass
	shard   int32  // index of sh in its store
	hash    uint64
	lid     uint64 // the hash of leaseID, 0 for none
	slot    int32
	owner   bool  // this op's shard lock is held for the call through this op (lockShards)
	blocked bool  // this op's own limit was exceeded
	wait    int64 // throttle: ns until the request's slot
	retry   int64 // when blocked: ns until it could pass
}

// collect appends to ops one op per entry, rule of its resource and param value, and returns
// them with the number of ops for the Remote. When ops is full, the ops move to a slice of
// opPool, which it returns too (nil when none): the caller gives it back with putOps, naming
// how many ops it holds.
func (l *Limiter) collect(entries []Entry, opt CheckOptions, ops []op) ([]op, int, *[]op) {
	remote := 0
	var pooled *[]op
	base, dom := l.indexFor(opt.Domain)
	for ei := range entries {
		e := &entries[ei]
		idx := base[e.Resource]
		if dom != nil {
			if di, ok := dom[e.Resource]; ok {
				idx = di
			}
		}
		if len(idx) == 0 {
			continue
		}
		if e.Probe && e.Release {
			continue // gives back nothing
		}
		hits := e.Hits
		if hits <= 0 {
			hits = 1
		}
		for _, ri := range idx {
			rs := l.compiled[ri]
			if rs.kind == kindConcurrency && opt.SkipConcurrency {
				continue
			}
			if e.Release && rs.kind != kindConcurrency && !(rs.kind == kindReject && rs.rule.Refund) {
				continue // this rule ignores releases
			}
			isRemote := rs.rule.Cluster && l.opts.Remote != nil
			for pi := range e.Params {
				p := &e.Params[pi]
				if p.Name != rs.rule.Param {
					continue
				}
				leaseID := ""
				if rs.kind == kindConcurrency || rs.rule.Refund {
					leaseID = e.LeaseID
				}
				for _, v := range p.Values {
					if rs.rule.Match != nil {
						if !rs.rule.Match.Match(v) {
							continue
						}
						v = keyOf(rs.rule.Match, v)
					}
					if len(ops) == cap(ops) {
						ops, pooled = grow(ops, pooled)
					}
					ops = append(ops, op{plan: plan{seq: int32(len(ops)), entry: int32(ei), rs: rs, value: v, hits: hits,
						release: e.Release, probe: e.Probe, leaseID: leaseID, remote: isRemote}})
					if isRemote {
						remote++
					}
				}
			}
		}
	}
	return ops, remote, pooled
}

// grow moves the full ops to a pooled slice twice as large (at least 16), giving back the
// pooled slice they were in, if any.
func grow(ops []op, pooled *[]op) ([]op, *[]op) {
	p := opPool.Get().(*[]op)
	if n := max(2*cap(ops), 16); cap(*p) < n {
		*p = make([]op, 0, n)
	}
	*p = append((*p)[:0], ops...)
	if pooled != nil {
		putOps(pooled, len(ops))
	}
	return *p, p
}

// active reports whether o runs on local state in this pass (fb: cluster rules fall back to it).
func (o *op) active(fb bool) bool { return !o.remote || fb }

// maxWait is the longest a throttled op of rs may wait: its MaxQueueingTime, cut to the deadline.
func maxWait(rs *ruleState, now int64, opt *CheckOptions) int64 {
	w := rs.maxQ
	if !opt.Deadline.IsZero() {
		w = min(w, opt.Deadline.UnixNano()-now)
	}
	return w
}

// A call runs in passes (one for a local call; see Limiter.cluster for the others). A pass
// locks the values of its ops (lock), reserves what each asks on its value (reserve: the
// value's state changes at once, and the op keeps what it needs to give it back), then
// settles: it commits the reservations if the call is allowed, or cancels every reservation
// the call holds, and counts, reports and unlocks.

// settle ends a pass on the locked ops: when the call is not allowed it cancels what the call
// reserved (this pass's reservations exactly, earlier passes' as far as they can be given
// back); then it counts the outcome, fills the statuses, unlocks and decides. It puts the
// decision in d (which it expects zero) and the call position of the shadow op it reports (-1
// for none).
func (l *Limiter) settle(d *Decision, now int64, ops []op, allowed bool, opt *CheckOptions, st []Status) int32 {
	if !allowed {
		undo(ops)
		revert(now, ops)
	}
	l.finish(now, ops, allowed, opt, st)
	unlock(ops)
	d.Allowed = allowed
	_, shadowSeq := decide(d, ops, allowed)
	return shadowSeq
}

// reserve runs the active ops on their locked states, taking what each that passes asks (early
// ops ran in an earlier pass and are left as they are). It reports whether an op of a rule
// that is not a shadow rule blocked. Releases are applied and never block; probes take
// nothing.
func (l *Limiter) reserve(now int64, ops []op, fb bool, opt *CheckOptions) bool {
	blocked := false
	for i := range ops {
		o := &ops[i]
		if o.sh == nil || o.early {
			continue
		}
		o.applied, o.blocked, o.wait, o.retry = false, false, 0, 0
		sl := o.sh.at(o.slot)
		if sl.overflow { // refused for a full ledger (OverflowRefuse): nothing to take or give back
			if !o.release {
				o.blocked, o.retry = true, overflowRetry
				blocked = blocked || !o.rs.rule.Shadow
			}
			continue
		}
		s := &sl.st
		ok := true
		switch o.rs.kind {
		case kindReject:
			o.lim.refill(s, now)
			if o.rs.rule.Refund {
				o.sh.expire(o.slot, now)
			}
			if o.release {
				// A refund gives back only what the acquire of the same lease id took and
				// was not refunded yet: nothing for a refused request or without an id.
				if !o.released {
					o.lim.refund(s, o.sh.refundable(o.slot, o.hits, o.lid))
					o.released = true
				}
				continue
			}
			o.saved = *s
			o.recorded = false
			if o.charge() {
				// A charge of what a response used: applied whatever the outcome, once (a
				// call that starts again on a Remote failure does not apply it twice), never
				// refused and never undone.
				if !o.released {
					o.lim.charge(s, o.hits)
					o.released = true
				}
				continue
			}
			ok, o.retry = o.lim.take(s, o.hits)
			if o.probe {
				*s = o.saved
			}
			if !ok {
				_, at := s.bucket()
				o.retry += max(at-now, 0) // a caller whose clock lags the bucket's
			} else if o.rs.rule.Refund && o.lid != 0 && !o.probe {
				o.exp = now + o.rs.lease
				o.sh.record(o.slot, o.hits, o.exp, o.lid)
				o.recorded = true
			}
		case kindThrottle:
			o.lim.advance(s, now)
			o.saved = *s
			// a deadline passed already leaves no time to wait, as in the Redis store, where
			// the wait is bounded by 0: a request that need not wait still passes
			mw := max(maxWait(o.rs, now, opt), 0)
			if o.probe {
				ok, o.wait = o.lim.free(s, now)
				mw = 0
			} else {
				ok, o.wait = o.lim.reserve(s, now, o.hits, mw)
			}
			o.after = *s
			if !ok {
				o.retry = max(o.wait-max(mw, 0), 1)
				o.wait = 0
			}
		case kindConcurrency:
			o.sh.prune(o.slot, now)
			if o.release {
				if !o.released {
					o.sh.release(o.slot, o.hits, o.lid)
					o.released = true
				}
				continue
			}
			o.saved = *s
			o.leases = int32(len(o.sh.leases[o.slot]))
			ok, o.retry = o.sh.acquire(o.slot, o.lim.count, o.hits, now, now+o.rs.lease, o.lid, o.probe)
		}
		if o.probe {
			o.applied = false
			if !ok {
				o.blocked = true
				blocked = blocked || !o.rs.rule.Shadow
			}
			continue
		}
		if ok {
			o.applied = true
			continue
		}
		o.blocked = true
		if !o.rs.rule.Shadow {
			blocked = true
		}
	}
	return blocked
}

// undo restores the states the applied ops of this pass changed, in reverse order; it leaves
// early ops to revert. Requires the ops locked since reserve.
func undo(ops []op) {
	for i := len(ops) - 1; i >= 0; i-- {
		o := &ops[i]
		if o.sh == nil || !o.applied || o.early {
			continue
		}
		o.sh.at(o.slot).st = o.saved
		if o.rs.kind == kindConcurrency {
			o.sh.setLeases(o.slot, o.sh.leases[o.slot][:o.leases])
		}
		if o.recorded {
			o.sh.unrecord(o.slot, o.exp, o.hits, o.lid)
			o.recorded = false
		}
		o.applied = false
	}
}

// finish counts the outcome in the values' window counters, fills the statuses and forgets
// concurrency values with nothing in flight. Requires the ops locked.
func (l *Limiter) finish(now int64, ops []op, allowed bool, opt *CheckOptions, st []Status) {
	for i := range ops {
		o := &ops[i]
		if o.sh == nil {
			continue
		}
		if !o.release {
			o.sh.at(o.slot).count(uint32(now/o.rs.window), allowed && !o.blocked, o.blocked)
		}
		if st != nil && !o.rs.rule.Shadow {
			c := l.status(now, o, opt)
			offer(&st[o.entry], c)
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.sh == nil || o.rs.kind != kindConcurrency {
			continue
		}
		sl := o.sh.at(o.slot)
		if sl.where != inFree && sl.st.inFlight() == 0 {
			o.sh.remove(o.slot)
		}
	}
}

// count adds one request to the counters of window w.
func (s *counters) count(w uint32, passed, blocked bool) {
	if s.win != w {
		if s.win+1 == w {
			s.prevPassed, s.prevBlocked = s.passed, s.blocked
		} else {
			s.prevPassed, s.prevBlocked = 0, 0
		}
		s.passed, s.blocked, s.win = 0, 0, w
	}
	if passed && s.passed < ^uint32(0) {
		s.passed++
	}
	if blocked && s.blocked < ^uint32(0) {
		s.blocked++
	}
}

// overflowRetry is the Retry-After of a value refused for a full ledger: the time for some
// of its states to end is not known.
const overflowRetry = int64(time.Second)

// status is o's limit as it stands, for rate-limit headers.
func (l *Limiter) status(now int64, o *op, opt *CheckOptions) Status {
	sl := o.sh.at(o.slot)
	s := &sl.st
	c := Status{Rule: o.rs.index, Limit: o.lim.count, Duration: o.rs.rule.Duration}
	switch o.rs.kind {
	case kindReject:
		c.Remaining = o.lim.remaining(s)
		_, at := s.bucket()
		c.ResetAfter = durationOf(o.lim.resetAfter(s) + max(at-now, 0))
	case kindThrottle:
		mw := max(maxWait(o.rs, now, opt), 0)
		c.Remaining = o.lim.freeSlots(s, now, mw)
		c.ResetAfter = durationOf(max(o.lim.wait(s, now), 0))
	case kindConcurrency:
		c.Duration = 0
		c.Remaining = max(o.lim.count-s.inFlight(), 0)
	}
	if sl.overflow {
		c.Remaining = 0
	}
	if o.blocked {
		c.RetryAfter = durationOf(o.retry)
	}
	return c
}

// offer makes c the entry's status if it is tighter: a blocked limit before one that passed,
// then the least remaining, then the first rule; of equals the first offered (ops are offered
// in the call's order, so of two values of one rule, the call's first).
func offer(cur *Status, c Status) {
	switch {
	case cur.Rule < 0:
	case (c.RetryAfter > 0) != (cur.RetryAfter > 0):
		if c.RetryAfter == 0 {
			return
		}
	case c.Remaining > cur.Remaining || (c.Remaining == cur.Remaining && c.Rule >= cur.Rule):
		return
	}
	*cur = c
}

// decide fills d's Block (when !allowed), Shadow and Wait (when allowed) from the local ops
// and returns the call positions of the ops they came from (-1 for none).
func decide(d *Decision, ops []op, allowed bool) (blockSeq, shadowSeq int32) {
	blockSeq, shadowSeq = -1, -1
	for i := range ops {
		o := &ops[i]
		if o.sh == nil {
			continue
		}
		if allowed && o.wait > int64(d.Wait) {
			d.Wait = durationOf(o.wait)
		}
		if !o.blocked {
			continue
		}
		if o.rs.rule.Shadow {
			if shadowSeq < 0 || o.seq < shadowSeq {
				d.ShadowBlocked, d.Shadow, shadowSeq = true, blockOf(o), o.seq
			}
			continue
		}
		if !allowed && (blockSeq < 0 || o.seq < blockSeq) {
			d.Block, blockSeq = blockOf(o), o.seq
		}
	}
	return blockSeq, shadowSeq
}

func blockOf(o *op) Block {
	return Block{Entry: int(o.entry), Rule: o.rs.index, Param: o.rs.rule.Param, Value: o.value,
		Reason: reasonOf(o.rs.kind), RetryAfter: durationOf(o.retry)}
}

func reasonOf(k kind) Reason {
	switch k {
	case kindThrottle:
		return ReasonThrottle
	case kindConcurrency:
		return ReasonConcurrency
	}
	return ReasonQPS
}
