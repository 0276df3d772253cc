package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := New(Config{Addrs: cl.Addrs(), Mode: ModeCluster, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clk := &fakeClock{now: t0} // far in the future: no key expires during the test
	s.clock = func() time.Time { return clk.now }

	t.Run("slots agree with the server", func(t *testing.T) {
		for i := range 20 {
			op := hotparam.RemoteOp{RuleID: "r", Value: fmt.Sprintf("user-%d", i)}
			k := key(DefaultPrefix, &op)
			want, _ := strconv.Atoi(cl.Nodes[0].CLI("CLUSTER", "KEYSLOT", k))
			if got := slot(k); int(got) != want {
				t.Errorf("slot(%q): got %d, want %d (CLUSTER KEYSLOT)", k, got, want)
			}
		}
	})

	t.Run("keys spread over every node", func(t *testing.T) {
		for i := range 30 {
			eval(t, s, qps("spread", fmt.Sprintf("item-%d", i), 10))
		}
		for _, n := range cl.Nodes {
			if got, _ := strconv.Atoi(n.CLI("DBSIZE")); got == 0 {
				t.Errorf("node %s holds no key after 30 values", n.Addr())
			}
		}
	})

	t.Run("one round trip per slot", func(t *testing.T) {
		ops := []hotparam.RemoteOp{qps("a", "u1", 5), qps("b", "u1", 5), qps("a", "u2", 5), conc("c", "u3", 5)}
		slots := map[uint16]bool{}
		for i := range ops {
			slots[slot(key(DefaultPrefix, &ops[i]))] = true
		}
		if len(slots) != 3 {
			t.Fatalf("test values: got %d slots, want 3", len(slots))
		}
		eval(t, s, ops...) // the script is now loaded where these keys live
		before, trips := cl.CommandCalls("evalsha"), s.Stats().RoundTrips
		res := eval(t, s, ops...)
		if got := cl.CommandCalls("evalsha") - before; got != len(slots) {
			t.Errorf("EVALSHA calls on the servers: got %d, want %d (one per slot)", got, len(slots))
		}
		if got := s.Stats().RoundTrips - trips; got != uint64(len(slots)) {
			t.Errorf("script calls sent: got %d, want %d", got, len(slots))
		}
		want := []int64{3, 3, 3, 3} // two of five taken on each
		for i, r := range res {
			if !r.Allowed || r.Remaining != want[i] {
				t.Errorf("op %d: got %+v, want allowed with %d remaining", i, r, want[i])
			}
		}
	})

	t.Run("calls of many values at once: a script call per slot, exact counts", func(t *testing.T) {
		// each goroutine asks for every value under two rules in an order of its own: the
		// calls of one slot go together, those of different slots never share a script call
		const values, clients, count = 24, 8, 3
		var ops []hotparam.RemoteOp
		for i := range values {
			v := fmt.Sprintf("many-%d", i)
			a, b := qps("many-a", v, count), qps("many-b", v, count)
			a.Duration, b.Duration = time.Hour, time.Hour
			ops = append(ops, a, b)
		}
		var mu sync.Mutex
		admitted := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, clients*len(ops))
		for c := range clients {
			wg.Go(func() {
				for j := range ops {
					op := ops[(j*7+c*5)%len(ops)]
					res := make([]hotparam.RemoteResult, 1)
					if err := s.Eval(context.Background(), []hotparam.RemoteOp{op}, res); err != nil {
						errs <- err
						continue
					}
					if res[0].Allowed {
						mu.Lock()
						admitted[op.RuleID+"/"+op.Value]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("a call: %v", err)
		}
		for _, op := range ops {
			if got := admitted[op.RuleID+"/"+op.Value]; got != count {
				t.Errorf("%s of %s: %d admitted of %d calls, want %d", op.RuleID, op.Value, got, clients, count)
			}
		}
	})

	t.Run("a slot that blocks gives back what the others took", func(t *testing.T) {
		x, y := "gx", "gy"
		a, b := qps("undo-a", x, 1), qps("undo-b", y, 0)
		c := conc("undo-c", x, 1)
		if slot(key(DefaultPrefix, &a)) == slot(key(DefaultPrefix, &b)) {
			t.Fatal("test values share a slot")
		}
		undos := s.Stats().Undos
		res := eval(t, s, a, c, b)
		if !res[0].Allowed || !res[1].Allowed || res[2].Allowed {
			t.Fatalf("call: got %+v, want a and c allowed, b blocked", res)
		}
		if got := s.Stats().Undos - undos; got != 1 {
			t.Errorf("compensations: got %d, want 1", got)
		}
		if got := eval(t, s, a, c); !got[0].Allowed || !got[1].Allowed {
			t.Errorf("after the blocked call: got %+v, want the token and the slot back", got)
		}
	})

	t.Run("a slot that blocks: the refund lease of the others records nothing", func(t *testing.T) {
		a := qps("undo-r", "gx", 2)
		a.Refund, a.LeaseID = true, "P"
		eval(t, s, a) // one of two taken, so that a refund shows
		a.LeaseID = "L"
		b := qps("undo-b", "gy", 0)
		if res := eval(t, s, a, b); !res[0].Allowed || res[1].Allowed {
			t.Fatalf("call: got %+v, want a allowed, b blocked", res)
		}
		rel := a
		rel.Release = true
		eval(t, s, rel) // the call was refused: its release gives nothing back
		take := a
		take.LeaseID = "M"
		if got := eval(t, s, take)[0]; !got.Allowed {
			t.Fatalf("after the blocked call: got %+v, want its token back", got)
		}
		if got := eval(t, s, take)[0]; got.Allowed {
			t.Errorf("the release of a blocked call's lease gave a token: got %+v", got)
		}
	})

	t.Run("a node that fails: the others give back", func(t *testing.T) {
		// find two values whose keys live on different nodes
		owner := func(v string) *redistest.Server {
			op := hotparam.RemoteOp{RuleID: "where", Value: v, Count: 10, Duration: time.Hour, Hits: 1}
			eval(t, s, op)
			for _, n := range cl.Nodes {
				if n.CLI("EXISTS", key(DefaultPrefix, &op)) == "1" {
					return n
				}
			}
			t.Fatalf("no node holds the key of %q", v)
			return nil
		}
		x, ox := "fx", owner("fx")
		y, oy := "", (*redistest.Server)(nil)
		for i := 0; oy == nil || oy == ox; i++ {
			y = fmt.Sprintf("fy%d", i)
			oy = owner(y)
		}
		oy.Kill() // the rest of this test runs without that node
		a := hotparam.RemoteOp{RuleID: "fail-a", Value: x, Count: 2, Duration: time.Hour, Hits: 1}
		b := hotparam.RemoteOp{RuleID: "fail-b", Value: y, Count: 2, Duration: time.Hour, Hits: 1}
		undos := s.Stats().Undos
		if err := s.Eval(t.Context(), []hotparam.RemoteOp{a, b}, make([]hotparam.RemoteResult, 2)); err == nil {
			t.Fatal("Eval with a dead node: got nil error")
		}
		if got := s.Stats().Undos - undos; got != 1 {
			t.Errorf("compensations: got %d, want 1", got)
		}
		if got := eval(t, s, a)[0]; got.Remaining != 1 {
			t.Errorf("after the failed call: got %+v, want 1 remaining (the failed call gave its token back)", got)
		}
	})
}
