package hotparam

import (
	"hash/maphash"
	"math"
	"slices"
	"time"
)

// concurrencyKind is the kind of a concurrency rule: a value's state counts the hits in
// flight (state.inFlight); the shard keeps the leases behind that count, in acquire order, so
// that an acquire never released expires.
type concurrencyKind struct{}

func (concurrencyKind) newLimit(count, burst int64, d time.Duration) (limit, error) {
	return baseLimit(count, burst, d)
}

func (concurrencyKind) check(r *Rule) error {
	if r.Postpaid {
		return errPostpaid
	}
	return nil
}

func (concurrencyKind) takesRelease(*Rule) bool       { return true }
func (concurrencyKind) leased(*Rule) bool             { return true }
func (concurrencyKind) inFlight() bool                { return true }
func (concurrencyKind) holds() bool                   { return false }
func (concurrencyKind) topWindow(*Rule) time.Duration { return 0 }
func (concurrencyKind) reason() Reason                { return ReasonConcurrency }

func (concurrencyKind) init(*limit, *state, int64) {} // nothing in flight

// A concurrency op's scratch (op.kx) is the value's lease count before its acquire: a = the
// count.

func (o *op) leasesBefore() int { return int(o.kx.a) }

func (concurrencyKind) reserve(o *op, s *state, now int64, _ *CheckOptions) (ok, decided bool) {
	o.sh.prune(o.slot, now)
	if o.release {
		if !o.released {
			o.sh.release(o.slot, o.hits, o.lid)
			o.released = true
		}
		return false, false
	}
	o.saved = *s
	o.kx.a = int64(len(o.sh.leases[o.slot]))
	ok, o.retry = o.sh.acquire(o.slot, o.lim.count, o.hits, now, now+o.rs.lease, o.lid, o.probe)
	return ok, true
}

func (concurrencyKind) undo(o *op) {
	o.sh.setLeases(o.slot, o.sh.leases[o.slot][:o.leasesBefore()])
}

// revert removes the lease acquired if it is still held (a release or its expiry may have
// freed it already).
func (concurrencyKind) revert(o *op, _ *state, now int64) {
	o.sh.unlease(o.slot, now+o.rs.lease, o.hits, o.lid)
}

// status reports no reset: a lease ends when it is released.
func (concurrencyKind) status(o *op, s *state, _ int64, _ *CheckOptions) (int64, time.Duration) {
	return max(o.lim.count-s.inFlight(), 0), 0
}

// statusDuration is none: a concurrency rule has no window.
func (concurrencyKind) statusDuration(*Rule) time.Duration { return 0 }

func (concurrencyKind) remaining(rs *ruleState, sh *shard, i int32, now int64) int64 {
	lim := rs.limitOf(sh.value(i), false)
	inFlight := int64(0)
	for _, l := range sh.leases[i] {
		if l.exp > now {
			inFlight += l.n
		}
	}
	return max(lim.count-inFlight, 0)
}

func (concurrencyKind) idle(_ *ruleState, sh *shard, i int32, now int64) bool {
	sh.prune(i, now)
	return len(sh.leases[i]) == 0
}

// backAt is the hits in flight and the expiry of the latest lease, packed (packConc).
func (concurrencyKind) backAt(_ *ruleState, sh *shard, i int32) uint64 {
	var exp, n int64
	for _, l := range sh.leases[i] {
		exp, n = max(exp, l.exp), n+l.n
	}
	if n <= 0 || exp <= 0 {
		return 0
	}
	return packConc(uint64(ceilDiv(uint64(exp), uint64(time.Second))), uint64(n))
}

// restore starts a value created before the parked expiry with that many in flight under one
// lease that expires then.
func (concurrencyKind) restore(_ *ruleState, sh *shard, i int32, v uint64, _ *limit, now int64) {
	s := &sh.at(i).st
	expSec, n := unpackConc(v)
	exp := int64(min(expSec, math.MaxInt64/uint64(time.Second))) * int64(time.Second)
	if exp <= now || n == 0 {
		return
	}
	s.setInFlight(int64(n))
	sh.setLeases(i, []lease{{exp: exp, n: int64(n)}})
}

func (concurrencyKind) ended(v uint64, now int64) bool {
	exp, _ := unpackConc(v)
	return int64(exp) <= now/int64(time.Second)
}

func (concurrencyKind) endOf(v uint64) uint64 {
	exp, _ := unpackConc(v)
	return exp
}

func (concurrencyKind) merge(a, b uint64) uint64 { return mergeConc(a, b) }

// The concurrency layout of a parked state packs a lease expiry in whole seconds (rounded up,
// 40 bits, Unix time) with the hits in flight (24 bits, saturating).
const concBits = 24

func packConc(expSec, n uint64) uint64 {
	return min(expSec, 1<<(64-concBits)-1)<<concBits | min(n, 1<<concBits-1)
}

func unpackConc(c uint64) (expSec, n uint64) { return c >> concBits, c & (1<<concBits - 1) }

func mergeConc(a, b uint64) uint64 {
	ea, na := unpackConc(a)
	eb, nb := unpackConc(b)
	return packConc(max(ea, eb), max(na, nb))
}

// inFlight is a concurrency rule's hits in flight (the shard keeps the leases behind them).
func (s *state) inFlight() int64 { return s.x }

func (s *state) setInFlight(n int64) { s.x = max(n, 0) }

// prune drops the expired leases of slot i, and their hits from its count in flight.
// Requires mu held.
func (sh *shard) prune(i int32, now int64) {
	if n := sh.expire(i, now); n > 0 {
		s := &sh.at(i).st
		s.setInFlight(s.inFlight() - n)
	}
}

// expire drops the expired leases (or refund records) of slot i and returns the hits they
// held. Requires mu held.
func (sh *shard) expire(i int32, now int64) int64 {
	ls := sh.leases[i]
	if len(ls) == 0 {
		return 0
	}
	var gone int64
	kept := ls[:0]
	for _, l := range ls {
		if l.exp > now {
			kept = append(kept, l)
		} else {
			gone += l.n
		}
	}
	sh.setLeases(i, kept)
	return gone
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

// leaseHash is the hash kept for lease id, 0 when there is none (an id never hashes to 0).
func (s *store) leaseHash(id string) uint64 {
	if id == "" {
		return 0
	}
	return max(maphash.String(s.seed, id), 1)
}

// acquire takes n of the count slots of the pruned slot i with a lease until exp, under lease
// id (0 for none); a probe only reports whether it could. When it cannot, it takes nothing and
// returns the time until the first lease expires.
func (sh *shard) acquire(i int32, count, n, now, exp int64, id uint64, probe bool) (bool, int64) {
	s := &sh.at(i).st
	ls := sh.leases[i]
	if n > count-s.inFlight() {
		retry := exp - now // nothing in flight to wait for: a lease's length
		if len(ls) > 0 {
			retry = ls[0].exp - now
			for _, l := range ls[1:] {
				retry = min(retry, l.exp-now)
			}
		}
		return false, max(retry, 1)
	}
	if probe {
		return true, 0
	}
	s.setInFlight(s.inFlight() + n)
	sh.setLeases(i, append(ls, lease{exp: exp, n: n, id: id}))
	return true, 0
}

// release gives back n slots of slot i, never below zero: only leases acquired under the same
// id, the latest first (so that leases whose release was lost are the oldest, and expire
// first), and nothing when there is none (the request it names was refused, or its lease
// expired). A release without an id (0) frees only leases acquired without one: it cannot free
// the slots of requests that named themselves, so a client sending bare releases cannot make
// room for itself at their expense. Requires mu held.
func (sh *shard) release(i int32, n int64, id uint64) {
	s := &sh.at(i).st
	s.setInFlight(s.inFlight() - sh.free(i, n, id))
}

// free removes up to n hits from the leases of slot i under id (0: those acquired without an
// id), the latest first, and returns how many it removed. Requires mu held.
func (sh *shard) free(i int32, n int64, id uint64) int64 {
	ls := sh.leases[i]
	var freed int64
	for j := len(ls) - 1; j >= 0 && n > 0; j-- {
		l := &ls[j]
		if l.id != id {
			continue
		}
		k := min(n, l.n)
		l.n -= k
		freed += k
		n -= k
	}
	if freed == 0 {
		return 0
	}
	kept := ls[:0]
	for _, l := range ls {
		if l.n > 0 {
			kept = append(kept, l)
		}
	}
	sh.setLeases(i, kept)
	return freed
}

// maxRecords bounds the refund records kept per value: a value with more acquires whose
// release has not come yet forgets the oldest (whose release then gives nothing back).
const maxRecords = 64

// record notes that an acquire of lease id took n tokens of slot i, refundable until exp: a
// refund rule gives back only what such a record holds. Requires mu held.
func (sh *shard) record(i int32, n, exp int64, id uint64) {
	ls := sh.leases[i]
	if len(ls) >= maxRecords {
		ls = slices.Delete(ls, 0, 1)
	}
	sh.setLeases(i, append(ls, lease{exp: exp, n: n, id: id}))
}

// refundable takes up to n hits from the refund records of lease id of slot i and returns how
// many it took: a release without an id, or of an acquire that was refused, that expired or
// that was refunded already, gets nothing. Requires mu held.
func (sh *shard) refundable(i int32, n int64, id uint64) int64 {
	if id == 0 {
		return 0
	}
	return sh.free(i, n, id)
}

// unlease takes back n hits of slot i's newest lease that expires at exp under id: an acquire
// undone after its lock was released, when the lease may be partly or wholly released or
// expired already (then less, or nothing, is taken back). Leases alike in exp and id are
// interchangeable. Requires mu held.
func (sh *shard) unlease(i int32, exp, n int64, id uint64) {
	s := &sh.at(i).st
	s.setInFlight(s.inFlight() - sh.unrecord(i, exp, n, id))
}

// unrecord takes back n hits of slot i's newest lease (or refund record) that expires at exp
// under id, and returns how many it took. Requires mu held.
func (sh *shard) unrecord(i int32, exp, n int64, id uint64) int64 {
	ls := sh.leases[i]
	for j := len(ls) - 1; j >= 0; j-- {
		l := &ls[j]
		if l.exp != exp || l.id != id {
			continue
		}
		k := min(n, l.n)
		l.n -= k
		if l.n == 0 {
			ls = slices.Delete(ls, j, j+1)
		}
		sh.setLeases(i, ls)
		return k
	}
	return 0
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
