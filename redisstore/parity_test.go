package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// The same rules and the same calls at the same instants, through two Limiters: one keeps the
// rules' state in memory, the other in Redis. Every decision and status must be the same.

// parityRules covers each kind of rule: bucket with burst and an exception, throttle,
// concurrency, refund, two rules of one resource (all or nothing), shadow.
func parityRules() []hotparam.Rule {
	return []hotparam.Rule{
		{Resource: "bucket", Param: "item", Count: 5, Burst: 2, Duration: time.Second,
			Items: map[string]int64{"vip": 10}, Cluster: true},
		{Resource: "throttle", Param: "item", Behavior: hotparam.Throttle, Count: 10, Duration: time.Second,
			MaxQueueingTime: 250 * time.Millisecond, Cluster: true},
		{Resource: "conc", Param: "user", Grade: hotparam.Concurrency, Count: 2, Lease: 10 * time.Second, Cluster: true},
		{Resource: "refund", Param: "key", Count: 3, Duration: 3 * time.Second, Refund: true, Cluster: true},
		{Resource: "both", Param: "a", Count: 2, Duration: time.Second, Cluster: true},
		{Resource: "both", Param: "b", Count: 1, Duration: 2 * time.Second, Cluster: true},
		{Resource: "shadow", Param: "item", Count: 1, Duration: time.Hour, Shadow: true, Cluster: true},
		{Resource: "shadow", Param: "user", Count: 3, Duration: time.Hour, Cluster: true},
	}
}

// call is one Check of one entry at t0+at.
type call struct {
	at       time.Duration
	resource string
	params   map[string][]string
	hits     int64
	release  bool
	lease    string // Entry.LeaseID
}

func p(kv ...string) map[string][]string {
	m := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = append(m[kv[i]], kv[i+1])
	}
	return m
}

var parityCalls = []call{
	// bucket: capacity 7, 5 a second (one token every 200ms); vip: capacity 12
	{0, "bucket", p("item", "x"), 3, false, ""},
	{0, "bucket", p("item", "x"), 4, false, ""},
	{0, "bucket", p("item", "x"), 1, false, ""},
	{100 * ms, "bucket", p("item", "x"), 1, false, ""},
	{200 * ms, "bucket", p("item", "x"), 1, false, ""},
	{200 * ms, "bucket", p("item", "x"), 8, false, ""}, // over the capacity: never
	{1500 * ms, "bucket", p("item", "x"), 7, false, ""},
	{1500 * ms, "bucket", p("item", "vip"), 12, false, ""},
	{1500 * ms, "bucket", p("item", "vip"), 1, false, ""},
	{1500 * ms, "bucket", p("item", "x", "item", "y"), 1, false, ""}, // x is empty: y is not charged
	{1500 * ms, "bucket", p("item", "y"), 7, false, ""},
	{1500 * ms, "bucket", p("item", "y"), 1, true, ""}, // release on a rule without refund: ignored
	{1500 * ms, "bucket", p("item", "y"), 1, false, ""},
	// throttle: 100ms apart, at most 250ms of wait
	{0, "throttle", p("item", "x"), 1, false, ""},
	{0, "throttle", p("item", "x"), 1, false, ""},
	{0, "throttle", p("item", "x"), 1, false, ""},
	{0, "throttle", p("item", "x"), 1, false, ""},
	{50 * ms, "throttle", p("item", "x"), 1, false, ""},
	{50 * ms, "throttle", p("item", "x"), 2, false, ""},
	{400 * ms, "throttle", p("item", "x"), 2, false, ""},
	{2 * time.Second, "throttle", p("item", "x"), 1, false, ""}, // idle time earns no credit
	{2 * time.Second, "throttle", p("item", "x"), 3, false, ""},
	// concurrency: 2 in flight, leases of 10s, releases free the newest
	{0, "conc", p("user", "u"), 1, false, ""},
	{time.Second, "conc", p("user", "u"), 1, false, ""},
	{2 * time.Second, "conc", p("user", "u"), 1, false, ""},
	{3 * time.Second, "conc", p("user", "u"), 1, true, ""},
	{4 * time.Second, "conc", p("user", "u"), 1, false, ""},
	{5 * time.Second, "conc", p("user", "u"), 1, false, ""},
	{10 * time.Second, "conc", p("user", "u"), 1, false, ""}, // the lease of 0s expired
	{10 * time.Second, "conc", p("user", "u"), 3, true, ""},  // never below zero
	{10 * time.Second, "conc", p("user", "u"), 2, false, ""},
	{10 * time.Second, "conc", p("user", "u"), 3, false, ""}, // more than the limit
	// concurrency with lease ids: a release frees its own lease, or nothing
	{20 * time.Second, "conc", p("user", "w"), 1, false, "a"},
	{21 * time.Second, "conc", p("user", "w"), 1, false, "b"},
	{22 * time.Second, "conc", p("user", "w"), 1, false, "c"},
	{22 * time.Second, "conc", p("user", "w"), 1, true, "c"}, // c was refused: nothing freed
	{22 * time.Second, "conc", p("user", "w"), 1, false, "d"},
	{23 * time.Second, "conc", p("user", "w"), 1, true, "a"},
	{23 * time.Second, "conc", p("user", "w"), 1, true, "a"},
	{24 * time.Second, "conc", p("user", "w"), 1, false, ""},
	{31 * time.Second, "conc", p("user", "w"), 1, false, "e"}, // b (ends 31s) expired, not a
	{31 * time.Second, "conc", p("user", "w"), 1, false, "f"},
	// concurrency: a release without a lease id frees only a slot acquired without one
	{40 * time.Second, "conc", p("user", "z"), 1, false, "a"},
	{40 * time.Second, "conc", p("user", "z"), 1, false, "b"},
	{40 * time.Second, "conc", p("user", "z"), 1, true, ""}, // a and b hold both: nothing freed
	{40 * time.Second, "conc", p("user", "z"), 1, true, ""},
	{40 * time.Second, "conc", p("user", "z"), 3, true, ""},
	{40 * time.Second, "conc", p("user", "z"), 1, false, "c"}, // refused
	{41 * time.Second, "conc", p("user", "z"), 1, true, "a"},
	{41 * time.Second, "conc", p("user", "z"), 1, false, ""},  // acquired bare
	{41 * time.Second, "conc", p("user", "z"), 1, false, "d"}, // refused
	{41 * time.Second, "conc", p("user", "z"), 1, true, ""},   // frees the bare slot
	{41 * time.Second, "conc", p("user", "z"), 1, false, "d"},
	// concurrency: two acquisitions under one lease id are both that id's
	{50 * time.Second, "conc", p("user", "q"), 1, false, "s"},
	{50 * time.Second, "conc", p("user", "q"), 1, false, "s"},
	{50 * time.Second, "conc", p("user", "q"), 1, false, "t"}, // refused
	{51 * time.Second, "conc", p("user", "q"), 1, true, ""},   // s holds both: nothing freed
	{51 * time.Second, "conc", p("user", "q"), 1, false, "t"}, // refused
	{51 * time.Second, "conc", p("user", "q"), 1, true, "s"},
	{51 * time.Second, "conc", p("user", "q"), 1, false, "t"},
	{52 * time.Second, "conc", p("user", "q"), 1, true, "s"}, // s's second slot
	{52 * time.Second, "conc", p("user", "q"), 1, false, "u"},
	{52 * time.Second, "conc", p("user", "q"), 1, false, "v"}, // t and u hold both: refused
	// refund: 3 per 3s, negative hits give tokens back
	{0, "refund", p("key", "k"), 3, false, ""},
	{0, "refund", p("key", "k"), 1, false, ""},
	{500 * ms, "refund", p("key", "k"), 2, true, ""},
	{500 * ms, "refund", p("key", "k"), 2, false, ""},
	{500 * ms, "refund", p("key", "k"), 1, false, ""},
	{500 * ms, "refund", p("key", "k"), 9, true, ""}, // never above the capacity
	{500 * ms, "refund", p("key", "k"), 3, false, ""},
	// refund with lease ids: back only what the same lease consumed, once
	{10 * time.Second, "refund", p("key", "m"), 3, false, "a"},
	{10 * time.Second, "refund", p("key", "m"), 1, false, "b"},
	{10 * time.Second, "refund", p("key", "m"), 1, true, "b"}, // b was refused: nothing back
	{10 * time.Second, "refund", p("key", "m"), 1, false, "c"},
	{10 * time.Second, "refund", p("key", "m"), 5, true, "a"}, // 3 back, not 5
	{10 * time.Second, "refund", p("key", "m"), 3, true, "a"}, // never twice
	{10 * time.Second, "refund", p("key", "m"), 3, false, "d"},
	{10 * time.Second, "refund", p("key", "m"), 1, false, "e"},
	{10 * time.Second, "refund", p("key", "m"), 1, true, ""}, // no lease id: nothing back
	{10 * time.Second, "refund", p("key", "m"), 1, false, "f"},
	{10 * time.Second, "refund", p("key", "m"), 1, true, "z"}, // an id that never acquired
	{10 * time.Second, "refund", p("key", "m"), 1, false, "g"},
	// both: a blocked b consumes nothing of a
	{0, "both", p("a", "1", "b", "1"), 1, false, ""},
	{0, "both", p("a", "1", "b", "1"), 1, false, ""},
	{0, "both", p("a", "1", "b", "2"), 1, false, ""},
	{0, "both", p("a", "1", "b", "3"), 1, false, ""},
	{time.Second, "both", p("a", "1", "b", "1"), 1, false, ""},
	{2 * time.Second, "both", p("a", "1", "b", "1"), 1, false, ""},
	// shadow: item's rule never blocks, user's does
	{0, "shadow", p("item", "i", "user", "s"), 1, false, ""},
	{0, "shadow", p("item", "i", "user", "s"), 1, false, ""},
	{0, "shadow", p("item", "i", "user", "s"), 1, false, ""},
	{0, "shadow", p("item", "i", "user", "s"), 1, false, ""},
}

// parityProbes are checks that consume nothing (Entry.Probe, Envoy's per-descriptor
// hits_addend 0) between real calls, on values of their own: each real call after a probe is
// answered as if the probe had not been made.
var parityProbes = []call{
	// bucket: capacity 7, one token every 200ms
	{0, "bucket", p("item", "px"), 7, false, ""},
	{0, "bucket", p("item", "px"), 8, false, ""}, // over the capacity
	{0, "bucket", p("item", "px"), 7, false, "real"},
	{0, "bucket", p("item", "px"), 1, false, ""}, // empty: refused, then from the cache
	{100 * ms, "bucket", p("item", "px"), 1, false, ""},
	{200 * ms, "bucket", p("item", "px"), 1, false, ""},
	{200 * ms, "bucket", p("item", "px"), 1, false, "real"},
	{200 * ms, "bucket", p("item", "px"), 1, false, ""},
	// throttle: 100ms apart, at most 250ms of wait; a probe passes only when it would not wait
	{0, "throttle", p("item", "py"), 1, false, ""},
	{0, "throttle", p("item", "py"), 1, false, "real"},
	{0, "throttle", p("item", "py"), 1, false, ""},
	{0, "throttle", p("item", "py"), 1, false, ""},
	{0, "throttle", p("item", "py"), 1, false, "real"},
	{100 * ms, "throttle", p("item", "py"), 1, false, ""},
	{200 * ms, "throttle", p("item", "py"), 3, false, ""},
	{200 * ms, "throttle", p("item", "py"), 1, false, "real"},
	// concurrency: 2 in flight
	{0, "conc", p("user", "pz"), 2, false, ""},
	{0, "conc", p("user", "pz"), 3, false, ""},
	{0, "conc", p("user", "pz"), 1, false, "real a"},
	{time.Second, "conc", p("user", "pz"), 1, false, ""},
	{time.Second, "conc", p("user", "pz"), 2, false, ""},
	{time.Second, "conc", p("user", "pz"), 1, false, "real b"},
	{2 * time.Second, "conc", p("user", "pz"), 1, false, ""},
	{2 * time.Second, "conc", p("user", "pz"), 1, true, "real a"},
	{2 * time.Second, "conc", p("user", "pz"), 1, false, ""},
	{2 * time.Second, "conc", p("user", "pz"), 1, false, "real c"},
	// refund with lease ids: a probe records nothing a release could give back
	{0, "refund", p("key", "pr"), 3, false, "a"},
	{0, "refund", p("key", "pr"), 3, true, "real a"}, // a took nothing: nothing back
	{0, "refund", p("key", "pr"), 3, false, "real b"},
	{0, "refund", p("key", "pr"), 1, false, "b"},
	{0, "refund", p("key", "pr"), 3, true, "real b"},
	{0, "refund", p("key", "pr"), 3, false, "c"},
	// both: a probe refused by b, then real calls take what is left of a
	{0, "both", p("a", "p1", "b", "p1"), 1, false, ""},
	{0, "both", p("a", "p1", "b", "p1"), 1, false, "real"},
	{0, "both", p("a", "p1", "b", "p1"), 1, false, ""},
	{0, "both", p("a", "p1", "b", "p2"), 1, false, ""},
	{0, "both", p("a", "p1", "b", "p2"), 1, false, "real"},
	{0, "both", p("a", "p1", "b", "p3"), 1, false, ""},
	// shadow: item's rule refuses the probe and blocks nothing
	{0, "shadow", p("item", "pi", "user", "ps"), 1, false, ""},
	{0, "shadow", p("item", "pi", "user", "ps"), 1, false, "real"},
	{0, "shadow", p("item", "pi", "user", "ps"), 1, false, ""},
	{0, "shadow", p("item", "pi", "user", "ps"), 3, false, ""},
}

// probeEntry is the entry of a row of parityProbes: a probe unless its lease starts with "real"
// (the rest of it is the real call's lease id).
func probeEntry(c call) []hotparam.Entry {
	lease, real := strings.CutPrefix(c.lease, "real")
	c.lease = strings.TrimSpace(lease)
	e := entryOf(c)
	e[0].Probe = !real
	return e
}

func entryOf(c call) []hotparam.Entry {
	e := hotparam.Entry{Resource: c.resource, Hits: c.hits, Release: c.release, LeaseID: c.lease}
	for _, name := range []string{"item", "user", "key", "a", "b"} {
		if v, ok := c.params[name]; ok {
			e.Params = append(e.Params, hotparam.Param{Name: name, Values: v})
		}
	}
	return []hotparam.Entry{e}
}

// localRefundsBoundToLeases reports whether the in-memory engine gives back, on a Refund rule's
// release, only what the acquisition of the same lease id consumed (nothing for a refused
// request, nothing without an id), as the store does. An engine that predates this gives back
// every release, so the release rows of Refund rules cannot be compared with it.
func localRefundsBoundToLeases(t *testing.T) bool {
	t.Helper()
	l, err := hotparam.New([]hotparam.Rule{{Resource: "r", Param: "p", Count: 1, Duration: time.Hour, Refund: true}},
		hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := func(lease string, release bool) []hotparam.Entry {
		return []hotparam.Entry{{Resource: "r", Params: []hotparam.Param{{Name: "p", Values: []string{"v"}}},
			Release: release, LeaseID: lease}}
	}
	l.Check(ctx, t0, e("a", false), hotparam.CheckOptions{}, nil)
	l.Check(ctx, t0, e("b", false), hotparam.CheckOptions{}, nil) // refused
	l.Check(ctx, t0, e("b", true), hotparam.CheckOptions{}, nil)
	l.Check(ctx, t0, e("", true), hotparam.CheckOptions{}, nil)
	return !l.Check(ctx, t0, e("c", false), hotparam.CheckOptions{}, nil).Allowed
}

func TestParityWithLocal(t *testing.T) {
	s, _, clk := newTestStore(t)
	bound := localRefundsBoundToLeases(t)
	if !bound {
		t.Log("the in-memory engine gives back every refund: release rows of Refund rules not compared")
	}
	refundRule := map[string]bool{}
	for _, r := range parityRules() {
		if r.Refund {
			refundRule[r.Resource] = true
		}
	}
	local, err := hotparam.New(parityRules(), hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fallbacks int
	remote, err := hotparam.New(parityRules(), hotparam.Options{Remote: s, Fallback: hotparam.FallbackDeny,
		OnFallback: func(error) { fallbacks++ }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allowed := 0
	for i, c := range parityCalls {
		if !bound && c.release && refundRule[c.resource] {
			continue
		}
		now := t0.Add(c.at)
		clk.now = now
		wantSt, gotSt := make([]hotparam.Status, 1), make([]hotparam.Status, 1)
		want := local.Check(ctx, now, entryOf(c), hotparam.CheckOptions{}, wantSt)
		got := remote.Check(ctx, now, entryOf(c), hotparam.CheckOptions{}, gotSt)
		if !sameDecision(got, want) {
			t.Errorf("call %d %+v: Redis decision %+v, local %+v", i, c, got, want)
		}
		if gotSt[0] != wantSt[0] {
			t.Errorf("call %d %+v: Redis status %+v, local %+v", i, c, gotSt[0], wantSt[0])
		}
		if want.Allowed {
			allowed++
		}
	}
	if allowed == 0 || allowed == len(parityCalls) {
		t.Errorf("%d of %d calls allowed: the table does not exercise both outcomes", allowed, len(parityCalls))
	}
	probes := map[bool]int{}
	for i, c := range parityProbes {
		now := t0.Add(c.at)
		clk.now = now
		e := probeEntry(c)
		wantSt, gotSt := make([]hotparam.Status, 1), make([]hotparam.Status, 1)
		want := local.Check(ctx, now, e, hotparam.CheckOptions{}, wantSt)
		got := remote.Check(ctx, now, probeEntry(c), hotparam.CheckOptions{}, gotSt)
		if !sameDecision(got, want) {
			t.Errorf("probe row %d %+v (probe %v): Redis decision %+v, local %+v", i, c, e[0].Probe, got, want)
		}
		if gotSt[0] != wantSt[0] {
			t.Errorf("probe row %d %+v (probe %v): Redis status %+v, local %+v", i, c, e[0].Probe, gotSt[0], wantSt[0])
		}
		if e[0].Probe {
			probes[want.Allowed]++
		}
	}
	if probes[true] == 0 || probes[false] == 0 {
		t.Errorf("probes allowed/refused %d/%d: the table does not exercise both outcomes", probes[true], probes[false])
	}
	if st := s.Stats(); st.CacheHits == 0 {
		t.Error("no call answered from the cache of blocked values: the table does not exercise it")
	}
	if st := s.Stats(); st.Errors != 0 || fallbacks != 0 {
		t.Errorf("Redis errors %d, fallbacks %d (last error %v): want none", st.Errors, fallbacks, st.LastError)
	}
}
