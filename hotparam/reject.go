package hotparam

import (
	"math"
	"math/bits"
	"time"
)

// rejectKind is the kind of a QPS reject rule: a token bucket per value (see limit.take),
// with refunds (Rule.Refund) and postpaid charges (Rule.Postpaid).
type rejectKind struct{}

func (rejectKind) newLimit(count, burst int64, d time.Duration) (limit, error) {
	l, err := timedLimit(count, burst, d)
	if err != nil {
		return l, err
	}
	if count == 0 {
		l.q = 1
		return l, nil
	}
	if burst > math.MaxInt64-count {
		return l, errUnrepresentable
	}
	g := gcd(uint64(count), uint64(d))
	l.p, l.q = uint64(count)/g, uint64(d)/g
	hi, lo := bits.Mul64(uint64(count+burst), l.q)
	if hi != 0 || lo > math.MaxInt64 {
		return l, errUnrepresentable
	}
	l.full = lo
	l.ttf = int64((l.full + l.p - 1) / l.p)
	return l, nil
}

func (rejectKind) check(r *Rule) error {
	if r.Postpaid && r.Refund {
		return errPostpaid
	}
	return nil
}

func (rejectKind) takesRelease(r *Rule) bool       { return r.Refund }
func (rejectKind) leased(r *Rule) bool             { return r.Refund }
func (rejectKind) inFlight() bool                  { return false }
func (rejectKind) holds() bool                     { return false }
func (rejectKind) topWindow(r *Rule) time.Duration { return r.Duration }
func (rejectKind) reason() Reason                  { return ReasonQPS }

func (rejectKind) init(lim *limit, s *state, now int64) { lim.initBucket(s, now) }

// A reject op's scratch (op.kx) is its refund record: a = its expiry, b = 1 while recorded.

func (o *op) record() (exp int64, recorded bool) { return o.kx.a, o.kx.b != 0 }

func (o *op) setRecord(exp int64, recorded bool) { o.kx.a, o.kx.b = exp, flag(recorded) }

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (rejectKind) reserve(o *op, s *state, now int64, _ *CheckOptions) (ok, decided bool) {
	o.lim.refill(s, now)
	if o.rs.refund {
		o.sh.expire(o.slot, now)
	}
	if o.release {
		// A refund gives back only what the acquire of the same lease id took and was not
		// refunded yet: nothing for a refused request or without an id.
		if !o.released {
			o.lim.refund(s, o.sh.refundable(o.slot, o.hits, o.lid))
			o.released = true
		}
		return false, false
	}
	o.saved = *s
	o.setRecord(0, false)
	if o.charge() {
		// A charge of what a response used: applied whatever the outcome, once (a call that
		// starts again on a Remote failure does not apply it twice), never refused and never
		// undone.
		if !o.released {
			o.lim.charge(s, o.hits)
			o.released = true
		}
		return false, false
	}
	ok, o.retry = o.lim.take(s, o.hits)
	if o.probe {
		*s = o.saved
	}
	if !ok {
		_, at := s.bucket()
		o.retry += max(at-now, 0) // a caller whose clock lags the bucket's
	} else if o.rs.refund && o.lid != 0 && !o.probe {
		exp := now + o.rs.lease
		o.sh.record(o.slot, o.hits, exp, o.lid)
		o.setRecord(exp, true)
	}
	return ok, true
}

func (rejectKind) undo(o *op) {
	if exp, recorded := o.record(); recorded {
		o.sh.unrecord(o.slot, exp, o.hits, o.lid)
		o.setRecord(exp, false)
	}
}

// revert refunds the tokens, clamped to the bucket's capacity (tokens are interchangeable, so
// this is exact unless the bucket refilled to the brim meanwhile), and takes back the refund
// record.
func (rejectKind) revert(o *op, s *state, now int64) {
	o.lim.refill(s, now)
	o.lim.refund(s, o.hits)
	if exp, recorded := o.record(); recorded {
		o.sh.unrecord(o.slot, exp, o.hits, o.lid)
	}
}

func (rejectKind) status(o *op, s *state, now int64, _ *CheckOptions) (int64, time.Duration) {
	_, at := s.bucket()
	return o.lim.remaining(s), durationOf(o.lim.resetAfter(s) + max(at-now, 0))
}

func (rejectKind) statusDuration(r *Rule) time.Duration { return r.Duration }

func (rejectKind) remaining(rs *ruleState, sh *shard, i int32, now int64) int64 {
	sl := sh.at(i)
	s := sl.st
	lim := rs.limitOf(sl.key.view(&sh.long), false)
	lim.refill(&s, now)
	return lim.remaining(&s)
}

func (rejectKind) idle(rs *ruleState, sh *shard, i int32, now int64) bool {
	return instantIdle(rs, sh, i, now)
}

// backAt is the instant the bucket is full again: a reject rule parks the instant, and a value
// created before it gets the tokens it would have refilled by now from empty at (that instant
// - time to fill).
func (rejectKind) backAt(rs *ruleState, sh *shard, i int32) uint64 {
	sl := sh.at(i)
	s := &sl.st
	lim := rs.limitOf(sl.key.view(&sh.long), rs.cluster)
	if lim.p == 0 || s.scale == 0 {
		return 0
	}
	units, at := s.bucket()
	units = rescaleDebt(units, s.scale, lim.q, int64(lim.full))
	if units >= int64(lim.full) {
		return 0
	}
	// a postpaid debt (units < 0) is paid back first: at most 2*full to refill
	return satAdd(at, ceilDiv(uint64(int64(lim.full)-max(units, -int64(lim.full))), lim.p))
}

func (rejectKind) restore(rs *ruleState, sh *shard, i int32, v uint64, lim *limit, now int64) {
	s := &sh.at(i).st
	until := int64(min(v, math.MaxInt64))
	if until <= now || lim.p == 0 {
		return
	}
	units := int64(0)
	switch d := until - now; {
	case d < lim.ttf:
		units = int64(lim.full - min(uint64(d)*lim.p, lim.full)) // d < ttf: d*p < full+p
	case rs.postpaid:
		// in debt: full - d*p, at most one bucket below empty (d < 2*ttf: d*p < 2*full+2*p,
		// within int64 for a postpaid limit)
		units = -int64(lim.full)
		if d < 2*lim.ttf {
			units = max(int64(lim.full)-d*int64(lim.p), -int64(lim.full))
		}
	}
	s.setBucket(units, now, lim.q)
}

func (rejectKind) ended(v uint64, now int64) bool { return instantEnded(v, now) }
func (rejectKind) endOf(v uint64) uint64          { return v }
func (rejectKind) merge(a, b uint64) uint64       { return max(a, b) }

// bucket is a reject rule's bucket: the tokens in units of 1/scale token, and the instant (Unix
// ns) they were counted at.
func (s *state) bucket() (units, at int64) { return s.x, s.y }

func (s *state) setBucket(units, at int64, scale uint64) { s.x, s.y, s.scale = units, at, scale }

// The token bucket of a reject rule.

// initBucket makes s a full bucket at now.
func (l *limit) initBucket(s *state, now int64) { s.setBucket(int64(l.full), now, l.q) }

// refill brings s up to now: converts it to l's units, clamps it to l's capacity and adds the
// tokens earned since it was last counted. A now earlier than the last count adds nothing.
// Units below zero are a postpaid rule's debt (see charge): it is paid back first, at the same
// rate.
func (l *limit) refill(s *state, now int64) {
	units, at := s.bucket()
	if s.scale != l.q {
		if units < 0 { // a postpaid debt: rounded up (rescaleUp and rescale both inline here)
			units = -rescaleUp(uint64(-units), s.scale, l.q, int64(l.full))
		} else {
			units = rescale(units, s.scale, l.q, int64(l.full))
		}
	}
	units = min(units, int64(l.full))
	if el := now - at; el > 0 {
		at = now
		switch {
		case units < 0:
			// A postpaid debt: at most full units, and a postpaid limit's full is at most
			// MaxPostpaidUnits, so el below 2*ttf (from -full, the time to fill the bucket)
			// gives el*p < 2*full+2*p, within int64. Inline: a call here would cost every
			// refill a stack frame.
			if el >= 2*l.ttf {
				units = int64(l.full)
			} else {
				units = min(units+el*int64(l.p), int64(l.full))
			}
		case el >= l.ttf:
			units = int64(l.full)
		default:
			// el < ttf, so el*p < full+p: no overflow in uint64.
			units = int64(min(uint64(units)+uint64(el)*l.p, l.full))
		}
	}
	s.setBucket(units, at, l.q)
}

// tokens is the units of the refilled bucket s, 0 when it is in debt.
func tokens(s *state) uint64 {
	units, _ := s.bucket()
	return uint64(max(units, 0))
}

// take takes n tokens from the refilled bucket s. When it cannot, it consumes nothing and
// returns false and the time until the n tokens would be there.
func (l *limit) take(s *state, n int64) (bool, int64) {
	if l.count == 0 || n > l.count+l.burst {
		return false, l.dur // never possible: try again a duration later
	}
	need := int64(uint64(n) * l.q) // n <= count+burst, so need <= full
	units, at := s.bucket()
	if units >= need {
		s.setBucket(units-need, at, l.q)
		return true, 0
	}
	// units >= -full (a postpaid debt), so need-units <= 2*full, within int64 for a postpaid
	// limit and within full for the others (never in debt)
	return false, ceilDiv(uint64(need-units), l.p)
}

// MaxPostpaidUnits bounds a postpaid limit's capacity in units ((count+burst) times the
// denominator of count/duration), so that a bucket in debt and its arithmetic stay within
// int64.
const MaxPostpaidUnits = math.MaxInt64 / 4

// charge takes n tokens from the refilled bucket s of a postpaid rule, whatever is left: what a
// response used is charged in full, and the bucket goes into debt, at most one bucket (-full
// units). A charge of more than a bucket's worth beyond what is left is cut there: the
// overshoot of a postpaid budget is bounded by one bucket.
func (l *limit) charge(s *state, n int64) {
	if l.count == 0 || n <= 0 {
		return
	}
	n = min(n, 2*(l.count+l.burst)) // n*q <= 2*full: no overflow
	units, at := s.bucket()
	s.setBucket(max(units-n*int64(l.q), -int64(l.full)), at, l.q)
}

// refund gives n tokens back to the refilled bucket s, never above its capacity.
func (l *limit) refund(s *state, n int64) {
	if l.count == 0 {
		return
	}
	n = min(n, l.count+l.burst)
	units, at := s.bucket()
	s.setBucket(int64(min(uint64(units)+uint64(n)*l.q, l.full)), at, l.q)
}

// remaining is the whole tokens left in the refilled bucket s.
func (l *limit) remaining(s *state) int64 { return int64(tokens(s) / l.q) }

// resetAfter is the time until the refilled bucket s is full (its debt paid back first).
func (l *limit) resetAfter(s *state) int64 {
	if l.p == 0 {
		return 0
	}
	units, _ := s.bucket()
	return ceilDiv(uint64(int64(l.full)-units), l.p) // units >= -full: at most 2*full
}
