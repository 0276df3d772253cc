package hotparam

import (
	"math"
	"math/bits"
	"time"
)

// throttleKind is the kind of a QPS throttle rule: uniform queueing per value (see
// limit.reserve). A held call's turns can be given back (cancel.go).
type throttleKind struct{}

func (throttleKind) newLimit(count, burst int64, d time.Duration) (limit, error) {
	l, err := timedLimit(count, burst, d)
	if err == nil {
		l.q = 1
	}
	return l, err
}

func (throttleKind) check(r *Rule) error {
	if r.Postpaid {
		return errPostpaid
	}
	return nil
}

func (throttleKind) takesRelease(*Rule) bool         { return false }
func (throttleKind) leased(r *Rule) bool             { return r.Refund }
func (throttleKind) inFlight() bool                  { return false }
func (throttleKind) holds() bool                     { return true }
func (throttleKind) topWindow(r *Rule) time.Duration { return r.Duration }
func (throttleKind) reason() Reason                  { return ReasonThrottle }

func (throttleKind) init(lim *limit, s *state, now int64) { lim.initThrottle(s, now) }

// A throttle op's scratch (op.kx) is the value's state right after its reservation.

func (o *op) after() state { return state{o.kx.a, o.kx.b, o.kx.c} }

func (o *op) setAfter(s state) { o.kx = scratch{s.x, s.y, s.scale} }

// maxWait is the longest a throttled op of rs may wait: its MaxQueueingTime, cut to the deadline.
func maxWait(rs *ruleState, now int64, opt *CheckOptions) int64 {
	w := rs.maxQ
	if !opt.Deadline.IsZero() {
		w = min(w, opt.Deadline.UnixNano()-now)
	}
	return w
}

func (throttleKind) reserve(o *op, s *state, now int64, opt *CheckOptions) (ok, decided bool) {
	o.lim.advance(s, now)
	o.saved = *s
	// a deadline passed already leaves no time to wait, as in the Redis store, where the wait
	// is bounded by 0: a request that need not wait still passes
	mw := max(maxWait(o.rs, now, opt), 0)
	if o.probe {
		ok, o.wait = o.lim.free(s, now)
		mw = 0
	} else {
		ok, o.wait = o.lim.reserve(s, now, o.hits, mw)
	}
	o.setAfter(*s)
	if !ok {
		o.retry = max(o.wait-max(mw, 0), 1)
		o.wait = 0
	}
	return ok, true
}

func (throttleKind) undo(*op) {}

// revert gives the slot back only if the value's state is still the one the reservation left,
// that is, if nothing was reserved after it; otherwise it stays taken.
func (throttleKind) revert(o *op, s *state, _ int64) {
	if *s == o.after() {
		*s = o.saved
	}
}

func (throttleKind) status(o *op, s *state, now int64, opt *CheckOptions) (int64, time.Duration) {
	mw := max(maxWait(o.rs, now, opt), 0)
	return o.lim.freeSlots(s, now, mw), durationOf(max(o.lim.wait(s, now), 0))
}

func (throttleKind) statusDuration(r *Rule) time.Duration { return r.Duration }

func (throttleKind) remaining(rs *ruleState, sh *shard, i int32, now int64) int64 {
	sl := sh.at(i)
	s := sl.st
	lim := rs.limitOf(sl.key.view(&sh.long), false)
	lim.advance(&s, now)
	return lim.freeSlots(&s, now, rs.maxQ)
}

func (throttleKind) idle(rs *ruleState, sh *shard, i int32, now int64) bool {
	return instantIdle(rs, sh, i, now)
}

// backAt is the instant of the next free slot, rounded up to the nanosecond.
func (throttleKind) backAt(_ *ruleState, sh *shard, i int32) uint64 {
	next, frac := sh.at(i).st.throttle()
	return satAdd(next, min(frac, 1))
}

func (throttleKind) restore(_ *ruleState, sh *shard, i int32, v uint64, _ *limit, _ int64) {
	s := &sh.at(i).st
	until := int64(min(v, math.MaxInt64))
	if next, _ := s.throttle(); until > next {
		s.setThrottle(until, 0, s.scale)
	}
}

func (throttleKind) ended(v uint64, now int64) bool { return instantEnded(v, now) }
func (throttleKind) endOf(v uint64) uint64          { return v }
func (throttleKind) merge(a, b uint64) uint64       { return max(a, b) }

// throttle is a throttle rule's next free slot: its instant (Unix ns) and a fraction of a
// nanosecond in units of 1/scale (scale is the count the fraction was computed with).
func (s *state) throttle() (next, frac int64) { return s.x, s.y }

func (s *state) setThrottle(next, frac int64, scale uint64) { s.x, s.y, s.scale = next, frac, scale }

// The uniform queueing of a throttle rule: a value's requests get slots dur/count apart, kept as
// the next free slot's instant plus a fraction in units of 1/count ns, so that spacing never
// drifts whatever the count.

// initThrottle makes s a throttle with its next slot at now.
func (l *limit) initThrottle(s *state, now int64) { s.setThrottle(now, 0, uint64(max(l.count, 1))) }

// advance converts s to l's count and moves a next slot in the past to now (a throttle keeps no
// credit for idle time).
func (l *limit) advance(s *state, now int64) {
	c := uint64(max(l.count, 1))
	next, frac := s.throttle()
	if s.scale != c {
		frac = rescale(frac, s.scale, c, int64(c-1))
	}
	if next < now {
		next, frac = now, 0
	}
	s.setThrottle(next, frac, c)
}

// wait is the time from now until the next slot of the advanced throttle s, rounded up to the
// nanosecond.
func (l *limit) wait(s *state, now int64) int64 {
	next, frac := s.throttle()
	return next - now + min(frac, 1)
}

// reserve reserves n slots of the advanced throttle s from its next slot on, if the wait for it
// is at most maxWait. It returns whether it did and the wait; it reserves nothing when it
// returns false.
func (l *limit) reserve(s *state, now, n, maxWait int64) (bool, int64) {
	w := l.wait(s, now)
	if l.count == 0 {
		return false, l.dur
	}
	if w > maxWait {
		return false, w
	}
	next, frac := s.throttle()
	hi, lo := bits.Mul64(uint64(n), uint64(l.dur))
	if hi != 0 || lo > math.MaxInt64-uint64(frac) {
		return false, w
	}
	total := lo + uint64(frac)
	c := uint64(l.count)
	adv := total / c
	if adv > uint64(math.MaxInt64-next) {
		return false, w
	}
	s.setThrottle(next+int64(adv), int64(total%c), s.scale)
	return true, w
}

// free reports whether the advanced throttle s has its next slot now (a probe is allowed only
// if it would not wait), and the wait for it.
func (l *limit) free(s *state, now int64) (bool, int64) {
	if l.count == 0 {
		return false, l.dur
	}
	w := l.wait(s, now)
	return w <= 0, w
}

// freeSlots is how many single requests the advanced throttle s admits now within maxWait.
func (l *limit) freeSlots(s *state, now, maxWait int64) int64 {
	if l.count == 0 {
		return 0
	}
	next, frac := s.throttle()
	room := now + maxWait - next
	if room < 0 || (room == 0 && frac > 0) {
		return 0
	}
	// slots start at next + frac/c + k*dur/c, k >= 0; count those at or before now+maxWait.
	hi, lo := bits.Mul64(uint64(room), uint64(l.count))
	if hi != 0 || lo < uint64(frac) {
		if hi == 0 {
			return 0
		}
		return math.MaxInt64
	}
	return int64((lo-uint64(frac))/uint64(l.dur)) + 1
}
