package hotparam

import (
	"errors"
	"math/bits"
)

// state is one value's state under one rule: two words and the scale of a fraction, whose
// meaning depends on the rule's kind. It is read and written only through the accessors of
// that kind, in its file: bucket (reject.go), throttle (throttle.go), inFlight (concurrency.go).
type state struct {
	x, y  int64
	scale uint64
}

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
