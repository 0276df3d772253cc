package hotparam

import (
	"math"
	"math/bits"
)

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
