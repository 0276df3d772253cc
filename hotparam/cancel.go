package hotparam

import (
	"context"
	"strings"
	"time"
)

// A held call (Decision.Wait > 0) was given turns on its throttle rules' values: each turn is
// the value's schedule pushed on by the call's hits. When the call is given up during its wait
// (its client or Envoy cancels), Unhold gives the turns back, exactly, as far as that never
// moves another call's turn nor admits a call sooner than the rule's spacing after one that
// passed:
//
//   - a turn that is still its value's latest (the schedule is as the reservation left it) is
//     undone: the schedule goes back to what it was before the reservation, as if the call had
//     never asked;
//   - a turn with later ones queued behind it cannot be undone without moving theirs, so it
//     stays taken for now, and is remembered as given up (with the shard, in turns); when the
//     turns behind it are given back in turn, the schedule comes back to where it left it and
//     it is undone then. A client that abandons a queue of its requests, whatever the order of
//     the cancels, thus gets the whole queue back.
//
// Each shard remembers at most maxGivenUp turns given up; past that, or once a turn's slot is
// in the past (there is nothing left to give back), it is forgotten. A value evicted meanwhile
// takes its turns with it. Forgetting only gives back less.
//
// A cluster rule's turn is given back by the Remote (RemoteOp.Unhold), by the same rules when
// the Remote keeps a record of turns given up (the Redis store does), and by the first alone
// when it does not.

// Hold is what a held call reserved, for Limiter.Unhold. It is not safe for concurrent use: one
// Unhold per Hold.
type Hold struct {
	turns  []heldTurn
	one    [1]heldTurn // the turns of a call of one throttle value: no second allocation
	remote []RemoteOp  // the cluster rules' turns, as the Remote's Unhold ops, in call order
}

// heldTurn is one turn of a held call: the value's state just before and right after the
// reservation, and where the value is kept.
type heldTurn struct {
	rs           *ruleState
	key          string // the value, owned by the Hold
	hash         uint64
	shard        int32
	saved, after state
}

// givenUp is a turn given up while later ones were queued behind it, kept by its shard.
type givenUp struct {
	slot         int32
	saved, after state
}

// maxGivenUp is the most turns given up a shard remembers (56 bytes each).
const maxGivenUp = 64

// holdOf adds to h the turns the local ops of a held call took and returns it; a nil h is made
// when there is one (and stays nil when there is none). The ops are no longer locked: it keeps
// only what they recorded.
func holdOf(ops []op, h *Hold) *Hold {
	for i := range ops {
		o := &ops[i]
		if o.sh == nil || !o.rs.kind.holds() || !o.applied || o.probe || o.gone {
			continue
		}
		if h == nil {
			h = &Hold{}
		}
		if h.turns == nil {
			h.turns = h.one[:0]
		}
		h.turns = append(h.turns, heldTurn{rs: o.rs, key: strings.Clone(o.value), hash: o.hash, shard: o.shard,
			saved: o.saved, after: o.after()})
	}
	return h
}

// remoteHold returns the Hold of the turns a held call's cluster ops took in the Remote (rops,
// answered in res), nil when none did.
func remoteHold(ops []op, rops []RemoteOp, res []RemoteResult) *Hold {
	var h *Hold
	for i := range ops {
		o := &ops[i]
		if o.rk < 0 || !o.rs.kind.holds() || o.probe || o.release {
			continue
		}
		r := &res[o.rk]
		if !r.Allowed || r.Turn == (Turn{}) {
			continue
		}
		if h == nil {
			h = &Hold{}
		}
		u := rops[o.rk]
		u.Release, u.Unhold, u.Turn = true, true, r.Turn
		h.remote = append(h.remote, u)
	}
	return h
}

// Unhold gives back the throttle turns of a held call given up during its wait (see Hold):
// those still their values' latest at once, the others when the turns behind them are given
// back. It returns how many turns it gave back now. A nil h gives back nothing. Call it at most
// once per Hold, and only for a call that was not let through. The turns of cluster rules are
// given back by the Remote, within ctx (which should not be the given-up call's own, done
// already); if it fails they stay taken.
func (l *Limiter) Unhold(ctx context.Context, now time.Time, h *Hold) int {
	if h == nil {
		return 0
	}
	t := now.UnixNano()
	n := 0
	for i := len(h.turns) - 1; i >= 0; i-- { // the call's last turn first: it may stand on another
		n += h.turns[i].giveBack(t)
	}
	h.turns = h.turns[:0]
	if len(h.remote) > 0 && l.opts.Remote != nil {
		ops := h.remote
		h.remote = nil
		for i, j := 0, len(ops)-1; i < j; i, j = i+1, j-1 {
			ops[i], ops[j] = ops[j], ops[i] // the last turn first, as above
		}
		res := make([]RemoteResult, len(ops))
		if l.opts.Remote.Eval(ctx, ops, res) == nil {
			for i := range res {
				if res[i].Allowed {
					n += int(max(res[i].Remaining, 1))
				}
			}
		}
	}
	return n
}

// giveBack gives back the turn if its value's schedule is still as it left it, with the turns
// given up before it that this brings back; otherwise it remembers the turn as given up. It
// returns how many turns it gave back.
func (ht *heldTurn) giveBack(now int64) int {
	sh, slot := ht.lock()
	if sh == nil {
		return 0 // no longer tracked: the value took its turns with it
	}
	defer sh.mu.Unlock()
	sh.pruneGivenUp(now)
	s := &sh.at(slot).st
	if *s != ht.after {
		if next, _ := ht.after.throttle(); next > now && len(sh.turns) < maxGivenUp {
			sh.turns = append(sh.turns, givenUp{slot: slot, saved: ht.saved, after: ht.after})
		}
		return 0
	}
	*s = ht.saved
	n := 1
	for j := 0; j < len(sh.turns); {
		if g := &sh.turns[j]; g.slot == slot && g.after == *s {
			*s = g.saved
			n++
			sh.dropGivenUp(j)
			j = 0 // the one it stood on may be listed before it
			continue
		}
		j++
	}
	return n
}

// lock locks the shard of the turn's value and returns it with the value's slot; nil when the
// value is not tracked any more.
func (ht *heldTurn) lock() (*shard, int32) {
	for {
		shards := ht.rs.store.current()
		if shards == nil {
			return nil, -1
		}
		sh := &shards[ht.shard]
		sh.mu.Lock()
		if sh.dead { // dropped by Sweep meanwhile: look again
			sh.mu.Unlock()
			continue
		}
		if _, slot := sh.index.find(sh, ht.key, ht.hash); slot >= 0 {
			return sh, slot
		}
		sh.mu.Unlock()
		return nil, -1
	}
}

// pruneGivenUp forgets the turns given up whose slots are past: their values' schedules have
// moved on to now or beyond. Requires mu held.
func (sh *shard) pruneGivenUp(now int64) {
	for j := 0; j < len(sh.turns); {
		if next, _ := sh.turns[j].after.throttle(); next <= now {
			sh.dropGivenUp(j)
			continue
		}
		j++
	}
}

// forgetGivenUp forgets the turns given up of slot i (its value is dropped). Requires mu held.
func (sh *shard) forgetGivenUp(i int32) {
	for j := 0; j < len(sh.turns); {
		if sh.turns[j].slot == i {
			sh.dropGivenUp(j)
			continue
		}
		j++
	}
}

// dropGivenUp removes the j-th turn given up, freeing the list once empty. Requires mu held.
func (sh *shard) dropGivenUp(j int) {
	last := len(sh.turns) - 1
	sh.turns[j] = sh.turns[last]
	sh.turns = sh.turns[:last]
	if last == 0 {
		sh.turns = nil
	}
}
