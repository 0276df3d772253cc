package policy

import (
	"context"
	"errors"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/rulestore"
)

// ReasonShuttingDown is the reason of a throttled request refused because the service shuts
// down before its turn comes (Drain).
const ReasonShuttingDown = "shutting_down"

// errShuttingDown ends a hold whose turn comes after the drain deadline.
var errShuttingDown = errors.New("shutting down")

// drainState is when held requests must have been answered by. The zero deadline means no
// drain.
type drainState struct {
	deadline time.Time
}

// Drain says that the service stops at deadline (on the Decider's clock): from now on, a
// throttled request whose turn comes after deadline is refused at once, OVER_LIMIT with reason
// shutting_down and the time until its turn as retry-after, instead of being held until a
// stop would cut it off with an error (which Envoy's rate-limit filter admits by default).
// Those whose turn comes before deadline are held and allowed as usual. A later call with an
// earlier deadline (Drain(now) when the grace ends) refuses what is still held; a later
// deadline than the one in force changes nothing. The tokens a refused request took stay
// taken, as a cancelled wait's do.
func (d *Decider) Drain(deadline time.Time) {
	d.drainMu.Lock()
	defer d.drainMu.Unlock()
	old := d.drain.Load()
	if !old.deadline.IsZero() && !deadline.Before(old.deadline) {
		return
	}
	d.drain.Store(&drainState{deadline: deadline})
	d.wake.wakeAll() // after the store: a hold woken, or waiting after it, sees the deadline
}

// hold waits w (to the HoldResolution after it), or until ctx ends (its error), or until a
// Drain deadline falls before the end of the wait (errShuttingDown).
func (d *Decider) hold(ctx context.Context, w time.Duration) error {
	if w <= 0 {
		return nil
	}
	end := d.now().Add(w)
	if ds := d.drain.Load(); !ds.deadline.IsZero() && end.After(ds.deadline) {
		return errShuttingDown // not queued at all: no wait recorded
	}
	if d.rec != nil {
		d.rec.QueueWait(w)
	}
	// Its interval's channel first, then the deadline: a Drain stores its deadline before it
	// closes every interval's channel, so that a hold either sees the deadline or is woken.
	turn, n := d.wake.at(w) // shared with the calls whose turn falls in the same interval
	done := ctx.Done()
	for {
		ds := d.drain.Load()
		if !ds.deadline.IsZero() && end.After(ds.deadline) {
			return errShuttingDown
		}
		if done == nil {
			<-turn
		} else {
			select {
			case <-turn:
			case <-done:
				return ctx.Err()
			}
		}
		if d.drain.Load() == ds {
			return nil // its interval's end: no Drain came
		}
		turn = d.wake.again(n) // maybe woken by a Drain: its deadline, then the interval again
	}
}

// shuttingDown refuses req, which was held for a throttle rule until the service stops: the
// first throttled entry is the one at fault, retry-after is the time until its turn.
func (d *Decider) shuttingDown(req *Request, v *Verdict, set *rulestore.Set, entries []descriptors.Entry, turn time.Duration) {
	i, rule := d.throttled(set, req.Domain, entries)
	d.queueFull(req, v, set, entries, max(i, 0), rule)
	v.Outcome = ShuttingDown
	v.Block.Reason = ReasonShuttingDown
	v.RetryAfter = max(turn, time.Second)
}
