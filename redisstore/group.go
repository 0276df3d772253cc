package redisstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/redis/rueidis"
)

// group is the ops of one Eval that share a slot: one script call.
type group struct {
	slot uint16
	keys []string // distinct keys, KEYS of the script
	ops  []int    // indices into the ops of Eval
	kidx []int    // per op of the group: its key's index in keys, 1-based
	lidx []int    // per op: the index of its refund lease record's key, 1-based; 0 for none
	args []string
	out  []int64
	ok   bool // every non-shadow op of the group passed: the group consumed
}

// keys returns the state key of each op.
func (s *Store) keys(ops []hotparam.RemoteOp) []string {
	keys := make([]string, len(ops))
	for i := range ops {
		keys[i] = key(s.cfg.Prefix, &ops[i])
	}
	return keys
}

// group splits ops, whose state keys are keys, into slot groups: one group in standalone mode.
func (s *Store) group(ops []hotparam.RemoteOp, keys []string) []group {
	cluster := s.cfg.Mode == ModeCluster
	groups := make([]group, 0, 1)
	for i := range ops {
		k := keys[i]
		var sl uint16
		if cluster {
			sl = slot(k)
		}
		g := -1
		for j := range groups {
			if groups[j].slot == sl {
				g = j
				break
			}
		}
		if g < 0 {
			groups = append(groups, group{slot: sl})
			g = len(groups) - 1
		}
		lk := refundKey(s.cfg.Prefix, &ops[i])
		if ops[i].Unhold {
			lk = givenUpKey(s.cfg.Prefix, &ops[i]) // its value's turns given up
		}
		groups[g].add(i, k, lk)
	}
	return groups
}

// add adds op, whose state is at key k and whose refund lease record (or, for an Unhold op,
// record of turns given up) is at key lk ("" for none).
func (g *group) add(op int, k, lk string) {
	g.ops = append(g.ops, op)
	g.kidx = append(g.kidx, g.keyIndex(k))
	li := 0
	if lk != "" {
		li = g.keyIndex(lk)
	}
	g.lidx = append(g.lidx, li)
}

// keyIndex returns the 1-based index of k in keys, adding it when missing.
func (g *group) keyIndex(k string) int {
	for j, have := range g.keys {
		if have == k {
			return j + 1
		}
	}
	g.keys = append(g.keys, k)
	return len(g.keys)
}

func (g *group) encode(ops []hotparam.RemoteOp, now, nonce string) []string {
	args := make([]string, 0, 2+len(g.ops))
	args = append(args, now, nonce)
	for j, i := range g.ops {
		args = append(args, opArg(&ops[i], g.kidx[j], g.lidx[j], false, hitsOf(ops[i])))
	}
	return args
}

func (g *group) decode(res []hotparam.RemoteResult) error {
	per := 7 // the general path's numbers per op
	if len(g.ops) == 1 && len(g.out) == 6 {
		per = 5 // the fast path's: a bucket acquisition, no turn
	}
	if len(g.out) != 1+per*len(g.ops) {
		return fmt.Errorf("redis store: %w: %d numbers for %d ops", errBadReply, len(g.out), len(g.ops))
	}
	g.ok = g.out[0] == 1
	for j, i := range g.ops {
		o := g.out[1+per*j:]
		res[i] = hotparam.RemoteResult{
			Allowed:    o[0] == 1,
			Remaining:  o[1],
			ResetAfter: time.Duration(o[2]),
			RetryAfter: time.Duration(o[3]),
			Wait:       time.Duration(o[4]),
		}
		if per == 7 {
			res[i].Turn = hotparam.Turn{At: o[5], Frac: o[6]}
		}
	}
	return nil
}

// exec runs the script once per group, all groups in one pipelined batch (EVALSHA; EVAL for the
// groups whose server lacks the script), and stores each group's answer in out. It returns the
// first error; the groups that answered have their out set all the same.
func (s *Store) exec(ctx context.Context, c rueidis.Client, groups []group) error {
	cmds := make(rueidis.Commands, len(groups))
	for i := range groups {
		g := &groups[i]
		cmds[i] = c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(g.keys))).Key(g.keys...).Arg(g.args...).Build()
	}
	s.trips.Add(uint64(len(cmds)))
	var first error
	var retry []int
	for i, r := range c.DoMulti(ctx, cmds...) {
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			retry = append(retry, i)
			continue
		}
		if out, err := numbers(r); err != nil {
			first = cmp.Or(first, err)
		} else {
			groups[i].out = out
		}
	}
	if len(retry) > 0 {
		cmds = cmds[:0]
		for _, i := range retry {
			g := &groups[i]
			cmds = append(cmds, c.B().Eval().Script(scriptSource).Numkeys(int64(len(g.keys))).Key(g.keys...).Arg(g.args...).Build())
		}
		s.trips.Add(uint64(len(cmds)))
		for j, r := range c.DoMulti(ctx, cmds...) {
			if out, err := numbers(r); err != nil {
				first = cmp.Or(first, err)
			} else {
				groups[retry[j]].out = out
			}
		}
	}
	if first != nil {
		return fmt.Errorf("redis store: %w", first)
	}
	return nil
}

// numbers returns the numbers of a script reply: an array of integers (the general path), or
// a string of little-endian doubles (the fast path's), each an integer below 2^53.
func numbers(r rueidis.RedisResult) ([]int64, error) {
	m, err := r.ToMessage()
	if err != nil {
		return nil, err
	}
	if !m.IsString() {
		return m.AsIntSlice()
	}
	s, _ := m.ToString()
	if len(s)%8 != 0 {
		return nil, fmt.Errorf("%w: a string of %d bytes", errBadReply, len(s))
	}
	b := []byte(s)
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return out, nil
}

// undo gives back what the groups that passed consumed when another group blocked or failed:
// the same ops again as refunds, concurrency leases removed by name. Best effort: errors are
// ignored.
func (s *Store) undo(ctx context.Context, c rueidis.Client, ops []hotparam.RemoteOp, res []hotparam.RemoteResult, groups []group, now, nonce string) {
	var cmds rueidis.Commands
	for gi := range groups {
		g := &groups[gi]
		if g.out == nil || !g.ok {
			continue
		}
		args := append([]string(nil), g.args...)
		for j, i := range g.ops {
			hits := hitsOf(ops[i])
			if ops[i].Release || ops[i].Probe || !res[i].Allowed {
				hits = 0 // consumed nothing
			}
			args[2+j] = opArg(&ops[i], g.kidx[j], g.lidx[j], true, hits)
		}
		cmds = append(cmds, c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(g.keys))).Key(g.keys...).Arg(args...).Build())
	}
	if len(cmds) == 0 {
		return
	}
	s.undos.Add(uint64(len(cmds)))
	s.trips.Add(uint64(len(cmds)))
	ctx, span := s.start(ctx, "redis EVALSHA undo", attrEvalsha, keyUndo.Bool(true), keyGroups.Int(len(cmds)))
	var err error
	for _, r := range c.DoMulti(ctx, cmds...) {
		err = cmp.Or(err, r.Error())
	}
	end(span, err)
}
