package hotparam

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestLedgerAgainstMap runs random inserts, takes and deletes on ledgers of odd sizes (the
// positions are scaled, not masked) and checks every entry stays findable, as in a map.
func TestLedgerAgainstMap(t *testing.T) {
	for _, size := range []int{1, 3, 7, 64, 100, 1000} {
		rnd := rand.New(rand.NewPCG(uint64(size), 1))
		x := ledger{tab: make([]ledgerEntry, size)}
		ref := map[uint64]uint64{}
		for step := range 20000 {
			// few distinct keys with clustered homes: long runs and wrap-arounds
			k := ledgerKey(uint64(rnd.IntN(3*size+1)) << 30 * 0x9e3779b97f4a7c15)
			switch {
			case rnd.IntN(2) == 0 && len(ref) < size*7/8:
				if _, ok := ref[k]; !ok {
					x.insert(ledgerEntry{k, uint64(step + 1)})
					ref[k] = uint64(step + 1)
				}
			default:
				if got, want := x.take(k), ref[k]; got != want {
					t.Fatalf("size %d, step %d: take(%x) = %d, want %d", size, step, k, got, want)
				}
				delete(ref, k)
			}
			if x.n != len(ref) {
				t.Fatalf("size %d, step %d: %d entries, want %d", size, step, x.n, len(ref))
			}
		}
		for k, v := range ref {
			if i := x.find(k); i < 0 || x.tab[i].v != v {
				t.Fatalf("size %d: entry %x lost", size, k)
			}
		}
	}
}

// TestDefaultBudgetHoldsTenMinuteFlood: the default budgets hold the states of 10,000 new
// values a second for 10 minutes on one rule (6 million, at the ledger's fullest load of 7/8,
// spread over the shards of a rule of the default capacity with room for their unevenness).
func TestDefaultBudgetHoldsTenMinuteFlood(t *testing.T) {
	const values = 10_000 * 600
	shards := int64(newStore(0, DefaultCapacity, nil).mask + 1)
	perShard := DefaultRuleStateBudget / shards / entryBytes * 7 / 8
	if need := int64(values) / shards * 102 / 100; perShard < need {
		t.Fatalf("a shard holds %d states, want at least %d", perShard, need)
	}
	if DefaultStateBudget < DefaultRuleStateBudget {
		t.Fatalf("the total budget %d is below one rule's %d", DefaultStateBudget, DefaultRuleStateBudget)
	}
}

// floodBudget floods a rule of 3 an hour with values asked once (depleted: each parks a state)
// until it has parked far more than its budget holds, then reports how many new values it
// refused, whether the hot value, emptied first, is admitted after the flood, and whether the
// first flood value (2 tokens left) is admitted 3 times: its state was forgotten.
func floodBudget(t *testing.T, how Overflow, budget int64) (stats RuleStats, refusedNew int, hotAdmitted, firstReset bool, events []OverflowEvent) {
	r := rule3h(100)
	r.StateBudget, r.Overflow = budget, how
	l, err := New([]Rule{r}, Options{OnOverflow: func(e OverflowEvent) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		check(l, t0, one("hot", 1))
	}
	for i := range 20_000 {
		if d, _ := check(l, at(time.Duration(i)*time.Millisecond), one("f"+strconv.Itoa(i), 1)); !d.Allowed {
			refusedNew++
		}
	}
	d, _ := check(l, at(21*time.Second), one("hot", 1))
	st := l.Stats()[0]
	got := 0
	for range 3 {
		if d, _ := check(l, at(21*time.Second), one("f0", 1)); d.Allowed {
			got++
		}
	}
	return st, refusedNew, d.Allowed, got == 3, events
}

func TestOverflowForgetsOrRefuses(t *testing.T) {
	const budget = 64 * entryBytes // 56 states at most
	t.Run("forget", func(t *testing.T) {
		st, refused, hot, reset, events := floodBudget(t, OverflowForget, budget)
		if refused != 0 {
			t.Errorf("%d new values refused, want none", refused)
		}
		if hot {
			t.Error("the emptied hot value was admitted: its state, the one that ends last, was forgotten")
		}
		if !reset {
			t.Error("the first flood value's state survived 20,000 states in a ledger of 56: the test presses nothing")
		}
		if st.StateBytes > budget || st.Parked > 56 || st.Overflows == 0 {
			t.Errorf("stats %+v: want at most %d bytes, 56 states and overflows counted", st, budget)
		}
		if len(events) == 0 || len(events) > 21 || events[0].Overflow != OverflowForget || events[0].Resource != "r" {
			t.Errorf("%d overflow reports over 20s (first %+v), want one a second at most, forget, rule r", len(events), events)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		st, refused, hot, reset, events := floodBudget(t, OverflowRefuse, budget)
		if hot || reset {
			t.Errorf("a state was forgotten (hot value admitted %v, first flood value given 3 %v)", hot, reset)
		}
		// the store holds 100 values and the ledger 56 states; every later new value is refused
		if refused < 20_000-200 || uint64(refused) != st.Overflows {
			t.Errorf("%d new values refused, %d overflows counted; want all but the first ~156, each counted", refused, st.Overflows)
		}
		if st.Tracked > 100 || st.StateBytes > budget {
			t.Errorf("stats %+v: want at most 100 tracked and %d bytes", st, budget)
		}
		if len(events) == 0 || len(events) > 21 || events[0].Overflow != OverflowRefuse {
			t.Errorf("%d overflow reports over 20s (first %+v), want one a second at most, refuse", len(events), events)
		}
	})
	t.Run("total", func(t *testing.T) {
		// two rules under one total budget of one ledger table: the second rule gets none
		r1, r2 := rule3h(10), rule3h(10)
		r2.Param = "q"
		r1.Overflow, r2.Overflow = OverflowRefuse, OverflowRefuse
		l, err := New([]Rule{r1, r2}, Options{StateBudget: minLedger * entryBytes})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			check(l, t0, one("a"+strconv.Itoa(i), 1), Entry{Resource: "r", Params: []Param{{Name: "q", Values: []string{"b" + strconv.Itoa(i)}}}})
		}
		st := l.Stats()
		if used := st[0].StateBytes + st[1].StateBytes; used > minLedger*entryBytes || st[0].Overflows+st[1].Overflows == 0 {
			t.Fatalf("stats %+v: want at most %d bytes in all, and overflows", st, minLedger*entryBytes)
		}
	})
}

// TestSweepGivesLedgerBack: once the flood's states ended, Sweep frees the ledgers and the
// budget they took.
func TestSweepGivesLedgerBack(t *testing.T) {
	r := qps(3, time.Minute)
	r.Capacity = 100
	l := mustNew(t, r)
	for i := range 10_000 {
		check(l, t0, one("f"+strconv.Itoa(i), 1))
	}
	if st := l.Stats()[0]; st.Parked < 9000 || st.StateBytes == 0 || l.budget.used.Load() != st.StateBytes {
		t.Fatalf("stats %+v, budget used %d: want ~9,900 states parked and accounted", st, l.budget.used.Load())
	}
	l.Sweep(at(10 * time.Second)) // nothing ended yet: everything stays
	if st := l.Stats()[0]; st.Parked < 9000 {
		t.Fatalf("stats %+v: Sweep dropped states not ended", st)
	}
	l.Sweep(at(21 * time.Second)) // a token a 20s: every state ended
	if st := l.Stats()[0]; st.Parked != 0 || st.StateBytes != 0 || l.budget.used.Load() != 0 {
		t.Fatalf("stats %+v, budget used %d: want the ledgers freed", st, l.budget.used.Load())
	}
}
