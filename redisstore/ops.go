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
const opNumbers = 16

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
	return kindOf(&op).check(&op)
}

// checkTimed checks the bounds of an op of a kind limited per duration (bucket, throttle) and
// returns its rate and duration in lowest terms (see reduce).
func checkTimed(op *hotparam.RemoteOp) (rate, d int64, err error) {
	if op.Duration < time.Microsecond {
		return 0, 0, fmt.Errorf("rule %q: duration %v is under a microsecond", op.RuleID, op.Duration)
	}
	rate, d = reduce(op.Count, op.Duration)
	if op.Burst > MaxCount || (op.Count+op.Burst) > maxExact/d {
		return 0, 0, fmt.Errorf("rule %q: (count+burst)*duration: %w", op.RuleID, ErrOutOfRange)
	}
	return rate, d, nil
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
// the turn in the max wait and lease numbers. The last number, the tokens to book ahead, is 0
// (withBook sets it).
func opArg(op *hotparam.RemoteOp, k, lk int, undo bool, hits int64) string {
	lease := op.Lease
	if lease <= 0 {
		lease = hotparam.DefaultLease
	}
	a := opArgs{hits: hits, wait: int64(max(op.MaxWait, 0)), lease: lease.Microseconds(), lk: int64(lk)}
	kd := kindOf(op)
	if op.Unhold && kd != kindConcurrency {
		kd = kindThrottle // a turn given back is a throttle's
	}
	kd.arg(op, undo, &a)
	rate, d := reduce(op.Count, op.Duration)
	release, refund := op.Release, op.Refund
	probe := op.Probe && !op.Release
	if undo {
		release, refund, probe = true, true, false
	}
	b := make([]byte, 0, 8*opNumbers+len(a.id))
	for _, v := range [opNumbers]int64{
		int64(k), a.kind, op.Count, op.Count + op.Burst, d, rate, a.wait, a.lease, a.hits,
		flag(release), flag(refund), flag(op.Shadow), flag(undo), a.lk, flag(probe), 0,
	} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(append(b, a.id...))
}

// withBook returns arg, an op's script argument, asking the script to book n tokens ahead
// when the op is the last of its run in a batch and takes a token (see Config.BookAhead).
func withBook(arg string, n int64) string {
	if n <= 0 {
		return arg
	}
	b := []byte(arg)
	binary.LittleEndian.PutUint64(b[8*(opNumbers-1):], math.Float64bits(float64(n)))
	return string(b)
}

// opArgs are the numbers of an op's script argument that its kind sets (kindMethods.arg): the
// kind's number (kind, or a variant of it: argCharge, argUnhold), the hits, the max wait (ns)
// and lease (us) numbers, the refund record key index, and the lease id sent after the numbers.
type opArgs struct {
	kind, hits, wait, lease, lk int64
	id                          string
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
	if (kindOf(op) != kindConcurrency && !op.Refund) || op.LeaseID == "" {
		return ""
	}
	if len(op.LeaseID) <= maxLeaseID {
		return op.LeaseID
	}
	sum := sha256.Sum256([]byte(op.LeaseID))
	return "#" + hex.EncodeToString(sum[:16])
}
