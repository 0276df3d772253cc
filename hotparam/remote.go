package hotparam

import "context"

// cluster checks a call with ops for the Remote: the local ops first, committed with their state
// still locked; then the Remote once for all cluster ops; if it blocks, the local commit is
// undone, so the call stays all or nothing. On a Remote error, Options.Fallback applies.
func (l *Limiter) cluster(ctx context.Context, now int64, ops []op, opt *CheckOptions, st []Status) Decision {
	l.lock(now, ops, false)
	if l.eval(now, ops, false, opt) {
		undo(ops)
		l.finish(now, ops, false, opt, st)
		unlock(ops)
		var d Decision
		decide(&d, ops, false)
		return d
	}
	idx := make([]int, 0, len(ops))
	rops := make([]RemoteOp, 0, len(ops))
	for i := range ops {
		if ops[i].remote {
			idx = append(idx, i)
			rops = append(rops, remoteOp(now, &ops[i], opt))
		}
	}
	res := make([]RemoteResult, len(rops))
	if err := l.opts.Remote.Eval(ctx, rops, res); err != nil {
		if l.opts.OnFallback != nil {
			l.opts.OnFallback(err)
		}
		return l.fallback(now, ops, idx, opt, st)
	}
	block, shadow := -1, -1 // indexes into idx of the first blocking and shadow-blocked op
	for k, i := range idx {
		if res[k].Allowed || ops[i].release {
			continue
		}
		if ops[i].rs.rule.Shadow {
			if shadow < 0 || ops[i].seq < ops[idx[shadow]].seq {
				shadow = k
			}
		} else if block < 0 || ops[i].seq < ops[idx[block]].seq {
			block = k
		}
	}
	allowed := block < 0
	if !allowed {
		undo(ops)
	}
	l.finish(now, ops, allowed, opt, st)
	unlock(ops)
	d := Decision{Allowed: allowed}
	_, shadowSeq := decide(&d, ops, allowed)
	if !allowed {
		i := idx[block]
		d.Block = blockOf(&ops[i])
		d.Block.RetryAfter = res[block].RetryAfter
	}
	if shadow >= 0 && (shadowSeq < 0 || ops[idx[shadow]].seq < shadowSeq) {
		d.ShadowBlocked = true
		d.Shadow = blockOf(&ops[idx[shadow]])
		d.Shadow.RetryAfter = res[shadow].RetryAfter
	}
	for k, i := range idx {
		o := &ops[i]
		if allowed && res[k].Wait > d.Wait {
			d.Wait = res[k].Wait
		}
		if st == nil || o.rs.rule.Shadow {
			continue
		}
		c := Status{Rule: o.rs.index, Limit: rops[k].Count, Duration: o.rs.rule.Duration,
			Remaining: res[k].Remaining, ResetAfter: res[k].ResetAfter}
		if o.rs.kind == kindConcurrency {
			c.Duration = 0
		}
		if !res[k].Allowed {
			c.RetryAfter = max(res[k].RetryAfter, 1)
		}
		offer(&st[o.entry], c)
	}
	return d
}

// fallback finishes a call whose Remote failed, with the local ops committed and locked.
func (l *Limiter) fallback(now int64, ops []op, idx []int, opt *CheckOptions, st []Status) Decision {
	switch l.opts.Fallback {
	case FallbackAllow:
		l.finish(now, ops, true, opt, st)
		unlock(ops)
		d := Decision{Allowed: true}
		decide(&d, ops, true)
		return d
	case FallbackDeny:
		first := -1
		for _, i := range idx {
			o := &ops[i]
			if !o.release && !o.rs.rule.Shadow && (first < 0 || o.seq < ops[first].seq) {
				first = i
			}
		}
		allowed := first < 0
		if !allowed {
			undo(ops)
		}
		l.finish(now, ops, allowed, opt, st)
		unlock(ops)
		d := Decision{Allowed: allowed}
		decide(&d, ops, allowed)
		if !allowed {
			d.Block = blockOf(&ops[first])
		}
		return d
	}
	// FallbackLocal: start again with the cluster rules on local state. Nothing was counted yet.
	undo(ops)
	unlock(ops)
	return l.local(now, ops, true, opt, st)
}

// remoteOp is o as the Remote takes it.
func remoteOp(now int64, o *op, opt *CheckOptions) RemoteOp {
	r := &o.rs.rule
	lim := o.rs.limitOf(o.value, false)
	return RemoteOp{
		RuleID:   o.rs.id,
		Value:    o.value,
		Grade:    r.Grade,
		Behavior: r.Behavior,
		Count:    lim.count,
		Burst:    r.Burst,
		Duration: r.Duration,
		MaxWait:  durationOf(maxWait(o.rs, now, opt)),
		Lease:    durationOf(o.rs.lease),
		Hits:     o.hits,
		Release:  o.release,
		LeaseID:  o.leaseID,
		Refund:   r.Refund,
		Shadow:   r.Shadow,
	}
}
