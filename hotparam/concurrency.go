package hotparam

import "time"

// Concurrency rules: a value's state counts the hits in flight (state.a); the shard keeps the
// leases behind that count, in acquire order, so that an acquire never released expires.

// prune drops the expired leases of slot i. Requires mu held.
func (sh *shard) prune(i int32, now int64) {
	ls := sh.leases[i]
	if len(ls) == 0 {
		return
	}
	s := &sh.at(i).st
	kept := ls[:0]
	for _, l := range ls {
		if l.exp > now {
			kept = append(kept, l)
		} else {
			s.a -= l.n
		}
	}
	s.a = max(s.a, 0)
	sh.setLeases(i, kept)
}

func (sh *shard) setLeases(i int32, ls []lease) {
	if len(ls) == 0 {
		delete(sh.leases, i)
		return
	}
	if sh.leases == nil {
		sh.leases = make(map[int32][]lease)
	}
	sh.leases[i] = ls
}

// acquire takes n of the count slots of the pruned slot i with a lease until exp. When it
// cannot, it takes nothing and returns the time until the first lease expires.
func (sh *shard) acquire(i int32, count, n, now, exp int64) (bool, int64) {
	s := &sh.at(i).st
	ls := sh.leases[i]
	if n > count-s.a {
		retry := exp - now // nothing in flight to wait for: a lease's length
		if len(ls) > 0 {
			retry = ls[0].exp - now
			for _, l := range ls[1:] {
				retry = min(retry, l.exp-now)
			}
		}
		return false, max(retry, 1)
	}
	s.a += n
	sh.setLeases(i, append(ls, lease{exp: exp, n: n}))
	return true, 0
}

// release gives back n slots of slot i, the latest leases first (so that leases whose release
// was lost are the oldest, and expire first), never below zero. Requires mu held.
func (sh *shard) release(i int32, n int64) {
	s := &sh.at(i).st
	ls := sh.leases[i]
	for n > 0 && len(ls) > 0 {
		last := &ls[len(ls)-1]
		k := min(n, last.n)
		last.n -= k
		s.a -= k
		n -= k
		if last.n == 0 {
			ls = ls[:len(ls)-1]
		}
	}
	s.a = max(s.a, 0)
	sh.setLeases(i, ls)
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
