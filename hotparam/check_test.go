package hotparam

import (
	"context"
	"testing"
	"time"
)

func multi(values ...string) Entry {
	return Entry{Resource: "r", Params: []Param{{Name: "p", Values: values}}}
}

func TestMultiValueParamAllMustPass(t *testing.T) {
	l := mustNew(t, qps(2, time.Second))
	steps := []struct {
		e       Entry
		allowed bool
		value   string // the blocked value
	}{
		{multi("a", "b"), true, ""},
		{multi("b"), true, ""},
		{multi("a", "b", "c"), false, "b"}, // b is spent: a and c consume nothing
		{multi("c", "c"), true, ""},
		{multi("c"), false, "c"},
		{multi("a", "a"), false, "a"}, // a has 1 token: two values of it need 2
		{multi("a"), true, ""},
	}
	for i, s := range steps {
		d, _ := check(l, t0, s.e)
		if d.Allowed != s.allowed || d.Block.Value != s.value {
			t.Fatalf("step %d: allowed %v block %q, want %v %q", i, d.Allowed, d.Block.Value, s.allowed, s.value)
		}
	}
}

func TestRuleWithAbsentParamDoesNotApply(t *testing.T) {
	l := mustNew(t, qps(0, time.Second))
	for _, e := range []Entry{
		{Resource: "r"},
		{Resource: "r", Params: []Param{{Name: "other", Values: []string{"x"}}}},
		{Resource: "r", Params: []Param{{Name: "p"}}},
		{Resource: "elsewhere", Params: []Param{{Name: "p", Values: []string{"x"}}}},
	} {
		d, st := check(l, t0, e)
		if !d.Allowed || st[0].Rule != -1 {
			t.Errorf("%+v: allowed %v status rule %d, want allowed and -1", e, d.Allowed, st[0].Rule)
		}
	}
}

func TestLaterRuleBlockingLeaksNoTokens(t *testing.T) {
	// Two rules of one resource: item ids at 5 per second, users at 1 per second. The second
	// request of user u is blocked by the user rule; it must not spend an item token.
	items := Rule{Resource: "r", Param: "item", Count: 5, Duration: time.Second}
	users := Rule{Resource: "r", Param: "user", Count: 1, Duration: time.Second}
	l := mustNew(t, items, users)
	req := func(user string) Entry {
		return Entry{Resource: "r", Params: []Param{{Name: "item", Values: []string{"i"}}, {Name: "user", Values: []string{user}}}}
	}
	if d, _ := check(l, t0, req("u")); !d.Allowed {
		t.Fatal("first request blocked")
	}
	for range 10 {
		d, _ := check(l, t0, req("u"))
		if d.Allowed || d.Block.Rule != 1 || d.Block.Param != "user" || d.Block.Reason != ReasonQPS {
			t.Fatalf("repeat of u: %+v, want blocked by rule 1", d)
		}
	}
	for _, u := range []string{"v", "w", "x", "y"} {
		d, st := check(l, t0, req(u))
		if !d.Allowed {
			t.Fatalf("user %s blocked: item tokens leaked to blocked requests (%+v)", u, d.Block)
		}
		// the user rule has 0 left; so has the item rule at the last user: a tie goes to the
		// first rule.
		wantRule := 1
		if u == "y" {
			wantRule = 0
		}
		if st[0].Rule != wantRule || st[0].Remaining != 0 {
			t.Fatalf("user %s status %+v, want rule %d with 0 left", u, st[0], wantRule)
		}
	}
	if d, _ := check(l, t0, req("z")); d.Allowed || d.Block.Rule != 0 {
		t.Fatalf("sixth item request: %+v, want blocked by rule 0", d)
	}
}

func TestAllOrNothingAcrossEntriesAndKinds(t *testing.T) {
	l := mustNew(t,
		Rule{Resource: "a", Param: "p", Count: 1, Duration: time.Second},
		Rule{Resource: "a", Param: "p", Grade: Concurrency, Count: 5},
		Rule{Resource: "a", Param: "p", Behavior: Throttle, Count: 10, Duration: time.Second, MaxQueueingTime: time.Second},
		Rule{Resource: "b", Param: "q", Count: 0, Duration: time.Second},
	)
	a := Entry{Resource: "a", Params: []Param{{Name: "p", Values: []string{"x"}}}}
	b := Entry{Resource: "b", Params: []Param{{Name: "q", Values: []string{"y"}}}}
	d, st := check(l, t0, a, b)
	if d.Allowed || d.Block.Entry != 1 || d.Block.Rule != 3 {
		t.Fatalf("got %+v, want blocked by entry 1 rule 3", d)
	}
	if st[0].Rule < 0 || st[1].Rule != 3 || st[1].RetryAfter != time.Second {
		t.Fatalf("statuses %+v", st)
	}
	// Nothing of entry a was consumed: its bucket, concurrency and throttle slot are intact.
	d, st = check(l, t0, a)
	if !d.Allowed || d.Wait != 0 {
		t.Fatalf("entry a alone: %+v, want allowed with no wait", d)
	}
	if st[0].Rule != 0 || st[0].Remaining != 0 {
		t.Fatalf("entry a status %+v, want rule 0 with 0 left", st[0])
	}
	if got := l.Stats()[1].Tracked; got != 1 {
		t.Fatalf("concurrency tracked %d, want 1 (one acquire in flight)", got)
	}
}

func TestShadowRuleNeverBlocks(t *testing.T) {
	shadow := qps(1, time.Second)
	shadow.Shadow = true
	real := Rule{Resource: "r", Param: "p", Count: 3, Duration: time.Second}
	l := mustNew(t, shadow, real)
	steps := []struct {
		allowed, shadowBlocked bool
		remaining              int64 // the real rule's: the shadow rule is not reported in statuses
	}{
		{true, false, 2},
		{true, true, 1},
		{true, true, 0},
		{false, true, 0},
	}
	for i, s := range steps {
		d, st := check(l, t0, one("v", 1))
		if d.Allowed != s.allowed || d.ShadowBlocked != s.shadowBlocked || st[0].Remaining != s.remaining || st[0].Rule != 1 {
			t.Fatalf("step %d: %+v %+v, want allowed %v shadow %v remaining %d", i, d, st[0], s.allowed, s.shadowBlocked, s.remaining)
		}
		if s.shadowBlocked && (d.Shadow.Rule != 0 || d.Shadow.Reason != ReasonQPS || d.Shadow.Value != "v") {
			t.Fatalf("step %d: shadow %+v", i, d.Shadow)
		}
		if !s.allowed && d.Block.Rule != 1 {
			t.Fatalf("step %d: blocked by %d, want the real rule", i, d.Block.Rule)
		}
	}
	// The shadow rule consumed when the call was allowed: after 1s it has 1 token again, and
	// passing consumes it.
	d, _ := check(l, at(time.Second), one("v", 1))
	if !d.Allowed || d.ShadowBlocked {
		t.Fatalf("after a second: %+v", d)
	}
	top := l.Top(at(time.Second), 5)
	if got := top[0].ByBlocked; len(got) != 1 || got[0].Blocked != 3 || got[0].Passed != 2 {
		t.Fatalf("shadow rule top %+v, want 2 passed 3 blocked", got)
	}
}

func TestStatusTightestLimit(t *testing.T) {
	l := mustNew(t,
		Rule{Resource: "r", Param: "p", Count: 100, Duration: time.Minute},
		Rule{Resource: "r", Param: "p", Count: 10, Duration: time.Second},
	)
	_, st := check(l, t0, one("v", 1))
	want := Status{Rule: 1, Limit: 10, Duration: time.Second, Remaining: 9, ResetAfter: 100 * time.Millisecond}
	if st[0] != want {
		t.Fatalf("status %+v, want %+v", st[0], want)
	}
	_, st = check(l, t0, one("v", 95))
	// 95 > 10: rule 1 blocks; its status is the one reported, with nothing consumed.
	want.RetryAfter = time.Second
	if st[0] != want {
		t.Fatalf("blocked status %+v, want %+v", st[0], want)
	}
}

func TestZeroLimiterAllowsAll(t *testing.T) {
	var l Limiter
	st := make([]Status, 1)
	d := l.Check(context.Background(), t0, []Entry{one("v", 1)}, CheckOptions{}, st)
	if !d.Allowed || st[0].Rule != -1 {
		t.Fatalf("zero Limiter: %+v %+v", d, st[0])
	}
	if len(l.Stats()) != 0 || len(l.Top(t0, 3)) != 0 || l.Rules() != nil {
		t.Fatal("zero Limiter has rules")
	}
}

func TestNewRejectsBadRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rule
	}{
		{"no duration", Rule{Resource: "r", Param: "p", Count: 1}},
		{"negative count", Rule{Resource: "r", Param: "p", Count: -1, Duration: time.Second}},
		{"negative burst", Rule{Resource: "r", Param: "p", Count: 1, Burst: -1, Duration: time.Second}},
		{"negative item", Rule{Resource: "r", Param: "p", Count: 1, Duration: time.Second, Items: map[string]int64{"x": -2}}},
		{"bad grade", Rule{Resource: "r", Param: "p", Grade: 7, Count: 1, Duration: time.Second}},
		{"bad behavior", Rule{Resource: "r", Param: "p", Behavior: 9, Count: 1, Duration: time.Second}},
		{"negative capacity", Rule{Resource: "r", Param: "p", Count: 1, Duration: time.Second, Capacity: -1}},
	} {
		if _, err := New([]Rule{qps(1, time.Second), tc.r}, Options{}); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.r)
		}
	}
}

type prefixMatcher string

func (p prefixMatcher) Match(v string) bool { return len(v) >= len(p) && v[:len(p)] == string(p) }

func TestMatchLimitsOnlyMatchingValues(t *testing.T) {
	r := qps(1, time.Second)
	r.Match = prefixMatcher("vip-")
	l := mustNew(t, r)
	steps := []struct {
		e       Entry
		allowed bool
	}{
		{multi("vip-1"), true},
		{multi("vip-1"), false}, // matched: limited
		{multi("guest"), true},
		{multi("guest"), true}, // not matched: never limited
		{multi("guest", "vip-1"), false},
	}
	for i, s := range steps {
		if d, _ := check(l, t0, s.e); d.Allowed != s.allowed {
			t.Fatalf("step %d: allowed %v, want %v", i, d.Allowed, s.allowed)
		}
	}
}
