package redisstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// maxExact bounds every integer the script computes with, so that Lua's doubles (exact to 2^53)
// stay exact with room for sums.
const maxExact = 1 << 52

// Bounds of an op, checked by CheckOp.
const (
	MaxCount           = 1 << 40 // most tokens per duration, or most in flight
	MaxConcurrentCount = 1 << 24 // most in flight per value (one sorted-set member each)
)

// ErrOutOfRange is wrapped by the errors of CheckOp: an op whose numbers the store cannot
// compute with exactly.
var ErrOutOfRange = errors.New("out of the store's exact range")

// opNumbers is the number of doubles that start an op's script argument.
const opNumbers = 15

// Kinds of state in the script's arguments. kindCharge is a postpaid bucket's charge: a bucket
// state, taken from whatever is left into debt (see hotparam.RemoteOp.Postpaid). kindUnhold is
// a throttle turn given back if it is still the schedule's last (hotparam.RemoteOp.Unhold).
const (
	kindBucket      = 1
	kindThrottle    = 2
	kindConcurrency = 3
	kindCharge      = 4
	kindUnhold      = 5
)

// CheckOp reports whether the store can evaluate op exactly. The store computes in whole
// microseconds (the resolution of the Redis clock): Duration and Lease are truncated to
// microseconds and must be at least one. With count/duration in lowest terms as r/d (d in
// microseconds), capacity*d, hits*d (throttle) and max wait in microseconds times r must stay
// below 2^52: 10^6 per day, 10^9 per second and 10^12 per hour all fit. Eval returns these errors
// too; rule loaders may call CheckOp to reject such rules early.
func CheckOp(op hotparam.RemoteOp) error {
	switch {
	case op.Count < 0:
		return fmt.Errorf("rule %q: count %d is negative", op.RuleID, op.Count)
	case op.Burst < 0:
		return fmt.Errorf("rule %q: burst %d is negative", op.RuleID, op.Burst)
	case op.Count > MaxCount:
		return fmt.Errorf("rule %q: count %d: %w", op.RuleID, op.Count, ErrOutOfRange)
	}
	if op.Grade == hotparam.Concurrency {
		if op.Count > MaxConcurrentCount {
			return fmt.Errorf("rule %q: concurrency count %d: %w", op.RuleID, op.Count, ErrOutOfRange)
		}
		if op.Lease != 0 && op.Lease < time.Microsecond {
			return fmt.Errorf("rule %q: lease %v is under a microsecond", op.RuleID, op.Lease)
		}
		return nil
	}
	if op.Duration < time.Microsecond {
		return fmt.Errorf("rule %q: duration %v is under a microsecond", op.RuleID, op.Duration)
	}
	rate, d := reduce(op.Count, op.Duration)
	if op.Burst > MaxCount || (op.Count+op.Burst) > maxExact/d {
		return fmt.Errorf("rule %q: (count+burst)*duration: %w", op.RuleID, ErrOutOfRange)
	}
	// a postpaid bucket goes down to one bucket of debt and is charged up to two buckets at
	// once: three capacities must stay exact
	if op.Postpaid && (op.Count+op.Burst) > maxExact/4/d {
		return fmt.Errorf("rule %q: postpaid (count+burst)*duration: %w", op.RuleID, ErrOutOfRange)
	}
	if op.Behavior == hotparam.Throttle {
		if hitsOf(op) > maxExact/d {
			return fmt.Errorf("rule %q: hits %d * duration: %w", op.RuleID, op.Hits, ErrOutOfRange)
		}
		if op.MaxWait > maxExact || (rate > 0 && op.MaxWait.Microseconds() > maxExact/rate) {
			return fmt.Errorf("rule %q: max wait %v * count: %w", op.RuleID, op.MaxWait, ErrOutOfRange)
		}
	}
	return nil
}

// CheckOp is the package's CheckOp, for hotparam.RemoteChecker: rule loaders call it so that a
// cluster rule the store cannot count exactly is refused at load rather than failing every call.
func (s *Store) CheckOp(op hotparam.RemoteOp) error { return CheckOp(op) }

var _ hotparam.RemoteChecker = (*Store)(nil)

// reduce returns count and duration (in microseconds) divided by their greatest common divisor:
// the same rate in lowest terms, so the script's numbers stay small.
func reduce(count int64, duration time.Duration) (rate, d int64) {
	d = duration.Microseconds()
	if count <= 0 {
		return 0, d
	}
	a, b := count, d
	for b != 0 {
		a, b = b, a%b
	}
	return count / a, d / a
}

func hitsOf(op hotparam.RemoteOp) int64 {
	if op.Hits < 1 {
		return 1
	}
	return op.Hits
}

// opArg is the script argument of op, whose key is KEYS[k] and whose refund lease record is
// KEYS[lk] (lk 0: none): opNumbers little-endian doubles, then the lease id (concurrency). Hits
// above what could ever pass are cut to capacity+1: the answer is the same and the numbers stay
// small. An undo gives back hits (0: nothing to give back). A probe (never with a release or an
// undo) is decided as the acquisition and consumes nothing. A turn given back (Unhold) carries
// the turn in the max wait and lease numbers.
func opArg(op *hotparam.RemoteOp, k, lk int, undo bool, hits int64) string {
	lease := op.Lease
	if lease <= 0 {
		lease = hotparam.DefaultLease
	}
	wait, leaseUs := int64(max(op.MaxWait, 0)), lease.Microseconds()
	var kind int64 = kindBucket
	switch {
	case op.Grade == hotparam.Concurrency:
		kind = kindConcurrency
		hits = min(hits, op.Count+1)
	case op.Behavior == hotparam.Throttle && op.Unhold && !undo:
		kind = kindUnhold
		wait, leaseUs = op.Turn.At, op.Turn.Frac
	case op.Unhold:
		lk = 0 // an undo gives nothing back for it; its record is no refund's
		kind = kindThrottle
	case op.Behavior == hotparam.Throttle:
		kind = kindThrottle
	case op.Postpaid && op.Release && !undo:
		// a charge of more than two buckets leaves the same debt (one bucket) as one of two
		kind = kindCharge
		hits = min(hits, 2*(op.Count+op.Burst))
	default:
		hits = min(hits, op.Count+op.Burst+1)
	}
	id := ""
	if kind == kindConcurrency {
		id = leaseName(op)
	}
	rate, d := reduce(op.Count, op.Duration)
	release, refund := op.Release, op.Refund
	probe := op.Probe && !op.Release
	if undo {
		release, refund, probe = true, true, false
	}
	b := make([]byte, 0, 8*opNumbers+len(id))
	for _, v := range [opNumbers]int64{
		int64(k), kind, op.Count, op.Count + op.Burst, d, rate, wait, leaseUs, hits,
		flag(release), flag(refund), flag(op.Shadow), flag(undo), int64(lk), flag(probe),
	} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(append(b, id...))
}

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// maxLeaseID is the longest lease id used as is in a member name; longer ids are hashed.
const maxLeaseID = 64

// leaseName is the name of a concurrency or refund op's lease: its LeaseID, hashed when long so
// that a member or key stays small; "" for other ops or without an id.
func leaseName(op *hotparam.RemoteOp) string {
	if (op.Grade != hotparam.Concurrency && !op.Refund) || op.LeaseID == "" {
		return ""
	}
	if len(op.LeaseID) <= maxLeaseID {
		return op.LeaseID
	}
	sum := sha256.Sum256([]byte(op.LeaseID))
	return "#" + hex.EncodeToString(sum[:16])
}
