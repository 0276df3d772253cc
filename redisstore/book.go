package redisstore

import (
	"context"
	"math"
	"math/bits"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/redis/rueidis"
)

// Booking ahead (Config.BookAhead). A value over its limit frees one token at a time, so a
// replica that asks Redis for each token it gives makes one script call per token, each waking
// Redis on its own. With BookAhead, the call that takes the last token of a value refused here
// since the token before (by this replica's cache or by Redis: the value is hot here) takes the tokens the next BookAhead brings
// as well, at once, the bucket going into debt; the replica then gives them out itself, one
// when each is due (the instant the bucket would have had it), and Redis is asked again when
// they are all given, for the token after them. One call then serves up to maxBook tokens.
//
// What it changes is who gets a token, never how many are given or when: over any span of time
// the tokens given out across replicas are the bucket's, each no earlier than the bucket would
// have had it. A booked token is due on the local clock no earlier than on Redis's (counted from
// the answer's return). A booked token due and not given stays the replica's after the booking
// ends (the token after its last is due), as it would stay in the bucket, until the booking's
// length has passed again or the bucket would be full (its keep). Tokens still booked then, or
// when a call of this replica must go to Redis for the value anyway (a call of more hits, of
// several rules, with other rule numbers after a reload, or a refund), go back to the bucket
// first, in a call of their own: what the bucket holds is then what it would have held.
// On another replica, a call for the value while this one's booking runs is refused until the
// booking ends, where without it each token would have gone to whichever replica asked first;
// a token this replica booked and did not give is then refused there until it comes back to
// the bucket. A replica that closes its Store gives back what it has left; one that dies, or
// cannot reach Redis to give tokens back, loses it: the bucket refills at its rate.

// maxBook bounds the tokens one call books: a batch of calls stays small, and a booking of a
// value with a high limit stays short however long BookAhead is.
const maxBook = 64

// bookFor returns how many tokens a call of op should book after it takes the last token of its
// bucket: none unless BookAhead is on and the value is hot here (the entry that ended refused a
// call, or was Redis's refusal), else the tokens BookAhead brings, at most a bucket less one and
// maxBook.
func (s *Store) bookFor(op *hotparam.RemoteOp, key string) int64 {
	if s.cfg.BookAhead <= 0 || s.blk == nil || op.Probe || op.Shadow || op.Postpaid || hitsOf(*op) != 1 {
		return 0
	}
	n := tokensIn(op, s.cfg.BookAhead)
	// bookings not settled are never evicted: at most the cache's size of them, so that a flood
	// of values over their limits leaves the cache at most twice its size
	if n < 1 || s.blk.bookings.Load() >= int64(s.blk.max) || !s.blk.hot(key, op) {
		return 0
	}
	// at most a bucket less one token: the bucket without the booking would not be full before
	// the booking ends, so that the tokens it holds are the booked ones not given and Redis's
	return min(n, op.Count+op.Burst-1)
}

// tokensIn returns how many tokens op's bucket gains in d, rounded down, at most maxBook.
func tokensIn(op *hotparam.RemoteOp, d time.Duration) int64 {
	return min(floorDiv(mul(uint64(d), uint64(op.Count)), uint64(op.Duration)), maxBook)
}

// booking is the tokens booked ahead for a value by one call, given out by lookup. It knows
// the bucket as the script does (units of tokens times the reduced duration, gained at rate a
// microsecond), so that what it answers is what Redis would: a booked token is due at the very
// instant the bucket without the booking would have it.
type booking struct {
	op      hotparam.RemoteOp // the op that booked: its key's rule numbers, for the give-back
	at      time.Time         // the instant of the call that booked (local clock: its answer's)
	gap     int64             // what the bucket lacked of a token then (units)
	d, rate int64             // a token's units, and the units gained a microsecond
	capU    int64             // the bucket's capacity (units)
	end     time.Time         // the token after the last booked one is due: the booking ends
	// keep is when the tokens not given by then go back (the booking's length after its end, at
	// most until the bucket would be full): a booked token that is due stays in the bucket as it
	// would without the booking, for the value's next calls here, which may come in bursts
	keep time.Time
	n    int64 // tokens booked
	used int64 // tokens given out
	// back is made when the tokens left start going back to the bucket, and closed once they
	// have (or could not); a call of the value waits for it before it goes to Redis.
	back    chan struct{}
	settled bool        // every token given, or what was left given back (or lost)
	timer   *time.Timer // gives the tokens left back when the booking ends without a call
}

// newBooking returns the booking of n tokens by a call of op answered at at, when the bucket
// lacked gap units of a token.
func newBooking(op *hotparam.RemoteOp, n, gap int64, at time.Time) *booking {
	rate, d := reduce(op.Count, op.Duration)
	bk := &booking{op: *op, at: at, gap: gap, d: d, rate: rate, capU: (op.Count + op.Burst) * d, n: n}
	bk.end = at.Add(bk.dueAfter(n))
	// never past the instant the bucket without the booking would be full (at most a bucket
	// less one token is booked, so that is at the end or after): from there on it would lose
	// what it gains, the tokens this replica kept among them
	bk.keep = bk.end.Add(bk.end.Sub(at))
	if full := at.Add(bk.resetAfter(at, 0)); full.Before(bk.keep) {
		bk.keep = full
	}
	return bk
}

// dueAfter returns the time from the booking's call until its j-th token (from 0) is due, the
// j+1-th the bucket gains: (gap + j*d) units, rounded up to the nanosecond.
func (bk *booking) dueAfter(j int64) time.Duration {
	return ceilDiv(mul(uint64(bk.gap+j*bk.d), 1000), uint64(bk.rate))
}

// due returns when the j-th booked token (from 0) is due.
func (bk *booking) due(j int64) time.Time { return bk.at.Add(bk.dueAfter(j)) }

// gained returns how many tokens the bucket has gained at now since the call that booked, the
// booked ones first: those j with (gap + j*d) units gained, that is (gap + j*d) * 1000 <=
// t * rate for t nanoseconds since the call.
func (bk *booking) gained(now time.Time) int64 {
	t := now.Sub(bk.at)
	if t < 0 {
		return 0
	}
	got := mul(uint64(t), uint64(bk.rate))
	owed := uint128{lo: uint64(bk.gap) * 1000}
	if got.less(owed) {
		return 0
	}
	return floorDiv(got.sub(owed), uint64(bk.d)*1000) + 1
}

// resetAfter returns the time from now until the bucket would be full with used tokens given:
// it would hold d - gap + (units gained since the call) - used*d units, below capacity while
// the booking runs (at most a bucket less one token is booked).
func (bk *booking) resetAfter(now time.Time, used int64) time.Duration {
	lack := mul(uint64(bk.capU-bk.d+bk.gap+used*bk.d), 1000) // units lacked at the call, times 1000
	if t := now.Sub(bk.at); t > 0 {
		got := mul(uint64(t), uint64(bk.rate))
		if lack.less(got) {
			return 0
		}
		lack = lack.sub(got)
	}
	return ceilDiv(lack, uint64(bk.rate))
}

// open reports whether the booking still has tokens to give and is not going back.
func (bk *booking) open() bool { return bk.back == nil && bk.used < bk.n }

// answer answers op (one hit, the booking's rule numbers) at now, before the booking's keep: a
// token that is due and not given yet is given (a probe is told one is there), else op is
// refused until the next is due. It reports whether it gave a token. The remaining it tells
// counts the tokens the bucket gained after the booked ones too, which no call here took.
func (bk *booking) answer(op *hotparam.RemoteOp, now time.Time) (r hotparam.RemoteResult, gave bool) {
	gained := bk.gained(now)
	if due := min(gained, bk.n); bk.used < due {
		r.Allowed = true
		r.Remaining = gained - bk.used // the tokens there, this one among them
		if !op.Probe {
			bk.used++
			r.Remaining--
			gave = true
		}
	} else {
		r.RetryAfter = bk.due(bk.used).Sub(now)
	}
	r.ResetAfter = bk.resetAfter(now, bk.used)
	return r, gave
}

// uint128 is an unsigned 128-bit integer, for the booking's exact arithmetic.
type uint128 struct{ hi, lo uint64 }

func mul(a, b uint64) uint128 {
	hi, lo := bits.Mul64(a, b)
	return uint128{hi, lo}
}

func (a uint128) less(b uint128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// sub returns a - b, for b <= a.
func (a uint128) sub(b uint128) uint128 {
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, borrow)
	return uint128{hi, lo}
}

// divmod returns a / b and its remainder, and whether the quotient fits in 64 bits.
func divmod(a uint128, b uint64) (q, r uint64, fits bool) {
	if a.hi >= b {
		return 0, 0, false
	}
	q, r = bits.Div64(a.hi, a.lo, b)
	return q, r, true
}

// ceilDiv returns a / b rounded up as a duration, the longest one when it does not fit.
func ceilDiv(a uint128, b uint64) time.Duration {
	q, r, fits := divmod(a, b)
	if r > 0 {
		q++
	}
	if !fits || q > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(q)
}

// floorDiv returns a / b rounded down, at most math.MaxInt64.
func floorDiv(a uint128, b uint64) int64 {
	q, _, fits := divmod(a, b)
	if !fits || q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// settleBooking gives back to its bucket what is left of the booking of key, or waits for a
// give-back under way, so that a call of the value that goes to Redis finds the bucket as it
// would be without it. It returns ctx's error if it ends first.
func (s *Store) settleBooking(ctx context.Context, key string) error {
	if s.blk == nil || s.blk.bookings.Load() == 0 {
		return nil
	}
	bk, wait := s.blk.claim(key)
	if bk != nil {
		s.giveBack(ctx, key, bk)
		return nil
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// giveBack gives what is left of bk, claimed, back to the bucket at key in a call of its own, by
// ctx's deadline or within Timeout, then forgets the entry at key (its refusal may count on the
// tokens given back) and lets the calls waiting for it go. The tokens are lost when Redis cannot
// be reached or fails (Stats.BookLost).
func (s *Store) giveBack(ctx context.Context, key string, bk *booking) {
	left := bk.n - bk.used
	defer s.blk.givenBack(key, bk)
	b := s.client.Load()
	if b == nil || !s.br.allow() {
		s.bookLost.Add(uint64(left))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	if err := s.sendGiveBack(ctx, b.c, key, &bk.op, left); err != nil {
		s.bookLost.Add(uint64(left))
		s.setErr(err)
		return
	}
	s.bookBack.Add(uint64(left))
}

// sendGiveBack gives n tokens back to op's bucket at key: a refund of n hits, as an undo.
func (s *Store) sendGiveBack(ctx context.Context, c rueidis.Client, key string, op *hotparam.RemoteOp, n int64) error {
	g := []group{{keys: []string{key}, args: []string{s.now(), "b", opArg(op, 1, 0, true, n)}}}
	ctx, span := s.start(ctx, "redis EVALSHA give back", attrEvalsha, keyOps.Int(1))
	err := s.exec(ctx, c, g)
	end(span, err)
	return err
}

// endBooking is the timer of bk, the booking at key: at its keep, the tokens left go back
// unless a call of the value gave them back or took them before.
func (s *Store) endBooking(key string, bk *booking) {
	if s.closed.Load() {
		return
	}
	if s.blk.claimIf(bk, s.localNow()) {
		s.giveBack(context.Background(), key, bk)
	}
}
