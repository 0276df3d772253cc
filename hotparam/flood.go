package hotparam

import (
	"math"
	"time"
)

// Floods and eviction.
//
// A store holds at most Capacity values; a flood of new values makes it evict. Forgetting a
// value whose state is back to the default (a full bucket, a throttle with no slot ahead,
// nothing in flight) loses nothing: it would be created in that same state. Forgetting one
// that is depleted would hand it a full allowance when it comes back, so eviction folds such a
// value's state into the shard's depleted sketch, and a value is created from the sketch:
//
//   - reject: the instant the bucket is full again; a value created before it gets the tokens
//     it would have refilled by now from empty at (that instant - time to fill);
//   - throttle: the instant of its next free slot, rounded up to the nanosecond;
//   - concurrency: its hits in flight and the expiry of its latest lease; a value created
//     before that expiry starts with that many in flight under one lease that expires then.
//
// The sketch is count-min style: two rows of cells indexed by two hashes of the value; a value
// folds into both cells by keeping the larger (later, more in flight) and is read back as the
// smaller of its two cells. A cell only ever over-states the state of any value folded into
// it, so a value is never created with more than it had when it was evicted; a value that
// never was tracked may be created with less (it shares both cells with depleted values),
// which is the only cost of a flood for values it did not touch. The cells are allocated on
// the first fold of a shard: 2 rows of sketchWidth(share) cells of 8 bytes, 8 to 16 bytes per
// value of the shard's share of Capacity.

// sketch is one shard's depleted sketch.
type sketch struct {
	cells []uint64 // two rows of mask+1 cells
	mask  uint64
}

// sketchWidth is the cells per row for a shard holding share values: share/2 rounded up to a
// power of two, at least 16.
func sketchWidth(share int) int {
	w := 16
	for w < share/2 {
		w *= 2
	}
	return w
}

// cellsOf are the two cells of a value of hash h. The low bits of h chose the value's shard,
// the same for every value of a shard: the rows are indexed by other bits.
func (k *sketch) cellsOf(h uint64) (int, int) {
	w := k.mask + 1
	h2 := (h ^ h>>29) * 0x9e3779b97f4a7c15
	return int((h >> 16) & k.mask), int(w + (h2>>32)&k.mask)
}

// fold merges v into the cells of h, keeping each cell's larger value; conc selects the packed
// concurrency layout (see packConc), merged field by field.
func (sh *shard) fold(h, v uint64, conc bool) {
	k := sh.depleted
	if k == nil {
		w := sketchWidth(sh.share)
		k = &sketch{cells: make([]uint64, 2*w), mask: uint64(w - 1)}
		sh.depleted = k
	}
	i, j := k.cellsOf(h)
	for _, c := range [2]int{i, j} {
		if conc {
			k.cells[c] = mergeConc(k.cells[c], v)
		} else {
			k.cells[c] = max(k.cells[c], v)
		}
	}
}

// unfold reads back the state folded for h: the smaller of its two cells (field by field for
// the concurrency layout); 0 when nothing was folded.
func (sh *shard) unfold(h uint64, conc bool) uint64 {
	k := sh.depleted
	if k == nil {
		return 0
	}
	i, j := k.cellsOf(h)
	a, b := k.cells[i], k.cells[j]
	if conc {
		ea, na := unpackConc(a)
		eb, nb := unpackConc(b)
		return packConc(min(ea, eb), min(na, nb))
	}
	return min(a, b)
}

// The concurrency layout packs a lease expiry in whole seconds (rounded up, 40 bits, Unix
// time) with the hits in flight (24 bits, saturating).
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

// depletion is what evicting the value of slot i would lose, for the sketch: 0 when its state
// is the default by the shard's clock, else the cell value to fold. Requires the shard locked.
func (rs *ruleState) depletion(sh *shard, i int32) uint64 {
	v := rs.backAt(sh, i)
	if rs.kind == kindConcurrency {
		if exp, _ := unpackConc(v); int64(exp) <= sh.clock/int64(time.Second) {
			return 0
		}
	} else if v <= uint64(max(sh.clock, 0)) {
		return 0
	}
	return v
}

// backAt is the instant the state of slot i is back to the default, as a cell value (the
// packed layout for concurrency), 0 when it is the default already. Requires the shard
// locked.
func (rs *ruleState) backAt(sh *shard, i int32) uint64 {
	sl := sh.at(i)
	s := &sl.st
	switch rs.kind {
	case kindReject:
		lim := rs.limitOf(sl.key, rs.rule.Cluster)
		if lim.p == 0 || s.scale == 0 {
			return 0
		}
		units, at := s.bucket()
		units = rescale(units, s.scale, lim.q, int64(lim.full))
		if uint64(units) >= lim.full {
			return 0
		}
		return satAdd(at, ceilDiv(lim.full-uint64(max(units, 0)), lim.p))
	case kindThrottle:
		next, frac := s.throttle()
		return satAdd(next, min(frac, 1))
	case kindConcurrency:
		var exp, n int64
		for _, l := range sh.leases[i] {
			exp, n = max(exp, l.exp), n+l.n
		}
		if n <= 0 || exp <= 0 {
			return 0
		}
		return packConc(uint64(ceilDiv(uint64(exp), uint64(time.Second))), uint64(n))
	}
	return 0
}

// restore gives the value of slot i, just created at now with hash h, what the sketch holds
// for it. Requires the shard locked.
func (rs *ruleState) restore(sh *shard, i int32, h uint64, lim *limit, now int64) {
	v := sh.unfold(h, rs.kind == kindConcurrency)
	if v == 0 {
		return
	}
	s := &sh.at(i).st
	switch rs.kind {
	case kindReject:
		until := int64(min(v, math.MaxInt64))
		if until <= now || lim.p == 0 {
			return
		}
		units := int64(0)
		if d := until - now; d < lim.ttf {
			units = int64(lim.full - min(uint64(d)*lim.p, lim.full)) // d < ttf: d*p < full+p
		}
		s.setBucket(units, now, lim.q)
	case kindThrottle:
		until := int64(min(v, math.MaxInt64))
		if next, _ := s.throttle(); until > next {
			s.setThrottle(until, 0, s.scale)
		}
	case kindConcurrency:
		expSec, n := unpackConc(v)
		exp := int64(min(expSec, math.MaxInt64/uint64(time.Second))) * int64(time.Second)
		if exp <= now || n == 0 {
			return
		}
		s.setInFlight(int64(n))
		sh.setLeases(i, []lease{{exp: exp, n: int64(n)}})
	}
}

// satAdd is a+b for b >= 0, saturating at MaxInt64, as a cell value (at least 1).
func satAdd(a, b int64) uint64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return uint64(max(a+b, 1))
}
