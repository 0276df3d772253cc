package hotparam

import (
	"cmp"
	"slices"
)

// A call locks the shards of all its values at once, always in one order (store, then shard),
// and pins each value for the time it holds the locks.

// byLockOrder orders ops by store, then shard: the order their shards are locked in.
func byLockOrder(a, b op) int {
	if c := cmp.Compare(a.rs.store.id, b.rs.store.id); c != 0 {
		return c
	}
	return cmp.Compare(a.shard, b.shard)
}

// lockOrderSmall is the most ops sortLockOrder sorts through an index on the stack.
const lockOrderSmall = 64

// sortLockOrder sorts ops stably by store, then shard (byLockOrder). An op is large: for up to
// lockOrderSmall ops it sorts their indices instead and then moves each op once, following the
// permutation's cycles, rather than swapping ops in place; ops already in order are not moved.
func sortLockOrder(ops []op) {
	n := len(ops)
	if n <= 1 {
		return
	}
	if n > lockOrderSmall {
		slices.SortStableFunc(ops, byLockOrder)
		return
	}
	before := func(a, b *op) bool {
		if a.rs.store.id != b.rs.store.id {
			return a.rs.store.id < b.rs.store.id
		}
		return a.shard < b.shard
	}
	sorted := true
	for i := 1; i < n && sorted; i++ {
		sorted = !before(&ops[i], &ops[i-1])
	}
	if sorted {
		return
	}
	var idx [lockOrderSmall]uint8
	for i := range n {
		idx[i] = uint8(i)
	}
	for i := 1; i < n; i++ { // insertion sort: stable, and the fastest for a few
		for j := i; j > 0 && before(&ops[idx[j]], &ops[idx[j-1]]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	// ops[k] takes the op at idx[k]: each cycle of the permutation moves its ops once.
	for start := range n {
		if int(idx[start]) == start {
			continue
		}
		tmp := ops[start]
		k := start
		for {
			src := int(idx[k])
			idx[k] = uint8(k)
			if src == start {
				ops[k] = tmp
				break
			}
			ops[k] = ops[src]
			k = src
		}
	}
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
	sortLockOrder(ops)
	for !lockShards(ops) {
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
		slot, created := o.sh.get(o.value, o.hash, now)
		o.slot = slot
		sl := o.sh.at(slot)
		sl.pinned = true
		if created {
			switch o.rs.kind {
			case kindReject:
				o.lim.initBucket(&sl.st, now)
			case kindThrottle:
				o.lim.initThrottle(&sl.st, now)
			}
			sl.win = uint32(now / o.rs.window)
			o.rs.restore(o.sh, slot, o.hash, o.lim, now)
		}
	}
}

// lockShards locks the shards of the sorted ops. If one of them was dropped by Sweep, it
// unlocks them all and returns false.
func lockShards(ops []op) bool {
	var prev *shard
	dead := false
	for i := range ops {
		if sh := ops[i].sh; sh != nil && sh != prev {
			sh.mu.Lock()
			dead = dead || sh.dead
			prev = sh
		}
	}
	if !dead {
		return true
	}
	prev = nil
	for i := range ops {
		if sh := ops[i].sh; sh != nil && sh != prev {
			sh.mu.Unlock()
			prev = sh
		}
	}
	return false
}

// unlock unpins the ops' values and unlocks their shards.
func unlock(ops []op) {
	var prev *shard
	for i := range ops {
		o := &ops[i]
		if o.sh == nil {
			continue
		}
		o.sh.at(o.slot).pinned = false
		if o.sh != prev {
			o.sh.mu.Unlock()
			prev = o.sh
		}
	}
}
