package redisstore

import (
	_ "embed"
	"fmt"

	"github.com/extauthz/extauthz/hotparam"
)

// throttleKind is the state of a throttle rule's value: its schedule, the instant it is free
// in microseconds and a fraction (script_throttle.lua). A turn given back is sent as
// argUnhold.
type throttleKind struct{}

//go:embed script_throttle.lua
var throttleScript string

// argUnhold, in the script's arguments, is a throttle turn given back if it is still the
// schedule's last (hotparam.RemoteOp.Unhold).
const argUnhold = 5

func (throttleKind) letter() string { return "T" }

func (throttleKind) check(op *hotparam.RemoteOp) error {
	rate, d, err := checkTimed(op)
	if err != nil {
		return err
	}
	if op.Postpaid && (op.Count+op.Burst) > maxExact/4/d {
		return fmt.Errorf("rule %q: postpaid (count+burst)*duration: %w", op.RuleID, ErrOutOfRange)
	}
	if hitsOf(*op) > maxExact/d {
		return fmt.Errorf("rule %q: hits %d * duration: %w", op.RuleID, op.Hits, ErrOutOfRange)
	}
	if op.MaxWait > maxExact || (rate > 0 && op.MaxWait.Microseconds() > maxExact/rate) {
		return fmt.Errorf("rule %q: max wait %v * count: %w", op.RuleID, op.MaxWait, ErrOutOfRange)
	}
	return nil
}

// arg sends a turn given back with the turn in the max wait and lease numbers; its undo (of a
// cross-slot call) gives nothing back for it: its record is no refund's.
func (throttleKind) arg(op *hotparam.RemoteOp, undo bool, a *opArgs) {
	a.kind = int64(kindThrottle)
	switch {
	case op.Unhold && !undo && op.Behavior == hotparam.Throttle:
		a.kind = argUnhold
		a.wait, a.lease = op.Turn.At, op.Turn.Frac
	case op.Unhold:
		a.lk = 0
	}
}

func (throttleKind) full(op *hotparam.RemoteOp) int64 { return op.Count }

func (throttleKind) cacheable(*hotparam.RemoteOp) bool { return true }

// cached: a refusal kept for a longer wait holds for op only when op may wait no longer, its
// retry after what it may wait less; a probe that may wait is refused, exactly, but its
// remaining counts the slots within MaxWait, which the entry does not know.
func (throttleKind) cached(op *hotparam.RemoteOp, e *blockEntry, r *hotparam.RemoteResult) bool {
	if op.Probe && op.MaxWait > 0 {
		return false
	}
	w := maxWaitOf(op)
	if w > e.maxWait {
		return false
	}
	r.RetryAfter += e.maxWait - w
	return true
}
