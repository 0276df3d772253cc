package hotparam

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockOrder orders ops exactly as a stable sort by cmpLockOrder does, for sizes on both sides
// of lockOrderSmall, with and without ties, and leaves the ops where they are.
func TestLockOrderMatchesStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stores := []*ruleState{{store: &store{id: 1}}, {store: &store{id: 2}}, {store: &store{id: 3}}}
	for _, n := range []int{0, 1, 2, 3, 10, 33, lockOrderSmall, lockOrderSmall + 1, 100} {
		for _, shards := range []int{2, 8, 1024} {
			for range 50 {
				ops := make([]op, n)
				for i := range ops {
					ops[i].seq = int32(i)
					ops[i].rs = stores[rng.IntN(len(stores))]
					ops[i].shard = int32(rng.IntN(shards))
				}
				want := slices.Clone(ops)
				slices.SortStableFunc(want, func(a, b op) int { return cmpLockOrder(&a, &b) })
				var idx [lockOrderSmall]int32
				order := lockOrder(ops, &idx)
				if len(order) != n {
					t.Fatalf("n=%d: %d positions", n, len(order))
				}
				for k, at := range order {
					if ops[at].seq != want[k].seq {
						t.Fatalf("n=%d shards=%d: place %d takes op %d, want %d", n, shards, k, ops[at].seq, want[k].seq)
					}
				}
				for i := range ops {
					if ops[i].seq != int32(i) {
						t.Fatalf("n=%d: op %d moved to %d", n, ops[i].seq, i)
					}
				}
			}
		}
	}
}

// TestConcurrentCallsOverSharedShards: calls naming several values of two rules, in every
// order, run at once over the same shards. They must all finish (the locks are taken in one
// order whatever the call's own) and lose no update: each value has given up exactly as many
// tokens as calls asked it for.
func TestConcurrentCallsOverSharedShards(t *testing.T) {
	const count = 1 << 40
	rules := []Rule{
		{Resource: "R", Param: "p", Count: count, Duration: time.Second},
		{Resource: "R", Param: "q", Count: count, Duration: time.Second, Capacity: 4096}, // 4 shards
	}
	l, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	values := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	const workers, calls = 8, 400
	var asked [2][12]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range calls {
				// 2 to 12 values of each param, in a random order
				ps, qs := rng.Perm(12)[:2+rng.IntN(11)], rng.Perm(12)[:2+rng.IntN(11)]
				var p, q []string
				for _, i := range ps {
					p = append(p, values[i])
					asked[0][i].Add(1)
				}
				for _, i := range qs {
					q = append(q, values[i])
					asked[1][i].Add(1)
				}
				// two entries: one per param order, so one call takes shards of both rules
				es := []Entry{{Resource: "R", Params: []Param{{Name: "q", Values: q}}}, {Resource: "R", Params: []Param{{Name: "p", Values: p}}}}
				if rng.IntN(2) == 0 {
					es[0], es[1] = es[1], es[0]
				}
				if d := l.Check(context.Background(), now, es, CheckOptions{}, nil); !d.Allowed {
					t.Errorf("refused: %+v", d.Block)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("calls did not finish: a lock order cycle")
	}
	for r, param := range []string{"p", "q"} {
		for i, v := range values {
			st := make([]Status, 1)
			l.Check(context.Background(), now, []Entry{{Resource: "R", Probe: true, Params: []Param{{Name: param, Values: []string{v}}}}}, CheckOptions{}, st)
			if got, want := count-st[0].Remaining, asked[r][i].Load(); got != want {
				t.Errorf("%s=%s: %d tokens taken, %d asked", param, v, got, want)
			}
		}
	}
}
