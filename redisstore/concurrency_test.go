package redisstore

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func TestConcurrency(t *testing.T) {
	s, srv, clk := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "c1", Value: "v", Grade: hotparam.Concurrency, Count: 2, Lease: 10 * time.Second}
	sec := time.Second
	runSteps(t, s, clk, op, []step{
		{0, 1, false, ok(1, 0, 0, 0)},
		{0, 1, false, ok(0, 0, 0, 0)},
		{0, 1, false, no(0, 0, 10*sec)}, // the oldest lease ends in 10s
		{0, 1, true, ok(1, 0, 0, 0)},
		{sec, 1, false, ok(0, 0, 0, 0)},
		{2 * sec, 2, false, no(0, 0, 8*sec)}, // as the local engine: until the first lease ends, at 10s
		{2 * sec, 3, false, no(0, 0, 8*sec)}, // more than the limit: never, told as above
		// at 10s the lease taken at 0 has expired: one slot free without a release
		{10 * sec, 1, false, ok(0, 0, 0, 0)},
		{10 * sec, 5, true, ok(2, 0, 0, 0)}, // never below zero
	})
	k := key(DefaultPrefix, &op)
	if got := srv.CLI("EXISTS", k); got != "0" {
		t.Errorf("a value with nothing in flight is forgotten: EXISTS got %s, want 0", got)
	}
	clk.setReal()
	eval(t, s, op)
	if pttl, _ := strconv.Atoi(srv.CLI("PTTL", k)); pttl <= 9000 || pttl > 10001 {
		t.Errorf("PTTL: got %d, want the lease, 10000ms, or a little less", pttl)
	}
}

// A release with a lease id frees that lease only, and nothing when the id holds none; a release
// without one frees the newest lease acquired without an id (never an id's), so that a lease
// whose release was lost is the oldest and expires first.
func TestConcurrencyLeaseIDs(t *testing.T) {
	s, srv, clk := newTestStore(t)
	base := hotparam.RemoteOp{RuleID: "c2", Value: "v", Grade: hotparam.Concurrency, Count: 2, Lease: 10 * time.Second}
	sec := time.Second
	steps := []struct {
		at   time.Duration
		id   string
		hits int64
		rel  bool
		want hotparam.RemoteResult
	}{
		{0, "a", 1, false, ok(1, 0, 0, 0)},
		{sec, "b", 1, false, ok(0, 0, 0, 0)},        // b ends at 11s
		{2 * sec, "zz", 1, true, ok(0, 0, 0, 0)},    // no lease of that id: nothing freed
		{2 * sec, "a", 1, true, ok(1, 0, 0, 0)},     // a freed, b still ends at 11s
		{2 * sec, "a", 1, true, ok(1, 0, 0, 0)},     // a second release of a: no-op
		{3 * sec, "", 1, false, ok(0, 0, 0, 0)},     // anonymous, ends at 13s
		{4 * sec, "", 1, true, ok(1, 0, 0, 0)},      // the newest (13s) goes: b ends at 11s
		{5 * sec, "b", 1, false, ok(0, 0, 0, 0)},    // b is held: b holds two, both end at 15s
		{6 * sec, "b", 1, true, ok(1, 0, 0, 0)},     // frees one of b's, the other ends at 15s
		{7 * sec, "m", 2, false, no(1, 0, 8*sec)},   // two slots need the 15s lease gone
		{16 * sec, "m", 2, false, ok(0, 0, 0, 0)},   // everything expired: m holds both
		{16 * sec, "m", 1, true, ok(1, 0, 0, 0)},    // one hit of m back
		{16 * sec, "m", 5, true, ok(2, 0, 0, 0)},    // the rest of m: never below zero
		{16 * sec, "m", 1, true, ok(2, 0, 0, 0)},    // nothing left of m
		{17 * sec, "", 1, false, ok(1, 0, 0, 0)},    // anonymous, ends at 27s
		{18 * sec, "", 1, false, ok(0, 0, 0, 0)},    // anonymous, ends at 28s
		{19 * sec, "", 1, true, ok(1, 0, 0, 0)},     // newest (28s) freed
		{27 * sec, "", 1, false, ok(1, 0, 0, 0)},    // the 27s lease expired: one slot held
		{27 * sec, "x", 1, false, ok(0, 0, 0, 0)},   // two held
		{27 * sec, "y", 1, false, no(0, 0, 10*sec)}, // over
		{27 * sec, "y", 1, true, ok(0, 0, 0, 0)},    // y was refused: its release frees nothing
	}
	for i, st := range steps {
		clk.set(st.at)
		o := base
		o.LeaseID, o.Hits, o.Release = st.id, st.hits, st.rel
		if got := eval(t, s, o)[0]; got != st.want {
			t.Errorf("step %d (t0+%v id %q hits %d release %v): got %+v, want %+v", i, st.at, st.id, st.hits, st.rel, got, st.want)
		}
	}
	if got := srv.CLI("ZCARD", key(DefaultPrefix, &base)); got != "2" {
		t.Errorf("leases held at the end: got %s, want 2", got)
	}
}

// A long lease id is stored hashed, and still names its lease.
func TestConcurrencyLongLeaseID(t *testing.T) {
	s, srv, _ := newTestStore(t)
	op := hotparam.RemoteOp{RuleID: "c3", Value: "v", Grade: hotparam.Concurrency, Count: 1, Lease: time.Minute,
		LeaseID: strings.Repeat("r", 10000)}
	eval(t, s, op)
	members := srv.CLI("ZRANGE", key(DefaultPrefix, &op), "0", "-1")
	if len(members) > 2*maxLeaseID {
		t.Errorf("member of a long id: got %d bytes, want at most %d", len(members), 2*maxLeaseID)
	}
	rel := op
	rel.Release = true
	if got := eval(t, s, rel)[0]; got.Remaining != 1 {
		t.Errorf("release of the long id: got %+v, want remaining 1", got)
	}
}
