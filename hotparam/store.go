package hotparam

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// store holds the states of one rule's values, at most capacity of them, in shards with a lock
// each. Each shard evicts with S3-FIFO: a new value enters a small FIFO queue and leaves it for
// good unless it was asked for again, in which case it moves to the main queue, where a value is
// evicted only after a full round without being asked for. A flood of one-off values thus only
// cycles through the small queue and cannot push a value in steady use out of the main queue
// (scan resistance). A ghost table of recently evicted values sends a value that comes back
// straight to the main queue.
//
// The value states live inline in pages of slots per shard (no pointer per value), indexed by a
// map; the queues are doubly linked lists threaded through the slots. The capacity holds for the
// store as a whole: a shard inserting into a full store evicts one of its own values.
type store struct {
	id       uint64 // orders the locks of different stores
	seed     maphash.Seed
	mask     uint64       // the number of shards less one
	size     atomic.Int64 // values tracked, over all shards
	capacity atomic.Int64
	// shards is nil until the store tracks a value, and again once Sweep found every shard
	// empty: a rule that tracks nothing costs no shard. mu serializes making and dropping them.
	shards atomic.Pointer[[]shard]
	mu     sync.Mutex
	// owner is the rule that parks the store's evicted values' states in the ledgers: the one
	// last built on it.
	owner       atomic.Pointer[ruleState]
	budget      *budget      // shared by the stores of a Limiter and of its reloads
	ledgerBytes atomic.Int64 // the shards' ledgers
	overflows   atomic.Uint64
	reported    atomic.Int64 // the shard clock of the last OnOverflow call
}

// shard is one lock's part of a store. All its fields are guarded by mu.
type shard struct {
	mu       sync.Mutex
	st       *store
	seed     maphash.Seed // the store's
	index    index
	pages    [][]slot // pages of pageSize slots
	links    [][]link // the slots' links, page for page
	long     longKeys
	used     int   // slots handed out, free or not
	freeHead int32 // free slots chained through next; -1 when none
	size     int
	share    int // the shard's share of the capacity: sizes its queues and ghost table
	smallCap int
	small    queue
	main     queue
	ghost    []uint32          // fingerprints of values recently evicted from the small queue
	dead     bool              // dropped by Sweep: a caller that locked it must start again
	leases   map[int32][]lease // concurrency rules: the leases of each value; refund rules: records
	turns    []givenUp         // throttle rules: turns given up behind later ones (cancel.go)
	ledger   ledger            // states of evicted values not back to the default (flood.go)
	clock    int64             // the latest instant (Unix ns) a value was asked for at
	evicted  uint64
	// overflows counts the states forgotten and the new values refused for a full ledger;
	// noRoom is set by an evict that found only values whose states the full ledger refused.
	overflows uint64
	noRoom    bool
	_         [64]byte // keeps neighbouring shards' locks off one cache line
}

// where a slot is.
const (
	inFree uint8 = iota
	inSmall
	inMain
)

// slot is a value's hot part: all that a decision on a tracked value reads and writes, in 64
// bytes (one cache line: pages of slots are 64-byte aligned, see newPage) and no pointer, so
// that the collector does not scan the pages. The queue links, touched only on inserts and
// evictions, live apart in links.
type slot struct {
	key vkey
	st  state
	counters
	freq   uint8 // accesses since it last moved, up to 3
	where  uint8
	pinned bool // in use by the Check holding the lock: not evictable
	// overflow: made beyond the capacity for a value the rule refuses (OverflowRefuse with a
	// full ledger); the Check refuses it and drops it before it unlocks.
	overflow bool
}

// link is a slot's place in its queue (or, for a free slot, in the free chain through next).
type link struct {
	prev, next int32
}

type queue struct {
	head, tail int32
	n          int
}

// shortKey is the longest value a slot holds inline: most values (user and item ids, IPv4
// addresses) fit, and finding one then reads its index entry and its slot only, not a key
// elsewhere on the heap (a cache miss more at a million values).
const shortKey = 15

// lease is an acquire of n concurrency slots that expires at exp (Unix ns), with the hash of
// its Entry.LeaseID (0 for none).
type lease struct {
	exp int64
	n   int64
	id  uint64
}

// maxShards bounds the shards of a store; minPerShard keeps small stores in few shards.
// pageBits sizes the pages of slots.
const (
	maxShards   = 64
	minPerShard = 1024
	pageBits    = 8
	pageSize    = 1 << pageBits
)

func newStore(id uint64, capacity int, b *budget) *store {
	n := 1
	for n < maxShards && capacity/(n*2) >= minPerShard {
		n *= 2
	}
	s := &store{id: id, seed: maphash.MakeSeed(), mask: uint64(n - 1), budget: b}
	s.capacity.Store(int64(max(capacity, 1)))
	return s
}

// current returns the shards, nil when there are none.
func (s *store) current() []shard {
	if p := s.shards.Load(); p != nil {
		return *p
	}
	return nil
}

// active returns the shards, making them when there are none.
func (s *store) active() []shard {
	if p := s.shards.Load(); p != nil {
		return *p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.shards.Load(); p != nil {
		return *p
	}
	shards := make([]shard, s.mask+1)
	for i := range shards {
		sh := &shards[i]
		sh.st = s
		sh.seed = s.seed
		sh.freeHead = -1
		sh.small = queue{head: -1, tail: -1}
		sh.main = queue{head: -1, tail: -1}
		sh.setShare(int(s.capacity.Load()), len(shards))
	}
	s.shards.Store(&shards)
	return shards
}

func (sh *shard) setShare(capacity, n int) {
	sh.share = max((capacity+n-1)/n, 1)
	sh.smallCap = max(sh.share/10, 1)
}

// setCapacity sets the capacity and evicts what no longer fits.
func (s *store) setCapacity(capacity int) {
	capacity = max(capacity, 1)
	s.mu.Lock()
	s.capacity.Store(int64(capacity))
	shards := s.current()
	for i := range shards {
		sh := &shards[i]
		sh.mu.Lock()
		sh.setShare(capacity, len(shards))
		sh.mu.Unlock()
	}
	s.mu.Unlock()
	for s.size.Load() > int64(capacity) {
		evicted := false
		for i := range shards {
			sh := &shards[i]
			sh.mu.Lock()
			if !sh.dead && s.size.Load() > int64(capacity) && sh.evict() {
				evicted = true
			}
			sh.mu.Unlock()
		}
		if !evicted {
			return
		}
	}
}

func (s *store) hash(v string) uint64 { return maphash.String(s.seed, v) }

// at is slot i. Requires mu held.
func (sh *shard) at(i int32) *slot { return &sh.pages[i>>pageBits][i&(pageSize-1)] }

// link is slot i's link. Requires mu held.
func (sh *shard) link(i int32) *link { return &sh.links[i>>pageBits][i&(pageSize-1)] }

// value is the value of slot i, sharing the slot's memory (see vkey.view). Requires mu held.
func (sh *shard) value(i int32) string { return sh.at(i).key.view(&sh.long) }

// newPage makes a page of slots. A page is 16 KB of pointer-free memory, which the runtime
// hands out from its 16 KB size class at a multiple of 8 KB: every slot sits in one cache line.
func newPage() []slot { return make([]slot, pageSize) }

// get returns the slot of key, creating it when absent (created is then true, the slot's
// state zero and parked the state its ledger held for it, 0 for none: see restore). A value
// created beyond the capacity because the rule refuses it has its slot's overflow set.
// Requires mu held.
func (sh *shard) get(key string, h uint64, now int64) (i int32, created bool, parked uint64) {
	sh.clock = max(sh.clock, now)
	if _, i := sh.index.find(sh, key, h); i >= 0 {
		sl := sh.at(i)
		if sl.freq < 3 {
			sl.freq++
		}
		return i, false, 0
	}
	if sh.ledger.n > 0 {
		parked = sh.ledger.take(h) // taken first: its room lets a full ledger take a victim's
	}
	capacity := sh.st.capacity.Load()
	sh.noRoom = false
	for sh.st.size.Load() >= capacity && sh.evict() {
	}
	overflow := sh.noRoom && sh.st.size.Load() >= capacity
	if overflow {
		if parked != 0 {
			sh.ledger.insert(ledgerEntry{ledgerKey(h), parked}) // back where it was taken from
			parked = 0
		}
		if rs := sh.st.owner.Load(); rs != nil {
			sh.overflowed(rs, OverflowRefuse)
		}
	}
	i = sh.alloc()
	sl := sh.at(i)
	sl.overflow = overflow
	sl.key.set(&sh.long, key)
	sh.index.insert(h, i)
	sh.size++
	sh.st.size.Add(1)
	sh.growGhost()
	gi, fp := sh.ghostAt(h)
	if sh.ghost[gi] == fp {
		sh.ghost[gi] = 0
		sh.push(&sh.main, i, inMain)
	} else {
		sh.push(&sh.small, i, inSmall)
	}
	return i, true, parked
}

// growGhost sizes the ghost table to the shard's values (a power of two, up to its share),
// starting afresh when it grows. Requires mu held.
func (sh *shard) growGhost() {
	want := 64
	for want < sh.size && want < sh.share {
		want *= 2
	}
	if len(sh.ghost) < want {
		sh.ghost = make([]uint32, want)
	}
}

func (sh *shard) ghostAt(h uint64) (int, uint32) {
	return int((h >> 32) & uint64(len(sh.ghost)-1)), uint32(h) | 1
}

// alloc takes a free slot, adding a page when none is left. Requires mu held.
func (sh *shard) alloc() int32 {
	if i := sh.freeHead; i >= 0 {
		sh.freeHead = sh.link(i).next
		return i
	}
	if sh.used == len(sh.pages)*pageSize {
		sh.pages = append(sh.pages, newPage())
		sh.links = append(sh.links, make([]link, pageSize))
	}
	sh.used++
	return int32(sh.used - 1)
}

// evict evicts one unpinned value and reports whether it found one. A value whose state the
// full ledger refuses stays (in the main queue); after refuseTries of them evict gives up and
// sets noRoom. Requires mu held.
func (sh *shard) evict() bool {
	refused := 0
	for tries := 4*sh.size + 4; tries > 0; tries-- {
		if sh.small.n > 0 && (sh.small.n >= sh.smallCap || sh.main.n == 0) {
			i := sh.pop(&sh.small)
			sl := sh.at(i)
			if sl.pinned || sl.freq > 0 {
				sl.freq = 0
				sh.push(&sh.main, i, inMain)
				continue
			}
			h := maphash.String(sh.seed, sl.key.view(&sh.long))
			if !sh.forget(i, h) {
				sh.push(&sh.main, i, inMain)
				if refused++; refused >= refuseTries {
					sh.noRoom = true
					return false
				}
				continue
			}
			gi, fp := sh.ghostAt(h)
			sh.ghost[gi] = fp
			return true
		}
		if sh.main.n == 0 {
			return false
		}
		i := sh.pop(&sh.main)
		sl := sh.at(i)
		if sl.pinned || sl.freq > 0 {
			if sl.freq > 0 {
				sl.freq--
			}
			sh.push(&sh.main, i, inMain)
			continue
		}
		if !sh.forget(i, maphash.String(sh.seed, sl.key.view(&sh.long))) {
			sh.push(&sh.main, i, inMain)
			if refused++; refused >= refuseTries {
				sh.noRoom = true
				return false
			}
			continue
		}
		return true
	}
	return false
}

// forget evicts the unlinked slot i, whose key hashes to h, parking its state in the ledger
// unless it is back to the default (see flood.go). It reports false, changing nothing, when
// the full ledger refuses the state. Requires mu held.
func (sh *shard) forget(i int32, h uint64) bool {
	if rs := sh.st.owner.Load(); rs != nil {
		if v := rs.depletion(sh, i); v != 0 && !sh.park(rs, h, v) {
			return false
		}
	}
	sh.drop(i, h)
	sh.evicted++
	return true
}

// remove forgets slot i (unlinking it from its queue). Requires mu held.
func (sh *shard) remove(i int32) {
	sl := sh.at(i)
	switch sl.where {
	case inSmall:
		sh.unlink(&sh.small, i)
	case inMain:
		sh.unlink(&sh.main, i)
	default:
		return
	}
	sh.drop(i, maphash.String(sh.seed, sl.key.view(&sh.long)))
}

// drop frees the unlinked slot i, whose key hashes to h. Requires mu held.
func (sh *shard) drop(i int32, h uint64) {
	sl := sh.at(i)
	if pos, _ := sh.index.find(sh, sl.key.view(&sh.long), h); pos >= 0 {
		sh.index.delete(pos)
	}
	if sh.leases != nil {
		delete(sh.leases, i)
	}
	if len(sh.turns) > 0 {
		sh.forgetGivenUp(i)
	}
	sl.key.clear(&sh.long)
	*sl = slot{}
	*sh.link(i) = link{next: sh.freeHead, prev: -1}
	sh.freeHead = i
	sh.size--
	sh.st.size.Add(-1)
}

func (sh *shard) push(q *queue, i int32, where uint8) {
	sh.at(i).where = where
	ln := sh.link(i)
	ln.prev, ln.next = q.tail, -1
	if q.tail >= 0 {
		sh.link(q.tail).next = i
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
	ln := sh.link(i)
	if ln.prev >= 0 {
		sh.link(ln.prev).next = ln.next
	} else {
		q.head = ln.next
	}
	if ln.next >= 0 {
		sh.link(ln.next).prev = ln.prev
	} else {
		q.tail = ln.prev
	}
	ln.prev, ln.next = -1, -1
	sh.at(i).where = inFree
	q.n--
}
