package hotparam

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// kind is how a rule keeps a value's state.
type kind uint8

const (
	kindReject kind = iota
	kindThrottle
	kindConcurrency
)

// state is one value's state under one rule: two words and the scale of a fraction, whose
// meaning depends on the rule's kind. It is read and written only through the accessors of
// that kind: bucket (reject), throttle, inFlight (concurrency).
type state struct {
	x, y  int64
	scale uint64
}

// bucket is a reject rule's bucket: the tokens in units of 1/scale token, and the instant (Unix
// ns) they were counted at.
func (s *state) bucket() (units, at int64) { return s.x, s.y }

func (s *state) setBucket(units, at int64, scale uint64) { s.x, s.y, s.scale = units, at, scale }

// throttle is a throttle rule's next free slot: its instant (Unix ns) and a fraction of a
// nanosecond in units of 1/scale (scale is the count the fraction was computed with).
func (s *state) throttle() (next, frac int64) { return s.x, s.y }

func (s *state) setThrottle(next, frac int64, scale uint64) { s.x, s.y, s.scale = next, frac, scale }

// inFlight is a concurrency rule's hits in flight (the shard keeps the leases behind them).
func (s *state) inFlight() int64 { return s.x }

func (s *state) setInFlight(n int64) { s.x = max(n, 0) }

// counters count a value's requests for Top: passed and blocked in window win (Unix time divided
// by the rule's window) and in the window before.
type counters struct {
	win         uint32
	passed      uint32
	blocked     uint32
	prevPassed  uint32
	prevBlocked uint32
}

// limit is a rule's threshold for one value (the rule's Count, or an exception item's),
// precomputed for exact integer arithmetic.
type limit struct {
	count int64 // tokens per duration, or most in flight
	burst int64
	dur   int64 // the rule's Duration in ns
	// Reject: the bucket refills p units per ns, a token is q units (count/dur = p/q reduced), it
	// holds at most full units and fills from empty in ttf ns.
	p, q uint64
	full uint64
	ttf  int64
}

var errUnrepresentable = errors.New("count, burst and duration too large to count exactly")

// newLimit precomputes the threshold count (+burst) for a rule of kind k and duration d.
func newLimit(k kind, count, burst int64, d time.Duration) (limit, error) {
	l := limit{count: count, burst: burst, dur: int64(d)}
	if count < 0 || burst < 0 {
		return l, fmt.Errorf("negative count %d or burst %d", count, burst)
	}
	if k == kindConcurrency {
		return l, nil
	}
	if d <= 0 {
		return l, fmt.Errorf("duration %v is not positive", d)
	}
	if k == kindThrottle || count == 0 {
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

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// rescale converts v from units of 1/from to units of 1/to, rounding down (a rescale never
// creates tokens); it saturates at max. A debt (v < 0) is left as it is: see rescaleDebt.
func rescale(v int64, from, to uint64, max int64) int64 {
	if v <= 0 || from == 0 || from == to {
		return v
	}
	hi, lo := bits.Mul64(uint64(v), to)
	if hi >= from {
		return max
	}
	r, _ := bits.Div64(hi, lo, from)
	if r > uint64(max) {
		return max
	}
	return int64(r)
}

// rescaleDebt converts v like rescale, and a postpaid rule's debt (v < 0) too, rounding it
// up (away from zero), saturating at -max. It is rescale's one caller that may see a debt,
// kept apart so that rescale stays small enough to inline.
func rescaleDebt(v int64, from, to uint64, max int64) int64 {
	if v < 0 && from != 0 && from != to {
		return -rescaleUp(uint64(-v), from, to, max)
	}
	return rescale(v, from, to, max)
}

// rescaleUp is v (> 0) from units of 1/from to units of 1/to, rounded up, saturating at max.
func rescaleUp(v, from, to uint64, max int64) int64 {
	hi, lo := bits.Mul64(v, to)
	if hi >= from {
		return max
	}
	r, rem := bits.Div64(hi, lo, from)
	if rem != 0 {
		r++
	}
	if r > uint64(max) {
		return max
	}
	return int64(r)
}

// ceilDiv is ceil(a/b) for 0 <= a <= MaxInt64 and 0 < b <= MaxInt64 (so a+b-1 cannot overflow).
func ceilDiv(a, b uint64) int64 {
	return int64((a + b - 1) / b)
}

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
