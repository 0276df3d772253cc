package hotparam

import (
	"math"
	"sync/atomic"
	"time"
)

// Floods and eviction.
//
// A store holds at most Capacity values; a flood of new values makes it evict. Forgetting a
// value whose state is back to the default (a full bucket, a throttle with no slot ahead,
// nothing in flight) loses nothing: it would be created in that same state. Forgetting one
// that is not would hand it a new allowance when it comes back, so eviction parks such a
// value's state in the shard's ledger, exactly, and a value is created from its entry there:
//
//   - reject: the instant the bucket is full again; a value created before it gets the tokens
//     it would have refilled by now from empty at (that instant - time to fill), which is its
//     state at eviction, less what under a nanosecond of refill earns;
//   - throttle: the instant of its next free slot, rounded up to the nanosecond;
//   - concurrency: its hits in flight and the expiry of its latest lease (in whole seconds,
//     rounded up); a value created before that expiry starts with that many in flight under
//     one lease that expires then.
//
// An entry is 16 bytes: the value's 64-bit hash (seeded per store at random) and that state.
// It expires when the state is back to the default (Sweep drops it, and a full ledger takes
// its place first), and is taken out when the value comes back. Two values of one hash share
// an entry holding the later state: a value can then start with less than it has, never with
// more. The chance that a new value finds an entry of another is the ledger's entries over
// 2^64: under 1e-12 for the 6 million entries of the default budget.
//
// The ledger of a shard grows by doubling (at 3/4 full) within the rule's budget, its share of
// Rule.StateBudget, and within what Options.StateBudget leaves over all rules, then fills to
// 7/8. Past that the rule's Overflow applies: OverflowForget forgets the entry of the 16 next
// to the new one's place that ends soonest (for a flood, the oldest), so that an evicted value
// may get back more than its allowance; OverflowRefuse refuses a new value the store has no
// room for (one whose eviction candidates all have states to park), so that the limits hold
// and new values wait for entries to expire. Either is counted (RuleStats.Overflows) and
// reported (Options.OnOverflow).

// Overflow is what a rule does once the ledger of its evicted values' states is full.
type Overflow uint8

const (
	// OverflowDefault takes Options.Overflow, or OverflowForget.
	OverflowDefault Overflow = iota
	// OverflowForget forgets the state that ends soonest near the new one's place: no value is
	// refused for lack of room; a value whose state was forgotten gets a full allowance back.
	OverflowForget
	// OverflowRefuse refuses a new value that would need room in the full ledger: no limit is
	// exceeded; new values are refused until states expire.
	OverflowRefuse
)

// Defaults of the budgets of the evicted values' states.
const (
	// DefaultRuleStateBudget holds the states of a flood of 10,000 new values a second for 10
	// minutes on a rule of 3 an hour (6 million values, none back to full within the flood).
	DefaultRuleStateBudget int64 = 128 << 20
	// DefaultStateBudget is the default for all rules together.
	DefaultStateBudget int64 = 256 << 20
)

// OverflowEvent reports that a rule's ledger was full (see Options.OnOverflow).
type OverflowEvent struct {
	Rule     int
	Resource string
	Param    string
	Overflow Overflow // OverflowForget or OverflowRefuse: what the rule did
	Total    uint64   // overflows of the rule so far
	Bytes    int64    // the rule's ledger, in bytes
}

// budget is the bytes of the ledgers of every store of a Limiter and of those reloaded from it.
type budget struct {
	limit  atomic.Int64
	used   atomic.Int64
	report atomic.Pointer[func(OverflowEvent)] // Options.OnOverflow; nil for none
}

const (
	entryBytes   = 16
	minLedger    = 64 // entries of a ledger's first table
	roomWindow   = 16 // entries looked at for one to give up when the ledger is full
	refuseTries  = 8  // eviction candidates with states a full ledger cannot take, before refusing
	reportPeriod = int64(time.Second)
)

type ledgerEntry struct{ h, v uint64 } // h 0: free

// ledger is a shard's parked states: an open-addressing table with linear probing, its
// positions the high 32 bits of the hash scaled to its length (any length).
type ledger struct {
	tab  []ledgerEntry
	n    int
	puts int // entries added since the table was last rebuilt
}

func ledgerKey(h uint64) uint64 { return max(h, 1) }

func (x *ledger) home(k uint64) int { return int((k >> 32) * uint64(len(x.tab)) >> 32) }

func (x *ledger) next(i int) int {
	if i++; i == len(x.tab) {
		return 0
	}
	return i
}

func (x *ledger) find(k uint64) int {
	if x.n == 0 {
		return -1
	}
	for i := x.home(k); ; i = x.next(i) {
		switch x.tab[i].h {
		case k:
			return i
		case 0:
			return -1
		}
	}
}

// insert adds e, whose hash is absent; the table has a free entry.
func (x *ledger) insert(e ledgerEntry) {
	i := x.home(e.h)
	for x.tab[i].h != 0 {
		i = x.next(i)
	}
	x.tab[i] = e
	x.n++
	x.puts++
}

// delete removes the entry at i, moving back the entries after it that would otherwise be cut
// off from their home.
func (x *ledger) delete(i int) {
	x.n--
	for j := x.next(i); x.tab[j].h != 0; j = x.next(j) {
		h := x.home(x.tab[j].h)
		if (i <= j && i < h && h <= j) || (i > j && (i < h || h <= j)) {
			continue // home within (i, j]: it stays
		}
		x.tab[i] = x.tab[j]
		i = j
	}
	x.tab[i] = ledgerEntry{}
}

// take removes and returns the state parked for hash h, 0 when none.
func (x *ledger) take(h uint64) uint64 {
	i := x.find(ledgerKey(h))
	if i < 0 {
		return 0
	}
	v := x.tab[i].v
	x.delete(i)
	return v
}

// resize rebuilds the ledger with size entries (none: nil), leaving out the states ended at
// now, and accounts for its bytes. Requires the shard locked; size holds the live entries.
func (sh *shard) resize(size int, now int64, k kind) {
	x := &sh.ledger
	old := x.tab
	if size > 0 {
		x.tab = make([]ledgerEntry, size)
	} else {
		x.tab = nil
	}
	x.n, x.puts = 0, 0
	for _, e := range old {
		if e.h != 0 && !k.ended(e.v, now) {
			x.insert(e)
		}
	}
	x.puts = 0
	delta := int64(len(x.tab)-len(old)) * entryBytes
	sh.st.budget.used.Add(delta)
	sh.st.ledgerBytes.Add(delta)
}

// grow makes room for one more entry by dropping the ended ones or enlarging the table within
// the budgets, and reports whether it did. Requires the shard locked.
func (sh *shard) grow(rs *ruleState) bool {
	x := &sh.ledger
	k := rs.kind
	now := sh.clock
	if len(x.tab) > 0 && x.puts >= len(x.tab)/8 {
		live := 0
		for _, e := range x.tab {
			if e.h != 0 && !k.ended(e.v, now) {
				live++
			}
		}
		if (live+1)*4 <= len(x.tab)*3 {
			sh.resize(len(x.tab), now, k) // the same size, without the ended ones
			return true
		}
	}
	size := max(2*len(x.tab), minLedger)
	size = min(size, int(rs.shardBudget(sh.st)/entryBytes))
	b := sh.st.budget
	if left := (b.limit.Load() - b.used.Load()) / entryBytes; int64(size-len(x.tab)) > left {
		size = len(x.tab) + int(max(left, 0))
	}
	if size <= len(x.tab) || (x.n+1)*8 > size*7 {
		return false
	}
	sh.resize(size, now, k)
	return true
}

// park keeps the state v of an evicted value of hash h, or reports false when the ledger is
// full and the rule refuses rather than forgets (nothing is changed then). Requires the
// shard locked.
func (sh *shard) park(rs *ruleState, h, v uint64) bool {
	x := &sh.ledger
	key := ledgerKey(h)
	if i := x.find(key); i >= 0 { // a value of the same hash: keep the later state
		x.tab[i].v = rs.kind.merge(x.tab[i].v, v)
		return true
	}
	if (x.n+1)*4 > len(x.tab)*3 && !sh.grow(rs) && (x.n+1)*8 > len(x.tab)*7 {
		switch {
		case x.n > 0:
			if !sh.giveUp(rs, key) {
				return false
			}
		case rs.overflow == OverflowRefuse: // no room at all (a budget of 0)
			return false
		default:
			sh.overflowed(rs, OverflowForget) // the new state is the one forgotten
			return true
		}
	}
	x.insert(ledgerEntry{key, v})
	return true
}

// giveUp frees an entry of the full ledger for a state of hash k: among the roomWindow entries
// from k's place, one that ended, else (OverflowForget) the one that ends soonest. It reports
// false when the rule refuses instead. Requires the shard locked.
func (sh *shard) giveUp(rs *ruleState, k uint64) bool {
	x := &sh.ledger
	kd := rs.kind
	best, seen := -1, 0
	for i := x.home(k); seen < min(roomWindow, x.n); i = x.next(i) {
		if x.tab[i].h == 0 {
			continue
		}
		seen++
		if best < 0 || kd.endOf(x.tab[i].v) < kd.endOf(x.tab[best].v) {
			best = i
		}
	}
	if !kd.ended(x.tab[best].v, sh.clock) {
		if rs.overflow == OverflowRefuse {
			return false
		}
		sh.overflowed(rs, OverflowForget)
	}
	x.delete(best)
	return true
}

// overflowed counts an overflow of the shard's rule and reports it, at most once a second
// per store by the shard's clock. Requires the shard locked.
func (sh *shard) overflowed(rs *ruleState, how Overflow) {
	sh.overflows++
	st := sh.st
	total := st.overflows.Add(1)
	last := st.reported.Load()
	report := st.budget.report.Load()
	if report == nil || (last != 0 && sh.clock-last < reportPeriod) || !st.reported.CompareAndSwap(last, max(sh.clock, 1)) {
		return
	}
	(*report)(OverflowEvent{Rule: int(rs.index), Resource: rs.resource, Param: rs.param,
		Overflow: how, Total: total, Bytes: st.ledgerBytes.Load()})
}

// shardBudget is the rule's budget for one shard of st, in bytes.
func (rs *ruleState) shardBudget(st *store) int64 { return rs.stateBudget / int64(st.mask+1) }

// sweepLedger drops the ended states and shrinks a ledger left mostly empty. Requires the
// shard locked.
func (sh *shard) sweepLedger(now int64, k kind) {
	x := &sh.ledger
	if len(x.tab) == 0 {
		return
	}
	live := 0
	for _, e := range x.tab {
		if e.h != 0 && !k.ended(e.v, now) {
			live++
		}
	}
	switch size := max(minLedger, 2*live); {
	case live == 0:
		sh.resize(0, now, k)
	case size <= len(x.tab)/2:
		sh.resize(size, now, k)
	case live < x.n:
		sh.resize(len(x.tab), now, k)
	}
}

// depletion is what evicting the value of slot i would lose: 0 when its state is the default
// by the shard's clock, else the state to park. Requires the shard locked.
func (rs *ruleState) depletion(sh *shard, i int32) uint64 {
	v := rs.kind.backAt(rs, sh, i)
	if v == 0 || rs.kind.ended(v, sh.clock) {
		return 0
	}
	return v
}

// restore gives the value of slot i, just created at now, the state v parked for it (0 for
// none). Requires the shard locked.
func (rs *ruleState) restore(sh *shard, i int32, v uint64, lim *limit, now int64) {
	if v != 0 {
		rs.kind.restore(rs, sh, i, v, lim, now)
	}
}

// satAdd is a+b for b >= 0, saturating at MaxInt64, as a parked state (at least 1).
func satAdd(a, b int64) uint64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return uint64(max(a+b, 1))
}
