package hotparam

import (
	"cmp"
	"slices"
)

// A call locks the shards of all its values at once, always in one order (store, then shard),
// and pins each value for the time it holds the locks.

// cmpLockOrder orders ops by store, then shard: the order their shards are locked in.
func cmpLockOrder(a, b *op) int {
	if c := cmp.Compare(a.rs.store.id, b.rs.store.id); c != 0 {
		return c
	}
	return cmp.Compare(a.shard, b.shard)
}

// lockOrderSmall is the most ops lockOrder orders in the caller's array, on its stack.
const lockOrderSmall = 64

// lockOrder returns the positions of ops in the order their shards are locked in: by store,
// then shard, ties in call order (a stable sort by cmpLockOrder). The ops stay where they are,
// in the call's order: an op is large and holds pointers, and moving it would pay the GC's
// write barriers on each. Up to lockOrderSmall positions are kept in idx; more, in a slice of
// their own.
func lockOrder(ops []op, idx *[lockOrderSmall]int32) []int32 {
	n := len(ops)
	var order []int32
	if n <= lockOrderSmall {
		order = idx[:n]
	} else {
		order = make([]int32, n)
	}
	for i := range order {
		order[i] = int32(i)
	}
	if n > lockOrderSmall || !sortByKeys(ops, order) {
		slices.SortStableFunc(order, func(a, b int32) int { return cmpLockOrder(&ops[a], &ops[b]) })
	}
	return order
}

// sortByKeys puts order (the positions of ops, at most lockOrderSmall) in lock order by
// sorting one integer a position, store id, shard and position packed in it: unique, so the
// order is the stable one, read once from each op rather than at every comparison. It
// reports false, leaving order alone, when a store id or shard does not fit.
func sortByKeys(ops []op, order []int32) bool {
	var keys [lockOrderSmall]uint64
	for i := range order {
		o := &ops[i]
		if o.rs.store.id >= 1<<48 || uint32(o.shard) >= 1<<8 {
			return false
		}
		keys[i] = o.rs.store.id<<16 | uint64(o.shard)<<8 | uint64(i)
	}
	k := keys[:len(order)]
	slices.Sort(k)
	for i, key := range k {
		order[i] = int32(key & 0xff)
	}
	return true
}

// lock locks the shards of the active ops in a fixed order (store, then shard), so that
// concurrent calls, also of Limiters sharing stores after a reload, cannot deadlock; then it
// finds or creates each op's value and pins it so that the call's own inserts cannot evict it.
func (l *Limiter) lock(now int64, ops []op, fb bool) {
	for i := range ops {
		o := &ops[i]
		if !o.active(fb) {
			o.sh = nil
			continue
		}
		o.lim = o.rs.limitOf(o.value, fb && o.remote)
		h := o.rs.store.hash(o.value)
		o.shard = int32(h & o.rs.store.mask)
		o.sh = &o.rs.store.active()[o.shard]
		o.hash = h
		o.lid = o.rs.store.leaseHash(o.leaseID)
	}
	var idx [lockOrderSmall]int32
	order := lockOrder(ops, &idx)
	for !lockShards(ops, order) {
		// Sweep dropped a store's shards before they were locked: take the new ones
		for i := range ops {
			if o := &ops[i]; o.sh != nil {
				o.sh = &o.rs.store.active()[o.shard]
			}
		}
	}
	for i := range ops {
		o := &ops[i]
		if o.sh == nil {
			continue
		}
		if o.early { // locked again: find the value without counting another access
			if _, slot := o.sh.index.find(o.sh, o.value, o.hash); slot >= 0 {
				o.slot = slot
				o.sh.at(slot).pinned = true
				continue
			}
			o.gone = true
		}
		slot, created, parked := o.sh.get(o.value, o.hash, now)
		o.slot = slot
		sl := o.sh.at(slot)
		sl.pinned = true
		if created {
			o.rs.kind.init(o.lim, &sl.st, now)
			sl.win = uint32(now / o.rs.window)
			o.rs.restore(o.sh, slot, parked, o.lim, now)
		}
	}
}

// lockShards locks the shards of the ops in order (lockOrder), each once: the first op of a
// shard in that order owns its lock, and unlock releases it. If one of the shards was dropped
// by Sweep, it unlocks them all and returns false.
func lockShards(ops []op, order []int32) bool {
	var prev *shard
	dead := false
	for _, at := range order {
		o := &ops[at]
		o.owner = false
		if o.sh != nil && o.sh != prev {
			o.sh.mu.Lock()
			o.owner = true
			dead = dead || o.sh.dead
			prev = o.sh
		}
	}
	if !dead {
		return true
	}
	unlockShards(ops)
	return false
}

// unlockShards unlocks the shards whose locks the ops own.
func unlockShards(ops []op) {
	for i := range ops {
		if o := &ops[i]; o.owner {
			o.sh.mu.Unlock()
			o.owner = false
		}
	}
}

// unlock unpins the ops' values, drops those made beyond the capacity (refused, see
// slot.overflow), then unlocks their shards.
func unlock(ops []op) {
	for i := range ops {
		if o := &ops[i]; o.sh != nil {
			sl := o.sh.at(o.slot)
			sl.pinned = false
			if sl.overflow && sl.where != inFree {
				o.sh.remove(o.slot)
			}
		}
	}
	unlockShards(ops)
}
