package hotparam

import (
	"fmt"
	"time"
)

// kind is how a rule keeps and checks its values' states: a token bucket (kindReject,
// reject.go), uniform queueing (kindThrottle, throttle.go) or leases in flight
// (kindConcurrency, concurrency.go). A rule's kind is chosen once, when it is compiled
// (kindOf); the transaction of a Check (check.go), eviction (flood.go), Sweep and Top call
// its methods and never ask which kind it is. Each kind is an empty type in its own file that
// implements kindMethods; kind's methods below only dispatch to it. They are static calls, not
// calls through an interface, so that the ops and options a Check passes stay on its stack.
type kind uint8

const (
	kindReject kind = iota
	kindThrottle
	kindConcurrency
)

// kindMethods is what each kind implements. Unless said otherwise, the methods require the
// shard of the value locked, and s is the state of the op's slot.
type kindMethods interface {
	// newLimit precomputes the threshold count (+burst) per duration d.
	newLimit(count, burst int64, d time.Duration) (limit, error)
	// check reports the settings of r the kind cannot honour.
	check(r *Rule) error
	// takesRelease reports whether r's values take Release entries; leased, whether its ops
	// carry the entry's LeaseID; inFlight, whether it counts requests in flight (left out
	// by CheckOptions.SkipConcurrency, its values forgotten once nothing is in flight).
	takesRelease(r *Rule) bool
	leased(r *Rule) bool
	inFlight() bool
	// holds reports whether an op that passed may have taken a turn a held call gives back
	// (Hold, cancel.go).
	holds() bool
	// topWindow is the window of r's Top counters before the one-second floor, when
	// Options.TopWindow leaves it to the rule.
	topWindow(r *Rule) time.Duration
	// reason is why a rule of the kind blocked.
	reason() Reason

	// init makes s the state of a value created at now.
	init(lim *limit, s *state, now int64)
	// reserve runs the op o that is not refused for a full ledger on its value: it applies a
	// release or a charge (decided false: nothing to decide), or reserves what o asks and
	// reports whether it could (ok), keeping in o what undo and revert need. It sets
	// o.retry when it could not, o.wait for a held request.
	reserve(o *op, s *state, now int64, opt *CheckOptions) (ok, decided bool)
	// undo gives back what reserve kept outside s, once s is back at o.saved.
	undo(o *op)
	// revert gives back what an early op took, as far as other calls since allow (see
	// revert in remote.go).
	revert(o *op, s *state, now int64)
	// status is the Remaining and ResetAfter of o's status, from s as it stands.
	status(o *op, s *state, now int64, opt *CheckOptions) (remaining int64, resetAfter time.Duration)
	// statusDuration is the Duration of r's statuses, local or from the Remote.
	statusDuration(r *Rule) time.Duration
	// remaining is what the value of slot i has left at now, without changing its state.
	remaining(rs *ruleState, sh *shard, i int32, now int64) int64

	// idle drops the ended leases (or refund records) of slot i and reports whether its state
	// is back to the default at now, so that forgetting it loses nothing (Sweep).
	idle(rs *ruleState, sh *shard, i int32, now int64) bool
	// backAt is the state of slot i as a parked state (see flood.go), 0 when it is the
	// default already; restore gives the value of slot i, just created at now, the parked
	// state v (not 0).
	backAt(rs *ruleState, sh *shard, i int32) uint64
	restore(rs *ruleState, sh *shard, i int32, v uint64, lim *limit, now int64)
	// ended reports whether the parked state v is back to the default at now; endOf is the
	// instant it ends, comparable between states of one rule; merge is the later of two
	// states of values that share a hash.
	ended(v uint64, now int64) bool
	endOf(v uint64) uint64
	merge(a, b uint64) uint64
}

// kindOf is the kind of rule r.
func kindOf(r *Rule) (kind, error) {
	switch {
	case r.Grade == Concurrency:
		return kindConcurrency, nil
	case r.Grade != QPS:
		return 0, fmt.Errorf("unknown grade %d", r.Grade)
	case r.Behavior == Throttle:
		return kindThrottle, nil
	case r.Behavior != Reject:
		return 0, fmt.Errorf("unknown behavior %d", r.Behavior)
	}
	return kindReject, nil
}

// baseLimit is the threshold count (+burst) per d without a kind's precomputation.
func baseLimit(count, burst int64, d time.Duration) (limit, error) {
	l := limit{count: count, burst: burst, dur: int64(d)}
	if count < 0 || burst < 0 {
		return l, fmt.Errorf("negative count %d or burst %d", count, burst)
	}
	return l, nil
}

// timedLimit is baseLimit for a kind whose limit is per duration: d must be positive.
func timedLimit(count, burst int64, d time.Duration) (limit, error) {
	l, err := baseLimit(count, burst, d)
	if err == nil && d <= 0 {
		err = fmt.Errorf("duration %v is not positive", d)
	}
	return l, err
}

// The parked state of reject and throttle rules is an instant (Unix ns): the value is back to
// its default then.

func instantEnded(v uint64, now int64) bool { return v <= uint64(max(now, 0)) }

// instantIdle is kind.idle for the kinds whose parked state is an instant: refund records
// (also those of a rule reloaded without refund) expire, and the value is idle when it holds
// none and its state is back to the default.
func instantIdle(rs *ruleState, sh *shard, i int32, now int64) bool {
	sh.expire(i, now)
	return len(sh.leases[i]) == 0 && instantEnded(rs.kind.backAt(rs, sh, i), now)
}

var (
	_ kindMethods = rejectKind{}
	_ kindMethods = throttleKind{}
	_ kindMethods = concurrencyKind{}
)

// The dispatch of kind's methods to the kinds. reserve and status, run for every op of every
// Check, are called directly on the kinds by Limiter.reserve and Limiter.finish (check.go), a
// call frame less; a kind they do not name goes through these.

func (k kind) newLimit(count, burst int64, d time.Duration) (limit, error) {
	switch k {
	case kindThrottle:
		return throttleKind{}.newLimit(count, burst, d)
	case kindConcurrency:
		return concurrencyKind{}.newLimit(count, burst, d)
	}
	return rejectKind{}.newLimit(count, burst, d)
}

func (k kind) check(r *Rule) error {
	switch k {
	case kindThrottle:
		return throttleKind{}.check(r)
	case kindConcurrency:
		return concurrencyKind{}.check(r)
	}
	return rejectKind{}.check(r)
}

func (k kind) takesRelease(r *Rule) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.takesRelease(r)
	case kindConcurrency:
		return concurrencyKind{}.takesRelease(r)
	}
	return rejectKind{}.takesRelease(r)
}

func (k kind) leased(r *Rule) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.leased(r)
	case kindConcurrency:
		return concurrencyKind{}.leased(r)
	}
	return rejectKind{}.leased(r)
}

func (k kind) inFlight() bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.inFlight()
	case kindConcurrency:
		return concurrencyKind{}.inFlight()
	}
	return rejectKind{}.inFlight()
}

func (k kind) holds() bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.holds()
	case kindConcurrency:
		return concurrencyKind{}.holds()
	}
	return rejectKind{}.holds()
}

func (k kind) topWindow(r *Rule) time.Duration {
	switch k {
	case kindThrottle:
		return throttleKind{}.topWindow(r)
	case kindConcurrency:
		return concurrencyKind{}.topWindow(r)
	}
	return rejectKind{}.topWindow(r)
}

func (k kind) reason() Reason {
	switch k {
	case kindThrottle:
		return throttleKind{}.reason()
	case kindConcurrency:
		return concurrencyKind{}.reason()
	}
	return rejectKind{}.reason()
}

func (k kind) init(lim *limit, s *state, now int64) {
	switch k {
	case kindThrottle:
		throttleKind{}.init(lim, s, now)
	case kindConcurrency:
		concurrencyKind{}.init(lim, s, now)
	default:
		rejectKind{}.init(lim, s, now)
	}
}

func (k kind) reserve(o *op, s *state, now int64, opt *CheckOptions) (ok, decided bool) {
	switch k {
	case kindThrottle:
		return throttleKind{}.reserve(o, s, now, opt)
	case kindConcurrency:
		return concurrencyKind{}.reserve(o, s, now, opt)
	}
	return rejectKind{}.reserve(o, s, now, opt)
}

func (k kind) undo(o *op) {
	switch k {
	case kindThrottle:
		throttleKind{}.undo(o)
	case kindConcurrency:
		concurrencyKind{}.undo(o)
	default:
		rejectKind{}.undo(o)
	}
}

func (k kind) revert(o *op, s *state, now int64) {
	switch k {
	case kindThrottle:
		throttleKind{}.revert(o, s, now)
	case kindConcurrency:
		concurrencyKind{}.revert(o, s, now)
	default:
		rejectKind{}.revert(o, s, now)
	}
}

func (k kind) status(o *op, s *state, now int64, opt *CheckOptions) (remaining int64, resetAfter time.Duration) {
	switch k {
	case kindThrottle:
		return throttleKind{}.status(o, s, now, opt)
	case kindConcurrency:
		return concurrencyKind{}.status(o, s, now, opt)
	}
	return rejectKind{}.status(o, s, now, opt)
}

func (k kind) statusDuration(r *Rule) time.Duration {
	switch k {
	case kindThrottle:
		return throttleKind{}.statusDuration(r)
	case kindConcurrency:
		return concurrencyKind{}.statusDuration(r)
	}
	return rejectKind{}.statusDuration(r)
}

func (k kind) remaining(rs *ruleState, sh *shard, i int32, now int64) int64 {
	switch k {
	case kindThrottle:
		return throttleKind{}.remaining(rs, sh, i, now)
	case kindConcurrency:
		return concurrencyKind{}.remaining(rs, sh, i, now)
	}
	return rejectKind{}.remaining(rs, sh, i, now)
}

func (k kind) idle(rs *ruleState, sh *shard, i int32, now int64) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.idle(rs, sh, i, now)
	case kindConcurrency:
		return concurrencyKind{}.idle(rs, sh, i, now)
	}
	return rejectKind{}.idle(rs, sh, i, now)
}

func (k kind) backAt(rs *ruleState, sh *shard, i int32) uint64 {
	switch k {
	case kindThrottle:
		return throttleKind{}.backAt(rs, sh, i)
	case kindConcurrency:
		return concurrencyKind{}.backAt(rs, sh, i)
	}
	return rejectKind{}.backAt(rs, sh, i)
}

func (k kind) restore(rs *ruleState, sh *shard, i int32, v uint64, lim *limit, now int64) {
	switch k {
	case kindThrottle:
		throttleKind{}.restore(rs, sh, i, v, lim, now)
	case kindConcurrency:
		concurrencyKind{}.restore(rs, sh, i, v, lim, now)
	default:
		rejectKind{}.restore(rs, sh, i, v, lim, now)
	}
}

func (k kind) ended(v uint64, now int64) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.ended(v, now)
	case kindConcurrency:
		return concurrencyKind{}.ended(v, now)
	}
	return rejectKind{}.ended(v, now)
}

func (k kind) endOf(v uint64) uint64 {
	switch k {
	case kindThrottle:
		return throttleKind{}.endOf(v)
	case kindConcurrency:
		return concurrencyKind{}.endOf(v)
	}
	return rejectKind{}.endOf(v)
}

func (k kind) merge(a, b uint64) uint64 {
	switch k {
	case kindThrottle:
		return throttleKind{}.merge(a, b)
	case kindConcurrency:
		return concurrencyKind{}.merge(a, b)
	}
	return rejectKind{}.merge(a, b)
}
