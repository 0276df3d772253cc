package hotparam

import (
	"testing"
	"time"
)

// TestReloadToOneRuleAResource: when the new set has one rule a resource (the fast path of the
// match) and the old one had several on a resource, the new rule takes the state of the first
// old rule of its identity, not of the first old rule of its resource.
func TestReloadToOneRuleAResource(t *testing.T) {
	other := qps(5, time.Second)
	other.Param = "q" // same resource, another identity
	shadow := qps(5, time.Second)
	shadow.Shadow = true // same identity as qps(5, 1s): the second of it
	l := mustNew(t, other, qps(5, time.Second), shadow)
	check(l, t0, one("v", 1))
	elsewhere := qps(5, time.Second)
	elsewhere.Resource = "s"
	l2, err := l.Reload([]Rule{elsewhere, qps(7, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.compiled[1].store != l.compiled[1].store {
		t.Fatal("the rule did not take the state of the first old rule of its identity")
	}
	if l2.compiled[0].store == l.compiled[0].store || l2.compiled[0].store == l.compiled[1].store ||
		l2.compiled[0].store == l.compiled[2].store {
		t.Fatal("a rule of a new resource took an old state")
	}
	if st := l2.Stats(); st[1].Tracked != 1 || st[0].Tracked != 0 {
		t.Fatalf("tracked %+v, want the value kept by the second rule only", st)
	}
}

// TestRuleIDFormat: the id a cluster rule's state is keyed by in the shared store keeps its
// layout (quoted resource and param, grade, behavior, duration in ns, nth), so a reload or an
// upgrade finds the state already there.
func TestRuleIDFormat(t *testing.T) {
	r := Rule{Resource: `GET:/a"b`, Param: "p|q", Grade: Concurrency, Behavior: Throttle, Duration: 1500 * time.Millisecond}
	want := `"GET:/a\"b"|"p|q"|1|1|1500000000|3`
	if got := ruleID(r, 3); got != want {
		t.Fatalf("ruleID = %s, want %s", got, want)
	}
}
