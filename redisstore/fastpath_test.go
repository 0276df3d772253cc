package redisstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// A call of one bucket acquisition takes the script's fast path; the same op beside another
// takes the general path. Random sequences of such ops must get the same answers on both.
func TestFastPathMatchesGeneral(t *testing.T) {
	s, _, clk := newTestStore(t)
	rng := rand.New(rand.NewPCG(8, 11))
	durations := []time.Duration{time.Second, 3 * time.Second, 333 * time.Millisecond, 10 * time.Second}
	for seq := range 20 {
		at := time.Duration(seq) * time.Hour
		rule := hotparam.RemoteOp{RuleID: "fp", Count: 1 + rng.Int64N(10), Burst: rng.Int64N(4),
			Duration: durations[rng.IntN(len(durations))]}
		fast, general := "fast-"+string(rune('a'+seq)), "general-"+string(rune('a'+seq))
		companion := hotparam.RemoteOp{RuleID: "companion", Value: general, Count: 1e9, Duration: time.Second, Hits: 1}
		for step := range 40 {
			at += time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
			clk.now = t0.Add(at)
			op := rule
			op.Hits = 1 + rng.Int64N(op.Count+op.Burst+2)
			op.Shadow = rng.IntN(5) == 0
			if rng.IntN(10) == 0 {
				op.Count = 1 + rng.Int64N(10) // the rule's count changed: the state is converted
				rule.Count = op.Count
			}
			op.Value = fast
			a := eval(t, s, op)[0]
			op.Value = general
			b := eval(t, s, op, companion)[0]
			if a != b {
				t.Fatalf("sequence %d step %d (%+v at t0+%v): fast path %+v, general %+v", seq, step, op, at, a, b)
			}
		}
	}
}
