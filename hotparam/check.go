package hotparam

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
	leaseID string // rules whose kind is leased (concurrency, refund): the entry's LeaseID
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
	// kx is what the op's kind keeps for undo and revert, read only through its accessors
	// (the kind's file says what it holds).
	kx scratch
}

// scratch is an op's words that belong to its rule's kind.
type scratch struct {
	a, b int64
	c    uint64
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
	wait    int64 // when allowed: ns the request waits for its turn (throttle), else 0
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
			if rs.inFlight && opt.SkipConcurrency {
				continue
			}
			if e.Release && !rs.takesRelease {
				continue // this rule ignores releases
			}
			isRemote := rs.cluster && l.opts.Remote != nil
			for pi := range e.Params {
				p := &e.Params[pi]
				if p.Name != rs.param {
					continue
				}
				leaseID := ""
				if rs.leased {
					leaseID = e.LeaseID
				}
				for _, v := range p.Values {
					if rs.match != nil {
						if !rs.match.Match(v) {
							continue
						}
						v = keyOf(rs.match, v)
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

// A call runs in passes (one for a local call; see Limiter.cluster for the others). A pass
// locks the values of its ops (lock), reserves what each asks on its value (reserve: the
// value's state changes at once, and the op keeps what it needs to give it back), then
// settles: it commits the reservations if the call is allowed, or cancels every reservation
// the call holds, and counts, reports and unlocks.

// local checks a call whose ops all run on local state: one pass of reserve, then settle.
func (l *Limiter) local(now int64, ops []op, opt *CheckOptions, st []Status) Decision {
	l.lock(now, ops, false)
	var d Decision
	l.settle(&d, now, ops, !l.reserve(now, ops, false, opt), opt, st)
	return d
}

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
				blocked = blocked || !o.rs.shadow
			}
			continue
		}
		var ok, decided bool
		switch o.rs.kind { // the kinds called directly: a call frame less than kind.reserve
		case kindReject:
			ok, decided = rejectKind{}.reserve(o, &sl.st, now, opt)
		case kindThrottle:
			ok, decided = throttleKind{}.reserve(o, &sl.st, now, opt)
		case kindConcurrency:
			ok, decided = concurrencyKind{}.reserve(o, &sl.st, now, opt)
		default:
			ok, decided = o.rs.kind.reserve(o, &sl.st, now, opt)
		}
		if !decided {
			continue // a release or a charge: applied, never refused
		}
		if o.probe {
			o.applied = false
			if !ok {
				o.blocked = true
				blocked = blocked || !o.rs.shadow
			}
			continue
		}
		if ok {
			o.applied = true
			continue
		}
		o.blocked = true
		if !o.rs.shadow {
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
		o.rs.kind.undo(o)
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
		sl := o.sh.at(o.slot)
		if !o.release {
			sl.count(uint32(now/o.rs.window), allowed && !o.blocked, o.blocked)
		}
		if st == nil || o.rs.shadow {
			continue
		}
		// o's limit as it stands, for rate-limit headers
		c := Status{Rule: int(o.rs.index), Limit: o.lim.count, Duration: o.rs.statusDur}
		switch o.rs.kind { // the kinds called directly: a call frame less than kind.status
		case kindReject:
			c.Remaining, c.ResetAfter = rejectKind{}.status(o, &sl.st, now, opt)
		case kindThrottle:
			c.Remaining, c.ResetAfter = throttleKind{}.status(o, &sl.st, now, opt)
		case kindConcurrency:
			c.Remaining, c.ResetAfter = concurrencyKind{}.status(o, &sl.st, now, opt)
		default:
			c.Remaining, c.ResetAfter = o.rs.kind.status(o, &sl.st, now, opt)
		}
		if sl.overflow {
			c.Remaining = 0
		}
		if o.blocked {
			c.RetryAfter = durationOf(o.retry)
		}
		offer(&st[o.entry], c)
	}
	for i := range ops {
		o := &ops[i]
		if o.sh == nil || !o.rs.inFlight {
			continue
		}
		sl := o.sh.at(o.slot)
		if sl.where != inFree && sl.st.inFlight() == 0 {
			o.sh.remove(o.slot)
		}
	}
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
		if o.rs.shadow {
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
