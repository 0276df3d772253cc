package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// pstep is one call of a single op at an instant: a probe unless real, a release when rel.
type pstep struct {
	at    time.Duration
	hits  int64
	real  bool
	rel   bool
	lease string
	want  hotparam.RemoteResult
}

func runProbeSteps(t *testing.T, s *Store, clk *fakeClock, op hotparam.RemoteOp, steps []pstep) {
	t.Helper()
	for i, st := range steps {
		clk.set(st.at)
		o := op
		o.Hits, o.Probe, o.Release, o.LeaseID = st.hits, !st.real && !st.rel, st.rel, st.lease
		got := eval(t, s, o)[0]
		got.Turn = hotparam.Turn{} // where a turn ends: see unhold_test.go
		if got != st.want {
			t.Errorf("step %d (t0+%v hits %d probe %v release %v): got %+v, want %+v",
				i, st.at, st.hits, o.Probe, st.rel, got, st.want)
		}
	}
}

// A bucket probe passes iff the tokens are there and takes none: the real calls after it get
// what they would get without it.
func TestProbeBucket(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "pb", Value: "a", Count: 5, Burst: 2, Duration: time.Second}
	runProbeSteps(t, s, clk, op, []pstep{
		{at: 0, hits: 7, want: ok(7, 0, 0, 0)},
		{at: 0, hits: 8, want: no(7, 0, time.Second)}, // over the capacity: never
		{at: 0, hits: 5, real: true, want: ok(2, time.Second, 0, 0)},
		{at: 0, hits: 2, want: ok(2, time.Second, 0, 0)},
		{at: 0, hits: 3, want: no(2, time.Second, 200*ms)},
		{at: 0, hits: 2, real: true, want: ok(0, 1400*ms, 0, 0)},
		{at: 0, hits: 1, want: no(0, 1400*ms, 200*ms)},
		{at: 100 * ms, hits: 1, want: no(0, 1300*ms, 100*ms)},
		{at: 200 * ms, hits: 1, want: ok(1, 1200*ms, 0, 0)},
		{at: 200 * ms, hits: 1, real: true, want: ok(0, 1400*ms, 0, 0)},
	})
	// a probe of a value never seen writes nothing
	fresh := op
	fresh.Value, fresh.Hits, fresh.Probe = "fresh", 1, true
	eval(t, s, fresh)
	if got := srv.CLI("EXISTS", key(DefaultPrefix, &fresh)); got != "0" {
		t.Errorf("a probe created its value's state: EXISTS got %s, want 0", got)
	}
}

// A throttle probe passes only when the next slot is free now (it would not wait), reserves
// nothing, and reports the slots left within the max wait.
func TestProbeThrottle(t *testing.T) {
	s, _, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "pt", Value: "v", Behavior: hotparam.Throttle, Count: 5,
		Duration: time.Second, MaxWait: 500 * ms}
	wait := func(rem int64, reset, retry time.Duration) hotparam.RemoteResult {
		return hotparam.RemoteResult{Remaining: rem, ResetAfter: reset, RetryAfter: retry}
	}
	runProbeSteps(t, s, clk, op, []pstep{
		{at: 0, hits: 1, want: ok(3, 0, 0, 0)},
		{at: 0, hits: 1, real: true, want: waited(2, 200*ms, 0)},
		{at: 0, hits: 1, want: wait(2, 200*ms, 200*ms)}, // a real call would wait 200ms: refused
		{at: 0, hits: 1, real: true, want: waited(1, 400*ms, 200*ms)},
		{at: 200 * ms, hits: 1, want: wait(2, 200*ms, 200*ms)},
		{at: 400 * ms, hits: 3, want: ok(3, 0, 0, 0)}, // free now, whatever the hits
		{at: 400 * ms, hits: 1, real: true, want: waited(2, 200*ms, 0)},
	})
	// a probe refused with no wait allowed is kept as such in the cache: it answers the next
	// probe, and never refuses a request that may wait
	noWait := op
	noWait.MaxWait = 0
	runProbeSteps(t, s, clk, noWait, []pstep{
		{at: 400 * ms, hits: 1, want: wait(0, 200*ms, 200*ms)},
	})
	hits := s.Stats().CacheHits
	runProbeSteps(t, s, clk, noWait, []pstep{
		{at: 500 * ms, hits: 1, want: wait(0, 100*ms, 100*ms)},
	})
	if got := s.Stats().CacheHits - hits; got != 1 {
		t.Errorf("cache hits for a probe refused again: got %d, want 1", got)
	}
	runProbeSteps(t, s, clk, op, []pstep{
		{at: 500 * ms, hits: 1, real: true, want: waited(2, 300*ms, 100*ms)},
	})
}

// A concurrency probe passes iff the slots are free and holds none.
func TestProbeConcurrency(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "pc", Value: "v", Grade: hotparam.Concurrency, Count: 2, Lease: 10 * time.Second}
	sec := time.Second
	runProbeSteps(t, s, clk, op, []pstep{
		{at: 0, hits: 2, want: ok(2, 0, 0, 0)},
		{at: 0, hits: 3, want: no(2, 0, 10*sec)}, // nothing in flight to wait for: a lease
		{at: 0, hits: 1, lease: "a", real: true, want: ok(1, 0, 0, 0)},
		{at: sec, hits: 1, lease: "p", want: ok(1, 0, 0, 0)},
		{at: sec, hits: 2, want: no(1, 0, 9*sec)},
		{at: sec, hits: 1, lease: "b", real: true, want: ok(0, 0, 0, 0)},
		{at: 2 * sec, hits: 1, want: no(0, 0, 8*sec)},
		{at: 2 * sec, hits: 1, lease: "p", rel: true, want: ok(0, 0, 0, 0)}, // the probe's id holds nothing
		{at: 2 * sec, hits: 1, lease: "a", rel: true, want: ok(1, 0, 0, 0)},
		{at: 2 * sec, hits: 1, want: ok(1, 0, 0, 0)},
		{at: 2 * sec, hits: 1, lease: "c", real: true, want: ok(0, 0, 0, 0)},
	})
	if got := srv.CLI("ZCARD", key(DefaultPrefix, &op)); got != "2" {
		t.Errorf("leases held: ZCARD got %s, want 2 (b and c)", got)
	}
}

// A probe of a Refund rule records nothing: a release of its lease id gives nothing back.
func TestProbeRefund(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "pr", Value: "v", Count: 3, Duration: 3 * time.Second, Refund: true,
		Lease: time.Minute}
	runProbeSteps(t, s, clk, op, []pstep{
		{at: 0, hits: 2, real: true, lease: "a", want: ok(1, 2*time.Second, 0, 0)},
		{at: 0, hits: 1, lease: "p", want: ok(1, 2*time.Second, 0, 0)},
		{at: 0, hits: 1, lease: "p", rel: true, want: ok(1, 2*time.Second, 0, 0)},
		{at: 0, hits: 2, lease: "a", rel: true, want: ok(3, 0, 0, 0)},
	})
	rec := op
	rec.LeaseID = "p"
	if got := srv.CLI("EXISTS", refundKey(DefaultPrefix, &rec)); got != "0" {
		t.Errorf("a probe left a refund record: EXISTS got %s, want 0", got)
	}
}

// Probes coalesced with real calls of the same key are answered on the state the calls before
// them left, and take nothing from the calls after them.
func TestProbeInBatch(t *testing.T) {
	s, _, clk := newTestStore(t)
	clk.set(0)
	c := s.client.Load().c
	rule := hotparam.RemoteOp{RuleID: "pbt", Value: "v", Count: 3, Duration: time.Hour, Hits: 1}
	probes := []bool{true, false, true, true, false, false, true, false, true}
	want := []bool{true, true, true, true, true, true, false, false, false}
	k := key(DefaultPrefix, &rule)
	args := []string{s.now(), "*"}
	for _, pr := range probes {
		o := rule
		o.Probe = pr
		args = append(args, opArg(&o, 1, 0, false, 1))
	}
	g := []group{{keys: []string{k}, args: args}}
	if err := s.exec(context.Background(), c, g); err != nil {
		t.Fatal(err)
	}
	for i, pr := range probes {
		if got := g[0].out[6*i+1] == 1; got != want[i] {
			t.Errorf("batch call %d (probe %v): allowed %v, want %v", i, pr, got, want[i])
		}
	}
}

// In cluster mode a probe's group is not given back anything when another group blocks, and a
// refused probe blocks the other groups, which give back what they took.
func TestProbeCrossSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := New(Config{Addrs: cl.Addrs(), Mode: ModeCluster, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clk := &fakeClock{now: t0}
	s.clock = func() time.Time { return clk.now }
	a, b := qps("px", "u1", 3), qps("px", "u4", 1)
	a.Duration, b.Duration = time.Hour, time.Hour
	if slot(key(DefaultPrefix, &a)) == slot(key(DefaultPrefix, &b)) {
		t.Fatal("test values share a slot")
	}
	eval(t, s, a) // a: 2 left
	eval(t, s, b) // b: empty
	pa := a
	pa.Probe = true
	if res := eval(t, s, pa, b); res[0].Allowed != true || res[1].Allowed {
		t.Fatalf("probe of a with b empty: got %+v, want a allowed, b refused", res)
	}
	pa.Hits = 3
	if got := eval(t, s, pa)[0]; got.Allowed || got.Remaining != 2 {
		t.Errorf("a after the undo of a call whose probe it had: got %+v, want refused with 2 left", got)
	}
	// a refused probe (b empty) blocks a real op of a: a keeps its 2 tokens
	pb := b
	pb.Probe = true
	if res := eval(t, s, a, pb); res[1].Allowed {
		t.Fatalf("probe of empty b: got %+v, want refused", res[1])
	}
	pa.Hits = 2
	if got := eval(t, s, pa)[0]; !got.Allowed || got.Remaining != 2 {
		t.Errorf("a after a call blocked by a probe: got %+v, want 2 left", got)
	}
}

// Random sequences of probes, acquisitions and releases give the same decisions and statuses
// in memory and in Redis.
func TestProbeParityRandom(t *testing.T) {
	s, _, clk := newTestStore(t)
	local, err := hotparam.New(parityRules(), hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	remote, err := hotparam.New(parityRules(), hotparam.Options{Remote: s, Fallback: hotparam.FallbackDeny})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 11))
	params := map[string]string{"bucket": "item", "throttle": "item", "conc": "user", "refund": "key"}
	resources := []string{"bucket", "throttle", "conc", "refund"}
	at := time.Duration(0)
	probes := map[bool]int{}
	for i := range 600 {
		at += time.Duration(rng.Int64N(150)) * ms // whole ms: the store counts in microseconds
		now := t0.Add(at)
		clk.now = now
		r := resources[rng.IntN(len(resources))]
		c := call{at: at, resource: r, params: p(params[r], "r"+strconv.Itoa(rng.IntN(2))), hits: 1 + rng.Int64N(3),
			lease: "l" + strconv.Itoa(i)}
		probe := rng.IntN(5) < 2
		c.release = !probe && (r == "conc" || r == "refund") && rng.IntN(3) == 0
		if c.release {
			// a release names a recent call's lease (as Envoy's stream-done release names its
			// request's): acquired, refused, a probe's, or of another value
			c.lease = "l" + strconv.Itoa(max(i-rng.IntN(8), 0))
		}
		e := entryOf(c)
		e[0].Probe = probe
		wantSt, gotSt := make([]hotparam.Status, 1), make([]hotparam.Status, 1)
		want := local.Check(ctx, now, e, hotparam.CheckOptions{}, wantSt)
		got := remote.Check(ctx, now, e, hotparam.CheckOptions{}, gotSt)
		if !sameDecision(got, want) || gotSt[0] != wantSt[0] {
			t.Fatalf("call %d %+v probe %v: Redis %+v %+v, local %+v %+v", i, c, probe, got, gotSt[0], want, wantSt[0])
		}
		if probe {
			probes[want.Allowed]++
		}
	}
	if probes[true] == 0 || probes[false] == 0 {
		t.Errorf("probes allowed/refused %d/%d: the sequence does not exercise both outcomes", probes[true], probes[false])
	}
}
