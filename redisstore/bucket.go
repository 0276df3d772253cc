package redisstore

import (
	_ "embed"
	"fmt"

	"github.com/extauthz/extauthz/hotparam"
)

// bucketKind is the state of a reject rule's value: a token bucket, its tokens scaled by the
// reduced duration (script_bucket.lua). A postpaid rule's charge is sent as argCharge.
type bucketKind struct{}

//go:embed script_bucket.lua
var bucketScript string

// argCharge, in the script's arguments, is a postpaid bucket's charge: a bucket state, taken
// from whatever is left into debt (see hotparam.RemoteOp.Postpaid).
const argCharge = 4

func (bucketKind) letter() string { return "B" }

func (bucketKind) check(op *hotparam.RemoteOp) error {
	_, d, err := checkTimed(op)
	if err != nil {
		return err
	}
	// a postpaid bucket goes down to one bucket of debt and is charged up to two buckets at
	// once: three capacities must stay exact
	if op.Postpaid && (op.Count+op.Burst) > maxExact/4/d {
		return fmt.Errorf("rule %q: postpaid (count+burst)*duration: %w", op.RuleID, ErrOutOfRange)
	}
	return nil
}

func (bucketKind) arg(op *hotparam.RemoteOp, undo bool, a *opArgs) {
	a.kind = int64(kindBucket)
	if op.Postpaid && op.Release && !undo {
		// a charge of more than two buckets leaves the same debt (one bucket) as one of two
		a.kind = argCharge
		a.hits = min(a.hits, 2*(op.Count+op.Burst))
		return
	}
	a.hits = min(a.hits, op.Count+op.Burst+1)
}

func (bucketKind) full(op *hotparam.RemoteOp) int64 { return op.Count + op.Burst }

func (bucketKind) cacheable(op *hotparam.RemoteOp) bool { return hitsOf(*op) == 1 }

func (bucketKind) cached(*hotparam.RemoteOp, *blockEntry, *hotparam.RemoteResult) bool {
	return true
}

// fast reports whether the script's fast path takes op alone: one bucket acquisition (or
// probe) with no refund record.
func fast(op *hotparam.RemoteOp) bool {
	return kindOf(op) == kindBucket && !op.Release && op.Count > 0 &&
		(!op.Refund || op.LeaseID == "" || op.Probe)
}
