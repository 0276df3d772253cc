package hotparam

import (
	"strconv"
	"testing"
	"time"
)

func refundRule(count int64, d time.Duration) Rule {
	r := qps(count, d)
	r.Refund = true
	return r
}

func withLease(v string, hits int64, id string, release bool) Entry {
	e := one(v, hits)
	e.LeaseID, e.Release = id, release
	return e
}

// TestRefundOnlyForWhatWasTaken is issue 8's first case: a release (Envoy sends one for every
// request, refused ones included) gives back only what its own acquire consumed.
func TestRefundOnlyForWhatWasTaken(t *testing.T) {
	l := mustNew(t, refundRule(3, time.Hour))
	for i := range 3 {
		if d, _ := check(l, t0, withLease("v", 1, "ok"+strconv.Itoa(i), false)); !d.Allowed {
			t.Fatalf("acquire %d within the allowance refused", i)
		}
	}
	for i := range 20 {
		id := "over" + strconv.Itoa(i)
		if d, _ := check(l, t0, withLease("v", 1, id, false)); d.Allowed {
			t.Fatalf("over-limit request %d admitted: a refused request's release refunded", i)
		}
		if d, _ := check(l, t0, withLease("v", 1, id, true)); !d.Allowed {
			t.Fatal("a release was refused")
		}
	}
	check(l, t0, withLease("v", 5, "", true)) // no lease id: nothing to give back
	if d, _ := check(l, t0, withLease("v", 1, "x", false)); d.Allowed {
		t.Fatal("a release without a lease id refunded")
	}
	check(l, t0, withLease("v", 1, "ok1", true))
	check(l, t0, withLease("v", 1, "ok1", true)) // the same lease twice: once only
	if d, _ := check(l, t0, withLease("v", 1, "y", false)); !d.Allowed {
		t.Fatal("a lease's own release gave nothing back")
	}
	if d, _ := check(l, t0, withLease("v", 1, "z", false)); d.Allowed {
		t.Fatal("a lease released twice was refunded twice")
	}
}

func TestRefundAtMostTheLeaseHits(t *testing.T) {
	l := mustNew(t, refundRule(10, time.Hour))
	check(l, t0, withLease("v", 2, "a", false))
	check(l, t0, withLease("v", 8, "b", false))
	_, st := check(l, t0, withLease("v", 5, "a", true))
	if st[0].Remaining != 2 {
		t.Fatalf("a release of 5 for a lease of 2 left %d tokens, want 2", st[0].Remaining)
	}
	_, st = check(l, t0, withLease("v", 3, "b", true))
	_, st2 := check(l, t0, withLease("v", 9, "b", true))
	if st[0].Remaining != 5 || st2[0].Remaining != 10 {
		t.Fatalf("partial releases of b left %d then %d, want 5 then 10", st[0].Remaining, st2[0].Remaining)
	}
}

func TestRefundRecordExpires(t *testing.T) {
	r := refundRule(1, time.Hour)
	r.Lease = 10 * time.Second
	l := mustNew(t, r)
	check(l, t0, withLease("v", 1, "a", false))
	check(l, at(11*time.Second), withLease("v", 1, "a", true))
	if d, _ := check(l, at(11*time.Second), withLease("v", 1, "b", false)); d.Allowed {
		t.Fatal("a release after the lease ended refunded")
	}
	check(l, at(12*time.Second), withLease("v", 1, "c", false))
}

// TestRefundRecordUndoneWithTheCall: an acquire undone because another rule blocked the call
// keeps no record, so its release gives nothing back.
func TestRefundRecordUndoneWithTheCall(t *testing.T) {
	never := Rule{Resource: "r", Param: "q", Count: 0, Duration: time.Second}
	l := mustNew(t, refundRule(2, time.Hour), never)
	both := func(id string, release bool) Entry {
		return Entry{Resource: "r", LeaseID: id, Release: release,
			Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"w"}}}}
	}
	if d, _ := check(l, t0, both("a", false)); d.Allowed || d.Block.Rule != 1 {
		t.Fatalf("call blocked by rule 1 expected, got %+v", d)
	}
	if d, _ := check(l, t0, withLease("v", 1, "n0", false)); !d.Allowed {
		t.Fatal("the undone acquire kept its token")
	}
	check(l, t0, both("a", true)) // 1 token left: a's release must not make it 2
	for i, want := range []bool{true, false} {
		if d, _ := check(l, t0, withLease("v", 1, "n"+strconv.Itoa(i+1), false)); d.Allowed != want {
			t.Fatalf("acquire %d: allowed %v, want %v (an undone acquire was refunded)", i+1, d.Allowed, want)
		}
	}
}

func TestRefundRecordsBounded(t *testing.T) {
	l := mustNew(t, refundRule(1000, time.Hour))
	for i := range maxRecords + 1 {
		check(l, t0, withLease("v", 1, "l"+strconv.Itoa(i), false))
	}
	_, st := check(l, t0, withLease("v", 1, "l0", true))
	if st[0].Remaining != 1000-maxRecords-1 {
		t.Fatalf("the oldest record beyond the bound refunded: %d left", st[0].Remaining)
	}
	_, st = check(l, t0, withLease("v", 1, "l"+strconv.Itoa(maxRecords), true))
	if st[0].Remaining != 1000-maxRecords {
		t.Fatalf("the newest record did not refund: %d left", st[0].Remaining)
	}
	sh := &l.compiled[0].store.current()[0]
	for _, ls := range sh.leases {
		if len(ls) > maxRecords {
			t.Fatalf("%d records kept, want at most %d", len(ls), maxRecords)
		}
	}
}

// TestRefundRecordRevertedWhenTheRemoteBlocks: a local refund rule's acquire, committed before
// the Remote blocked the call, is given back with its record: the release that follows gives
// nothing more. The Remote is passed the lease id of a cluster refund rule.
func TestRefundRecordRevertedWhenTheRemoteBlocks(t *testing.T) {
	local := refundRule(2, time.Hour)
	cluster := Rule{Resource: "r", Param: "q", Count: 5, Duration: time.Second, Refund: true, Cluster: true}
	f := &fakeRemote{eval: blockValue("w")}
	l, err := New([]Rule{local, cluster}, Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	call := func(id string, release bool) Decision {
		e := Entry{Resource: "r", LeaseID: id, Release: release,
			Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"w"}}}}
		d, _ := check(l, t0, e)
		return d
	}
	if d := call("a", false); d.Allowed || d.Block.Rule != 1 {
		t.Fatalf("the Remote's block: %+v", d)
	}
	if len(f.calls) != 1 || len(f.calls[0]) != 1 || f.calls[0][0].LeaseID != "a" {
		t.Fatalf("remote calls %+v, want one op with the lease id of the cluster refund rule", f.calls)
	}
	if d, _ := check(l, t0, withLease("v", 1, "n0", false)); !d.Allowed {
		t.Fatal("the reverted acquire kept its token")
	}
	call("a", true) // 1 token left: a's release must not make it 2
	for i, want := range []bool{true, false} {
		if d, _ := check(l, t0, withLease("v", 1, "n"+strconv.Itoa(i+1), false)); d.Allowed != want {
			t.Fatalf("acquire %d: %v, want %v (a reverted acquire was refunded)", i+1, d.Allowed, want)
		}
	}
}

// TestRefundOnLocalFallback: a cluster refund rule falling back to local state records and
// refunds by lease id there.
func TestRefundOnLocalFallback(t *testing.T) {
	r := refundRule(1, time.Hour)
	r.Cluster = true
	l, err := New([]Rule{r}, Options{Remote: &fakeRemote{eval: failing}, Fallback: FallbackLocal})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := check(l, t0, withLease("v", 1, "a", false)); !d.Allowed {
		t.Fatal("first acquire refused")
	}
	check(l, t0, withLease("v", 1, "b", true)) // not b's token: nothing back
	if d, _ := check(l, t0, withLease("v", 1, "c", false)); d.Allowed {
		t.Fatal("another lease's release refunded")
	}
	check(l, t0, withLease("v", 1, "a", true))
	if d, _ := check(l, t0, withLease("v", 1, "d", false)); !d.Allowed {
		t.Fatal("a's release gave nothing back")
	}
}
