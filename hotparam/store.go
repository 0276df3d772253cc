package hotparam

import (
	"hash/maphash"
	"strings"
	"sync"
)

// store holds the states of one rule's values, at most capacity of them, in shards with a lock
// each. Each shard evicts with S3-FIFO: a new value enters a small FIFO queue and leaves it for
// good unless it was asked for again, in which case it moves to the main queue, where a value is
// evicted only after a full round without being asked for. A flood of one-off values thus only
// cycles through the small queue and cannot push a value in steady use out of the main queue
// (scan resistance). A ghost table of recently evicted values sends a value that comes back
// straight to the main queue.
//
// The value states live inline in one slice per shard (no pointer per value), indexed by a map;
// the queues are doubly linked lists threaded through that slice.
type store struct {
	id     uint64 // orders the locks of different stores
	seed   maphash.Seed
	mask   uint64
	shards []shard
}

// shard is one lock's part of a store. All its fields are guarded by mu.
type shard struct {
	mu       sync.Mutex
	seed     maphash.Seed // the store's
	index    map[string]int32
	slots    []slot
	freeHead int32 // free slots chained through next; -1 when none
	size     int
	cap      int
	smallCap int
	small    queue
	main     queue
	ghost    []uint32          // fingerprints of values recently evicted from the small queue
	ghostN   int               // the ghost table's size, allocated on first use
	leases   map[int32][]lease // concurrency rules: the leases of each value
	evicted  uint64
	_        [64]byte // keeps neighbouring shards' locks off one cache line
}

// where a slot is.
const (
	inFree uint8 = iota
	inSmall
	inMain
)

type slot struct {
	key        string
	st         state
	prev, next int32
	freq       uint8 // accesses since it last moved, up to 3
	where      uint8
	pinned     bool // in use by the Check holding the lock: not evictable
}

type queue struct {
	head, tail int32
	n          int
}

// lease is an acquire of n concurrency slots that expires at exp (Unix ns).
type lease struct {
	exp int64
	n   int64
}

// maxShards bounds the shards of a store; minPerShard keeps small stores in one shard so that
// their capacity is exact.
const (
	maxShards   = 64
	minPerShard = 1024
)

func newStore(id uint64, capacity int) *store {
	n := 1
	for n < maxShards && capacity/(n*2) >= minPerShard {
		n *= 2
	}
	s := &store{id: id, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n)}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.freeHead = -1
		sh.seed = s.seed
		sh.small = queue{head: -1, tail: -1}
		sh.main = queue{head: -1, tail: -1}
	}
	s.setCapacity(capacity)
	return s
}

// setCapacity spreads capacity over the shards and evicts what no longer fits.
func (s *store) setCapacity(capacity int) {
	n := len(s.shards)
	for i := range s.shards {
		sh := &s.shards[i]
		c := capacity / n
		if i < capacity%n {
			c++
		}
		sh.mu.Lock()
		sh.cap = max(c, 1)
		sh.smallCap = max(sh.cap/10, 1)
		g := 1
		for g < sh.cap {
			g *= 2
		}
		sh.ghostN = g
		if sh.ghost != nil && len(sh.ghost) != g {
			sh.ghost = make([]uint32, g)
		}
		for sh.size > sh.cap && sh.evict() {
		}
		sh.mu.Unlock()
	}
}

func (s *store) hash(v string) uint64 { return maphash.String(s.seed, v) }

func (s *store) shard(h uint64) *shard { return &s.shards[h&s.mask] }

// get returns the slot of key, creating it when absent (created is then true and the slot's
// state zero). Requires mu held.
func (sh *shard) get(key string, h uint64) (i int32, created bool) {
	if i, ok := sh.index[key]; ok {
		sl := &sh.slots[i]
		if sl.freq < 3 {
			sl.freq++
		}
		return i, false
	}
	for sh.size >= sh.cap && sh.evict() {
	}
	i = sh.alloc()
	sl := &sh.slots[i]
	sl.key = strings.Clone(key) // the caller's string may live in a reused buffer
	if sh.index == nil {
		sh.index = make(map[string]int32)
	}
	sh.index[sl.key] = i
	sh.size++
	if sh.ghost == nil {
		sh.ghost = make([]uint32, sh.ghostN)
	}
	gi, fp := sh.ghostAt(h)
	if sh.ghost[gi] == fp {
		sh.ghost[gi] = 0
		sh.push(&sh.main, i, inMain)
	} else {
		sh.push(&sh.small, i, inSmall)
	}
	return i, true
}

func (sh *shard) ghostAt(h uint64) (int, uint32) {
	return int((h >> 32) & uint64(len(sh.ghost)-1)), uint32(h) | 1
}

// alloc takes a free slot, growing the slots up to the capacity at most (beyond it only when
// every slot is pinned by the current Check). Requires mu held.
func (sh *shard) alloc() int32 {
	if i := sh.freeHead; i >= 0 {
		sh.freeHead = sh.slots[i].next
		return i
	}
	if len(sh.slots) == cap(sh.slots) {
		c := min(max(2*len(sh.slots), 16), sh.cap)
		if len(sh.slots) >= 4096 {
			c = min(len(sh.slots)+len(sh.slots)/4, sh.cap)
		}
		c = max(c, len(sh.slots)+1)
		grown := make([]slot, len(sh.slots), c)
		copy(grown, sh.slots)
		sh.slots = grown
	}
	sh.slots = append(sh.slots, slot{})
	return int32(len(sh.slots) - 1)
}

// evict evicts one unpinned value and reports whether it found one. Requires mu held.
func (sh *shard) evict() bool {
	for tries := 4*sh.size + 4; tries > 0; tries-- {
		if sh.small.n > 0 && (sh.small.n >= sh.smallCap || sh.main.n == 0) {
			i := sh.pop(&sh.small)
			sl := &sh.slots[i]
			if sl.pinned || sl.freq > 0 {
				sl.freq = 0
				sh.push(&sh.main, i, inMain)
				continue
			}
			gi, fp := sh.ghostAt(maphash.String(sh.seed, sl.key))
			sh.ghost[gi] = fp
			sh.drop(i)
			sh.evicted++
			return true
		}
		if sh.main.n == 0 {
			return false
		}
		i := sh.pop(&sh.main)
		sl := &sh.slots[i]
		if sl.pinned || sl.freq > 0 {
			if sl.freq > 0 {
				sl.freq--
			}
			sh.push(&sh.main, i, inMain)
			continue
		}
		sh.drop(i)
		sh.evicted++
		return true
	}
	return false
}

// remove forgets slot i (unlinking it from its queue). Requires mu held.
func (sh *shard) remove(i int32) {
	sl := &sh.slots[i]
	switch sl.where {
	case inSmall:
		sh.unlink(&sh.small, i)
	case inMain:
		sh.unlink(&sh.main, i)
	default:
		return
	}
	sh.drop(i)
}

// drop frees the unlinked slot i. Requires mu held.
func (sh *shard) drop(i int32) {
	sl := &sh.slots[i]
	delete(sh.index, sl.key)
	if sh.leases != nil {
		delete(sh.leases, i)
	}
	*sl = slot{next: sh.freeHead, prev: -1}
	sh.freeHead = i
	sh.size--
}

func (sh *shard) push(q *queue, i int32, where uint8) {
	sl := &sh.slots[i]
	sl.where, sl.prev, sl.next = where, q.tail, -1
	if q.tail >= 0 {
		sh.slots[q.tail].next = i
	} else {
		q.head = i
	}
	q.tail = i
	q.n++
}

func (sh *shard) pop(q *queue) int32 {
	i := q.head
	sh.unlink(q, i)
	return i
}

func (sh *shard) unlink(q *queue, i int32) {
	sl := &sh.slots[i]
	if sl.prev >= 0 {
		sh.slots[sl.prev].next = sl.next
	} else {
		q.head = sl.next
	}
	if sl.next >= 0 {
		sh.slots[sl.next].prev = sl.prev
	} else {
		q.tail = sl.prev
	}
	sl.prev, sl.next, sl.where = -1, -1, inFree
	q.n--
}
