package hotparam

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// sortLockOrder orders ops exactly as a stable sort by byLockOrder does, for sizes on both
// sides of lockOrderSmall, with and without ties.
func TestSortLockOrderMatchesStableSort(t *testing.T) {
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
				slices.SortStableFunc(want, byLockOrder)
				sortLockOrder(ops)
				for i := range ops {
					if ops[i].seq != want[i].seq {
						t.Fatalf("n=%d shards=%d: position %d holds op %d, want %d", n, shards, i, ops[i].seq, want[i].seq)
					}
				}
			}
		}
	}
}
