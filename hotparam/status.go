package hotparam

import "time"

// count adds one request to the counters of window w.
func (s *counters) count(w uint32, passed, blocked bool) {
	if s.win != w {
		if s.win+1 == w {
			s.prevPassed, s.prevBlocked = s.passed, s.blocked
		} else {
			s.prevPassed, s.prevBlocked = 0, 0
		}
		s.passed, s.blocked, s.win = 0, 0, w
	}
	if passed && s.passed < ^uint32(0) {
		s.passed++
	}
	if blocked && s.blocked < ^uint32(0) {
		s.blocked++
	}
}

// overflowRetry is the Retry-After of a value refused for a full ledger: the time for some
// of its states to end is not known.
const overflowRetry = int64(time.Second)

// offer makes c the entry's status if it is tighter: a blocked limit before one that passed,
// then the least remaining, then the first rule; of equals the first offered (ops are offered
// in the call's order, so of two values of one rule, the call's first).
func offer(cur *Status, c Status) {
	switch {
	case cur.Rule < 0:
	case (c.RetryAfter > 0) != (cur.RetryAfter > 0):
		if c.RetryAfter == 0 {
			return
		}
	case c.Remaining > cur.Remaining || (c.Remaining == cur.Remaining && c.Rule >= cur.Rule):
		return
	}
	*cur = c
}

func blockOf(o *op) Block {
	return Block{Entry: int(o.entry), Rule: int(o.rs.index), Param: o.rs.param, Value: o.value,
		Reason: o.rs.kind.reason(), RetryAfter: durationOf(o.retry)}
}
