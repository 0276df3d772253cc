package hotparam

import "time"

// Sweep shrinks the state of idle values: it forgets each value whose state is back to the
// default (a full bucket, no throttle slot ahead, nothing in flight, no refund record) and that
// was not asked for in its rule's current or previous Top window, frees the memory of shards
// left empty, and drops the shards of a rule that tracks nothing any more (a rule then costs
// what it did before its first value). Nothing it forgets changes a decision. It returns the
// number of values forgotten.
//
// The service calls it periodically, e.g. every minute; it takes each shard's lock in turn,
// holding it for one pass over that shard's values.
func (l *Limiter) Sweep(now time.Time) int {
	t := now.UnixNano()
	n := 0
	for _, rs := range l.compiled {
		n += rs.sweep(t)
	}
	for i := range l.retired {
		n += l.retired[i].rs.sweep(t)
	}
	return n
}

// sweep sweeps the shards of the rule's store (see Sweep).
func (rs *ruleState) sweep(now int64) int {
	shards := rs.store.current()
	if shards == nil {
		return 0
	}
	n := 0
	for j := range shards {
		sh := &shards[j]
		sh.mu.Lock()
		if !sh.dead {
			n += sh.sweep(rs, now)
		}
		sh.mu.Unlock()
	}
	rs.store.dropIfEmpty()
	return n
}

// sweep forgets the idle values of the shard (see Sweep) and frees its memory when it is
// left empty. Requires mu held.
func (sh *shard) sweep(rs *ruleState, now int64) int {
	w := uint32(now / rs.window)
	n := 0
	for k := range sh.used {
		i := int32(k)
		sl := sh.at(i)
		if sl.where == inFree || sl.pinned {
			continue
		}
		if !rs.kind.idle(rs, sh, i, now) {
			continue
		}
		if p, b := sl.recent(w); p+b > 0 {
			continue
		}
		sh.remove(i)
		n++
	}
	sh.sweepLedger(now, rs.kind)
	if sh.size == 0 {
		sh.pages, sh.links, sh.used, sh.freeHead = nil, nil, 0, -1
		sh.long = longKeys{}
		sh.index = index{}
		sh.ghost = nil
		sh.leases = nil
		sh.small = queue{head: -1, tail: -1}
		sh.main = queue{head: -1, tail: -1}
	}
	return n
}

// dropIfEmpty drops the shards of a store that tracks no value and parks no state; a Check
// that locked one of them meanwhile finds it dead and takes the new ones.
func (s *store) dropIfEmpty() {
	if s.size.Load() != 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	shards := s.current()
	for i := range shards {
		shards[i].mu.Lock()
	}
	empty := true
	for i := range shards {
		if sh := &shards[i]; sh.size != 0 || sh.ledger.tab != nil || sh.pages != nil {
			empty = false
		}
	}
	if empty && shards != nil {
		for i := range shards {
			shards[i].dead = true
		}
		s.shards.Store(nil)
	}
	for i := range shards {
		shards[i].mu.Unlock()
	}
}

// idle reports whether the store tracks and parks nothing (its shards were dropped).
func (s *store) idle() bool { return s.size.Load() == 0 && s.shards.Load() == nil }
