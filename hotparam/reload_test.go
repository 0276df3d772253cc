package hotparam

import (
	"testing"
	"time"
)

func TestReloadKeepsStateOnThresholdChange(t *testing.T) {
	on := func(res string, r Rule) Rule { r.Resource = res; return r }
	req := func(res string, hits int64) Entry {
		return Entry{Resource: res, Params: []Param{{Name: "p", Values: []string{"v"}}}, Hits: hits}
	}
	l := mustNew(t, on("a", qps(10, time.Second)), on("b", conc(5, 0)), on("c", throttle(10, time.Second, time.Second)))
	for _, e := range []Entry{req("a", 9), req("b", 4), req("c", 3)} {
		if d, _ := check(l, t0, e); !d.Allowed {
			t.Fatalf("%+v blocked: %+v", e, d)
		}
	}
	// Every threshold changes; no identity does.
	a2 := on("a", qps(10, time.Second))
	a2.Burst, a2.Capacity, a2.Refund = 5, 50, true
	b2 := on("b", conc(6, time.Hour))
	c2 := on("c", throttle(10, time.Second, 2*time.Second))
	l2, err := l.Reload([]Rule{a2, b2, c2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []struct {
		e         Entry
		allowed   bool
		remaining int64
		wait      time.Duration
	}{
		{req("a", 1), true, 0, 0},                       // 1 token left: the larger capacity gave nothing
		{req("b", 2), true, 0, 0},                       // 4 in flight kept, 6 allowed now
		{req("c", 1), true, 17, 300 * time.Millisecond}, // slots 0-200ms taken; 2s of queueing now: 400ms..2s free
	} {
		d, st := check(l2, t0, s.e)
		if d.Allowed != s.allowed || st[0].Rule != i || st[0].Remaining != s.remaining || d.Wait != s.wait {
			t.Fatalf("step %d: %+v %+v, want allowed %v remaining %d wait %v", i, d, st[0], s.allowed, s.remaining, s.wait)
		}
	}
	if got := l2.Stats()[1].Tracked; got != 1 {
		t.Fatalf("concurrency tracked %d, want 1", got)
	}
}

func TestReloadClampsToLowerCapacity(t *testing.T) {
	l := mustNew(t, qps(10, time.Second))
	check(l, t0, one("v", 2)) // 8 left
	l2, err := l.Reload([]Rule{qps(3, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at        time.Duration
		hits      int64
		allowed   bool
		remaining int64
	}{
		{0, 4, false, 3}, // clamped to the new capacity of 3
		{0, 3, true, 0},
		{time.Second / 3, 1, false, 0}, // a token every 333333333.3ns now
		{time.Second/3 + 1, 1, true, 0},
	}
	for i, s := range steps {
		d, st := check(l2, at(s.at), one("v", s.hits))
		if d.Allowed != s.allowed || st[0].Remaining != s.remaining {
			t.Fatalf("step %d: allowed %v remaining %d, want %v %d", i, d.Allowed, st[0].Remaining, s.allowed, s.remaining)
		}
	}
	// The old Limiter shares the state and stays usable with its own threshold: no fresh tokens.
	if d, _ := check(l, at(time.Second/3+1), one("v", 1)); d.Allowed {
		t.Fatal("the old Limiter handed out a token the new one spent")
	}
}

func TestReloadItemChangeKeepsTokens(t *testing.T) {
	r := qps(10, time.Second)
	l := mustNew(t, r)
	check(l, t0, one("v", 7)) // 3 left
	r.Items = map[string]int64{"v": 4}
	l2, err := l.Reload([]Rule{r}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, st := check(l2, t0, one("v", 1))
	if st[0].Remaining != 2 || st[0].Limit != 4 {
		t.Fatalf("status %+v, want limit 4 with 2 left", st[0])
	}
}

func TestReloadResetsOnIdentityChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Rule)
	}{
		{"duration", func(r *Rule) { r.Duration = 2 * time.Second }},
		{"param", func(r *Rule) { r.Param = "q" }},
		{"behavior", func(r *Rule) { r.Behavior = Throttle }},
		{"cluster", func(r *Rule) { r.Cluster = true }},
	} {
		r := qps(1, time.Second)
		l := mustNew(t, r)
		check(l, t0, Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"v"}}}})
		tc.change(&r)
		l2, err := l.Reload([]Rule{r}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := l2.Stats()[0].Tracked; got != 0 {
			t.Errorf("%s: tracked %d after an identity change, want fresh state", tc.name, got)
		}
		d, _ := check(l2, t0, Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{"v"}}, {Name: "q", Values: []string{"v"}}}})
		if !d.Allowed {
			t.Errorf("%s: blocked with fresh state: %+v", tc.name, d)
		}
	}
}

func TestReloadMatchesSameIdentityInOrder(t *testing.T) {
	a := qps(5, time.Second)
	b := qps(5, time.Second)
	b.Shadow = true
	l := mustNew(t, a, b)
	// one request: both rules track v
	check(l, t0, one("v", 1))
	// Same identity twice: the first new rule takes the first old state, the second the second.
	l2, err := l.Reload([]Rule{qps(5, time.Second), b, qps(5, time.Second)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stats := l2.Stats()
	if stats[0].Tracked != 1 || stats[1].Tracked != 1 || stats[2].Tracked != 0 {
		t.Fatalf("tracked %+v, want states kept for the first two rules only", stats)
	}
	if l2.compiled[0].store != l.compiled[0].store || l2.compiled[1].store != l.compiled[1].store {
		t.Fatal("stores not matched by identity and order")
	}
	if l2.idOf(0) == l2.idOf(1) || l2.idOf(1) != l.idOf(1) {
		t.Fatalf("rule ids %q %q (old %q): want distinct, and stable across the reload",
			l2.idOf(0), l2.idOf(1), l.idOf(1))
	}
}

func TestReloadErrorChangesNothing(t *testing.T) {
	r := qps(10, time.Second)
	r.Capacity = 5
	l := mustNew(t, r)
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		check(l, t0, one(v, 1))
	}
	small := r
	small.Capacity = 2
	if _, err := l.Reload([]Rule{small, {Resource: "x", Param: "p", Count: -1, Duration: time.Second}}, Options{}); err == nil {
		t.Fatal("Reload accepted a bad rule")
	}
	if got := l.Stats()[0].Tracked; got != 5 {
		t.Fatalf("a failed reload cut the store to %d values", got)
	}
	l2, err := l.Reload([]Rule{small}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l2.Stats()[0]; got.Tracked != 2 || got.Evictions != 3 {
		t.Fatalf("after lowering capacity: %+v, want 2 tracked, 3 evictions", got)
	}
}

func TestReloadThrottleCountChangeKeepsSlots(t *testing.T) {
	l := mustNew(t, throttle(3, time.Second, time.Hour))
	check(l, t0, one("v", 2)) // slots at 0 and 333333333.3ns: the next is 666666666.7ns
	l2, err := l.Reload([]Rule{throttle(4, time.Second, time.Hour)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{666666667, 916666667, 1166666667} {
		d := l2.Check(t.Context(), t0, []Entry{one("v", 1)}, CheckOptions{}, nil)
		if !d.Allowed || d.Wait != want {
			t.Fatalf("request %d: %+v, want wait %v", i, d, want)
		}
	}
}

// TestReloadManyRulesKeepsState: a 50,000-rule set reloaded with a rule inserted in front (every
// rule moves) and others changed keeps a tracked value's state, under the rule's new index;
// unchanged rules are not compiled again.
func TestReloadManyRulesKeepsState(t *testing.T) {
	rules := manyRules(50_000)
	l := mustNew(t, rules...)
	const k = 12_344 // a reject rule of count 100
	e := Entry{Resource: rules[k].Resource, Params: []Param{{Name: "user", Values: []string{"u"}}}, Hits: 100}
	if d, _ := check(l, t0, e); !d.Allowed {
		t.Fatal("first request blocked")
	}
	next := append([]Rule{{Resource: "new", Param: "p", Count: 1, Duration: time.Second}}, rules...)
	next[2].Count = 7 // rule 1 of the old set changes
	l2, err := l.Reload(next, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.Hits = 1
	d, st := check(l2, t0, e)
	if d.Allowed || d.Block.Rule != k+1 || st[0].Rule != k+1 {
		t.Fatalf("after the reload: %+v %+v, want blocked by rule %d (state kept)", d, st[0], k+1)
	}
	if l2.compiled[k+1].store != l.compiled[k].store {
		t.Fatal("the store was not kept")
	}
	if l2.compiled[3] == l.compiled[2] || l2.compiled[3].def != l.compiled[2].def {
		t.Fatal("a moved rule shares the old compiled rule (its index would be wrong) or was compiled anew")
	}
	if l2.compiled[2].def.count != 7 {
		t.Fatalf("the changed rule kept its old count %d", l2.compiled[2].def.count)
	}
	l3, err := l2.Reload(next, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range next {
		if l3.compiled[i] != l2.compiled[i] {
			t.Fatalf("rule %d compiled again although unchanged and in place", i)
		}
	}
}

// TestDeleteThenRestoreKeepsState: a reload with no rules (a source emptied by mistake), then
// one with the rule back, leaves a depleted value depleted; once its bucket would be full and
// Sweep ran, the rule's state is let go.
func TestDeleteThenRestoreKeepsState(t *testing.T) {
	r := qps(3, time.Hour)
	l := mustNew(t, r, Rule{Resource: "r", Param: "c", Grade: Concurrency, Count: 1, Lease: time.Minute})
	for range 3 {
		check(l, t0, one("v", 1))
	}
	c := Entry{Resource: "r", Params: []Param{{Name: "c", Values: []string{"x"}}}}
	if d, _ := check(l, t0, c); !d.Allowed {
		t.Fatal("the first acquire was refused")
	}
	empty, err := l.Reload(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := check(empty, t0, one("v", 1)); !d.Allowed {
		t.Fatal("a request with no rule in force was refused")
	}
	empty.Sweep(at(30 * time.Second)) // the states are not back to the default: they stay
	back, err := empty.Reload([]Rule{r, {Resource: "r", Param: "c", Grade: Concurrency, Count: 1, Lease: time.Minute}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := check(back, at(40*time.Second), one("v", 1)); d.Allowed {
		t.Fatal("the depleted value was given a fresh bucket when its rule came back")
	}
	if d, _ := check(back, at(40*time.Second), c); d.Allowed {
		t.Fatal("the concurrency value held was freed when its rule came back")
	}
	// an hour on the bucket is full again, the lease expired: Sweep lets the retired state go
	gone, err := back.Reload(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gone.Sweep(at(2 * time.Hour))
	gone.Sweep(at(4 * time.Hour)) // past the Top windows of the values' last requests
	if again, err := gone.Reload(nil, Options{}); err != nil || len(again.retired) != 0 {
		t.Fatalf("%d retired rules after their state ended (err %v), want none", len(again.retired), err)
	}
}
