package redisstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// blocked remembers the values Redis refused until it said they may pass again, so that a
// replica refuses them again without asking Redis (envoyproxy/ratelimit keeps a local cache of
// over-limit keys for the same reason). It only ever refuses: every admission comes from Redis.
//
// An entry is kept per state key (value, rule, kind) with the rule's numbers and the request it
// refused. It covers the requests whose answer it knows exactly until it ends:
//
//   - bucket: requests of one hit (while one is refused, no token is left, and the time until
//     the next one only shrinks); requests of more hits go to Redis. An acquisition that passed
//     in a batch and left less than a token (the script tells when the next one is there)
//     makes an entry as a refusal of one hit would (see Store.keepRefusal);
//   - throttle: requests of any hits with the same max wait or a shorter one (a throttle's wait
//     does not depend on hits; a shorter max wait waits longer by the difference).
//
// Refusals that are not about the stored state are not kept: concurrency (a release frees a slot
// at any moment), count 0 or more hits than the capacity (told to retry a duration later
// whatever the time), an op refused after another op of the same call took from the same key.
//
// What the cache can get wrong is only a refusal that Redis would not have made: when another
// replica gives tokens back (a refund, a throttle turn given back) or a Redis operator deletes
// the key before the entry ends. A refund or a turn given back through this replica drops its
// entry. An entry ends at the call's start
// on this replica's clock plus the retry-after Redis computed; Redis computed it later than the
// call's start, so the entry never outlives Redis's own instant on a clock that runs at Redis's
// rate. The rule's numbers are part of an entry: a reload that changes them ignores it.
//
// An entry may also hold a booking (Config.BookAhead, book.go): the tokens its call booked
// ahead, which lookup gives out as they come due. An entry with a booking not settled (tokens
// left to give, or going back) is never dropped to make room: the cache holds more entries than
// its size while such bookings run, at most about twice (no more of them than its size start).
type blocked struct {
	mu    sync.Mutex
	max   int
	m     map[string]blockEntry
	swept time.Time // last sweep of ended entries
	// bookings counts the bookings not settled, so that calls skip looking for them when none
	bookings atomic.Int64
}

type blockEntry struct {
	at       time.Time // the start of the call Redis answered
	until    time.Time // the request may pass from here on (local clock)
	sure     time.Time // it may also be refused until here: until plus the call's round trip
	full     time.Time // the bucket is full (throttle: the schedule is free) from here on
	maxWait  time.Duration
	count    int64
	burst    int64
	duration time.Duration
	behavior hotparam.Behavior
	refused  bool     // it, or Redis's answer it keeps, refused a call: the value is hot here (see bookFor)
	bk       *booking // nil, or the tokens its call booked ahead
}

// unsettled reports whether bk still has tokens to give, or is going back.
func unsettled(bk *booking) bool { return bk != nil && !bk.settled }

// of reports whether e was made for op's rule numbers (a reload that changes them ignores it).
func (e *blockEntry) of(op *hotparam.RemoteOp) bool {
	return e.count == op.Count && e.burst == op.Burst && e.duration == op.Duration && e.behavior == op.Behavior
}

// DefaultBlockedCache is the default of Config.BlockedCache.
const DefaultBlockedCache = 10000

func newBlocked(n int) *blocked {
	if n <= 0 {
		return nil
	}
	return &blocked{max: n, m: make(map[string]blockEntry, min(n, 1024))}
}

// cacheable reports whether a refusal of op may be kept and answered from the cache.
func cacheable(op *hotparam.RemoteOp) bool {
	if op.Release || op.Shadow || op.Count <= 0 {
		return false
	}
	return kindOf(op).cacheable(op)
}

// lookup returns Redis's answer to op (whose state is at key) at now, when an entry refuses it,
// or the answer of its booking (book.go), which may give op a token it booked.
func (b *blocked) lookup(key string, op *hotparam.RemoteOp, now time.Time) (hotparam.RemoteResult, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[key]
	if !ok || !e.of(op) {
		return hotparam.RemoteResult{}, false
	}
	// a caller that read its clock before the entry's call started (and was held up since)
	// is answered as of that start: never a retry later than Redis's own
	if now.Before(e.at) {
		now = e.at
	}
	if bk := e.bk; unsettled(bk) {
		if !bk.open() || !now.Before(bk.keep) {
			return hotparam.RemoteResult{}, false // the call settles it first (settleBooking)
		}
		r, gave := bk.answer(op, now)
		if gave && bk.used == bk.n {
			b.settle(bk)
		}
		if !r.Allowed && !e.refused {
			e.refused = true
			b.m[key] = e
		}
		return r, true
	}
	if !now.Before(e.until) {
		return hotparam.RemoteResult{}, false
	}
	r := hotparam.RemoteResult{RetryAfter: e.until.Sub(now), ResetAfter: max(e.full.Sub(now), 0)}
	if !kindOf(op).cached(op, &e, &r) {
		return hotparam.RemoteResult{}, false
	}
	if !e.refused {
		e.refused = true
		b.m[key] = e
	}
	return r, true
}

// hot reports whether the entry at key, made for op's rule numbers, refused a call.
func (b *blocked) hot(key string, op *hotparam.RemoteOp) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[key]
	return ok && e.refused && e.of(op)
}

// hold returns how long op (state at key) should wait at now before it goes to Redis: the time
// left until an entry that just ended is sure to have ended on Redis's clock too. Redis computed
// the entry's end between the start and the answer of the call that made it; an entry ends at
// the earliest of those instants, so until the latest, a call may reach Redis before the token
// is back there and be refused, making an entry that ends early again, and so on. A call that
// waits goes when the token is back: one call per token. A booking not settled has its own
// instants (the call settles it first).
func (b *blocked) hold(key string, op *hotparam.RemoteOp, now time.Time) time.Duration {
	b.mu.Lock()
	e, ok := b.m[key]
	b.mu.Unlock()
	if !ok || unsettled(e.bk) || now.Before(e.until) || !now.Before(e.sure) || !e.of(op) {
		return 0
	}
	return e.sure.Sub(now)
}

// maxWaitOf is the longest op may wait: none for a probe, which passes only when its slot is
// free now (its refusal is kept as that of a request that waits for nothing).
func maxWaitOf(op *hotparam.RemoteOp) time.Duration {
	if op.Probe {
		return 0
	}
	return max(op.MaxWait, 0)
}

// maxHold bounds how long a call waits for the instant its value's next token may be back at
// (see hold): about the round trip of a call to a Redis that is well.
const maxHold = 2 * time.Millisecond

// add keeps Redis's refusal r of op (state at key), for a call that started at start and was
// answered at end (see put).
func (b *blocked) add(key string, op *hotparam.RemoteOp, r *hotparam.RemoteResult, start, end time.Time) {
	if r.RetryAfter <= 0 {
		return
	}
	e := b.entry(op, start, start.Add(r.RetryAfter), end, start.Add(r.ResetAfter))
	e.refused = true // Redis refused a call of the value: it is hot here
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(key, e, start)
}

// entry returns the entry of a refusal of op until until, for a call that started at start and
// was answered at end, its bucket full at full.
func (b *blocked) entry(op *hotparam.RemoteOp, start, until, end, full time.Time) blockEntry {
	return blockEntry{at: start, until: until, sure: until.Add(min(max(end.Sub(start), 0), maxHold)), full: full,
		maxWait: maxWaitOf(op), count: op.Count, burst: op.Burst, duration: op.Duration, behavior: op.Behavior}
}

// put stores e at key (called with mu held), unless the entry there has a booking not settled
// and e has none: that entry knows more (the refusals of the calls its booking's batch refused
// after it, say, end where its first booked token is due).
func (b *blocked) put(key string, e blockEntry, now time.Time) {
	old, ok := b.m[key]
	if ok && e.bk == nil && unsettled(old.bk) {
		return
	}
	if !ok && len(b.m) >= b.max {
		b.makeRoom(now)
	}
	b.m[key] = e
}

// book keeps the call of op (state at key) that took a token at start, answered at end, and
// booked n tokens ahead when its bucket lacked gap units of a token: until all are given the
// entry gives them as they come due (counted from the answer, on the local clock no earlier
// than on Redis's), then refuses until the token after them (counted from start, as a
// refusal). onEnd runs when the booking ends.
func (b *blocked) book(key string, op *hotparam.RemoteOp, gap, n int64, start, end time.Time, onEnd func(*booking)) {
	bk := newBooking(op, n, gap, end)
	e := b.entry(op, start, start.Add(bk.dueAfter(n)), end, start.Add(bk.resetAfter(end, n)))
	e.bk = bk
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bookings.Add(1)
	bk.timer = time.AfterFunc(bk.keep.Sub(end), func() { onEnd(bk) })
	b.put(key, e, start)
}

// claim takes the booking not settled of the entry at key, for its caller to give back what is
// left of it (giveBack), or returns the channel of a give-back under way, to wait for; neither
// when there is none.
func (b *blocked) claim(key string) (bk *booking, wait <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[key]
	if !ok || !unsettled(e.bk) {
		return nil, nil
	}
	if e.bk.back != nil {
		return nil, e.bk.back
	}
	e.bk.back = make(chan struct{})
	return e.bk, nil
}

// claimIf claims bk for its caller to give back what is left of it, when it is open and its keep
// is past at now, and reports whether it did. A timer that fired before the end on the local clock is set
// again for the rest.
func (b *blocked) claimIf(bk *booking, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !bk.open() {
		return false
	}
	if now.Before(bk.keep) {
		bk.timer.Reset(max(bk.keep.Sub(now), time.Millisecond))
		return false
	}
	bk.back = make(chan struct{})
	return true
}

// givenBack settles bk, claimed and given back (or lost), and forgets the entry at key: its
// refusal may count on tokens that are back.
func (b *blocked) givenBack(key string, bk *booking) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.m[key]; ok && (e.bk == bk || !unsettled(e.bk)) {
		delete(b.m, key)
	}
	b.settle(bk)
	close(bk.back)
}

// settle marks bk settled: every token given, or what was left given back (called with mu held).
func (b *blocked) settle(bk *booking) {
	bk.settled = true
	bk.timer.Stop()
	b.bookings.Add(-1)
}

// makeRoom drops the ended entries (at most once a second), then, if still full, any entry; never
// one whose booking is not settled. Requires mu held.
func (b *blocked) makeRoom(now time.Time) {
	if now.Sub(b.swept) >= time.Second || now.Before(b.swept) {
		b.swept = now
		for k, e := range b.m {
			if !now.Before(e.sure) && !unsettled(e.bk) {
				delete(b.m, k)
			}
		}
	}
	for k, e := range b.m {
		if len(b.m) < b.max {
			break
		}
		if !unsettled(e.bk) {
			delete(b.m, k)
		}
	}
}

// drop forgets key (a refund gave tokens back), but for an entry whose booking is not settled:
// the call settles it (settleBooking), which forgets the entry.
func (b *blocked) drop(key string) {
	b.mu.Lock()
	if e, ok := b.m[key]; !ok || !unsettled(e.bk) {
		delete(b.m, key)
	}
	b.mu.Unlock()
}

// claimAll claims every booking with tokens left, by key (the Store closes).
func (b *blocked) claimAll() map[string]*booking {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]*booking)
	for k, e := range b.m {
		if unsettled(e.bk) && e.bk.open() {
			e.bk.back = make(chan struct{})
			out[k] = e.bk
		}
	}
	return out
}

// stop stops the timers of the bookings not settled (the Store closes).
func (b *blocked) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.m {
		if unsettled(e.bk) {
			e.bk.timer.Stop()
		}
	}
}

// len returns the number of entries (0 for a nil cache).
func (b *blocked) len() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// answer fills res for a call refused from the cache: the first op with r, the others as not
// checked (reported full, nothing consumed).
func answer(ops []hotparam.RemoteOp, res []hotparam.RemoteResult, r hotparam.RemoteResult) {
	res[0] = r
	for i := 1; i < len(ops); i++ {
		op := &ops[i]
		res[i] = hotparam.RemoteResult{Allowed: true, Remaining: kindOf(op).full(op)}
	}
}
