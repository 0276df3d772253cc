package hotparam

import (
	"strings"
	"testing"
	"time"
)

// postpaid is a postpaid rule of resource "r": count tokens an hour per value of "p".
func postpaid(count int64) Rule {
	r := qps(count, time.Hour)
	r.Postpaid = true
	return r
}

func admit(v string) Entry { e := one(v, 0); e.Probe = true; return e }

// A postpaid rule admits while a token is left, charges what a response used in full (into
// debt), and refuses until the debt is paid back and a token is there again.
func TestPostpaidAdmitChargeRefuse(t *testing.T) {
	l := mustNew(t, postpaid(100)) // a token every 36s
	steps := []struct {
		at        time.Duration
		e         Entry
		allowed   bool
		remaining int64
		retry     time.Duration // of a refusal
	}{
		{0, admit("u"), true, 100, 0},
		{0, one("u", 60), true, 40, 0},
		{0, admit("u"), true, 40, 0},
		{0, one("u", 60), true, 0, 0}, // charged in full: 20 tokens of debt
		{0, admit("u"), false, 0, 21 * 36 * time.Second},
		{0, one("u", 5), true, 0, 0},                                    // a charge is never refused: 25 of debt
		{25 * 36 * time.Second, admit("u"), false, 0, 36 * time.Second}, // debt paid, no token yet
		{26 * 36 * time.Second, admit("u"), true, 1, 0},
		{26 * 36 * time.Second, admit("v"), true, 100, 0}, // another value: its own budget
	}
	for i, s := range steps {
		d, st := check(l, at(s.at), s.e)
		if d.Allowed != s.allowed || st[0].Remaining != s.remaining || st[0].RetryAfter != s.retry {
			t.Fatalf("step %d: allowed %v remaining %d retry %v; want %v, %d, %v", i, d.Allowed, st[0].Remaining,
				st[0].RetryAfter, s.allowed, s.remaining, s.retry)
		}
	}
}

// A charge is applied whatever the outcome of its call: a call refused by another rule keeps
// it, and a release is ignored (it gives nothing back).
func TestPostpaidChargeAppliesWhateverTheOutcome(t *testing.T) {
	other := qps(1, time.Hour)
	other.Resource = "o"
	l := mustNew(t, postpaid(10), other)
	spent := Entry{Resource: "o", Params: []Param{{Name: "p", Values: []string{"u"}}}}
	if d, _ := check(l, t0, spent); !d.Allowed {
		t.Fatal("the other rule's first call refused")
	}
	if d, _ := check(l, t0, one("u", 10), spent); d.Allowed || d.Block.Rule != 1 {
		t.Fatalf("call with a charge and a spent rule: allowed %v block %+v, want refused by rule 1", d.Allowed, d.Block)
	}
	rel := one("u", 10)
	rel.Release = true
	check(l, t0, rel)
	if d, st := check(l, t0, admit("u")); d.Allowed || st[0].Remaining != 0 {
		t.Fatalf("after a refused call's charge and a release: allowed %v remaining %d; want the charge kept", d.Allowed, st[0].Remaining)
	}
}

// A debt is at most one bucket: a charge of any size leaves the value refused for at most two
// durations, and the status says when the bucket is full again.
func TestPostpaidDebtBoundedByOneBucket(t *testing.T) {
	l := mustNew(t, postpaid(100))
	check(l, t0, one("u", 1_000_000_000))
	_, st := check(l, t0, admit("u"))
	if st[0].ResetAfter != 2*time.Hour {
		t.Fatalf("reset after a huge charge: %v, want 2h (one bucket of debt, one to fill)", st[0].ResetAfter)
	}
	if d, _ := check(l, at(101*36*time.Second-1), admit("u")); d.Allowed {
		t.Fatal("admitted before the debt and a token were earned back")
	}
	if d, st := check(l, at(101*36*time.Second), admit("u")); !d.Allowed || st[0].Remaining != 1 {
		t.Fatalf("once the debt and a token are earned back: allowed %v remaining %d, want admitted with 1", d.Allowed, st[0].Remaining)
	}
	if d, st := check(l, at(2*time.Hour), admit("u")); !d.Allowed || st[0].Remaining != 100 {
		t.Fatalf("two hours later: allowed %v remaining %d, want a full bucket", d.Allowed, st[0].Remaining)
	}
}

// A value in debt evicted to make room keeps its debt: it comes back refused.
func TestPostpaidDebtSurvivesEviction(t *testing.T) {
	r := postpaid(100)
	r.Capacity = 1
	l := mustNew(t, r)
	check(l, t0, one("u", 150)) // 50 tokens of debt
	check(l, t0, admit("w"))    // evicts u
	if d, st := check(l, at(30*36*time.Second), admit("u")); d.Allowed || st[0].RetryAfter != 21*36*time.Second {
		t.Fatalf("u back after eviction: allowed %v retry %v; want refused for 21 more tokens", d.Allowed, st[0].RetryAfter)
	}
}

// A reload that changes the budget's count keeps the debt, converted to the new units and
// rounded against the caller.
func TestPostpaidReloadKeepsDebt(t *testing.T) {
	l := mustNew(t, postpaid(100))
	check(l, t0, one("u", 130)) // 30 tokens of debt
	l2, err := l.Reload([]Rule{postpaid(7)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 30 tokens of debt in the new units: a bucket of 7 is at most 7 of debt
	d, st := check(l2, t0, admit("u"))
	if d.Allowed || st[0].RetryAfter != 8*time.Hour/7+1 {
		t.Fatalf("after the reload: allowed %v retry %v; want refused for 8 tokens of 7 an hour", d.Allowed, st[0].RetryAfter)
	}
}

// Postpaid applies to qps reject rules without refund only.
func TestPostpaidRuleChecks(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Rule)
	}{
		{"throttle", func(r *Rule) { r.Behavior = Throttle }},
		{"concurrency", func(r *Rule) { r.Grade = Concurrency }},
		{"refund", func(r *Rule) { r.Refund = true }},
	} {
		r := postpaid(10)
		tt.edit(&r)
		if _, err := New([]Rule{r}, Options{}); err == nil || !strings.Contains(err.Error(), "postpaid") {
			t.Errorf("%s: New = %v, want an error naming postpaid", tt.name, err)
		}
	}
	huge := postpaid(1 << 62)
	huge.Duration = time.Nanosecond
	if _, err := New([]Rule{huge}, Options{}); err == nil {
		t.Error("a postpaid rule past MaxPostpaidUnits was accepted")
	}
	if _, err := New([]Rule{qps(1<<62, time.Nanosecond)}, Options{}); err != nil {
		t.Errorf("the same prepaid rule: %v, want it accepted", err)
	}
}

// A cluster postpaid rule sends its charge as a release with Postpaid set, and its admission
// as a probe; a charge under FallbackDeny blocks nothing.
func TestPostpaidRemoteOps(t *testing.T) {
	f := &fakeRemote{eval: allowAll}
	r := postpaid(10)
	r.Cluster = true
	l, err := New([]Rule{r}, Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	check(l, t0, admit("u"))
	check(l, t0, one("u", 4))
	if len(f.calls) != 2 {
		t.Fatalf("%d Remote calls, want 2", len(f.calls))
	}
	a, c := f.calls[0][0], f.calls[1][0]
	if !a.Probe || a.Release || !a.Postpaid {
		t.Errorf("admission sent as %+v, want a postpaid probe", a)
	}
	if c.Probe || !c.Release || !c.Postpaid || c.Hits != 4 {
		t.Errorf("charge sent as %+v, want a postpaid release of 4", c)
	}
	deny, err := New([]Rule{r}, Options{Remote: &fakeRemote{eval: failing}, Fallback: FallbackDeny})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := check(deny, t0, one("u", 4)); !d.Allowed {
		t.Errorf("a charge with the Remote down under FallbackDeny: refused (%+v), want allowed", d.Block)
	}
}

// Sweep forgets an idle value only once its state is back to the default: a value in debt,
// idle for longer than the Top window, keeps its debt.
func TestPostpaidSweepKeepsDebt(t *testing.T) {
	l, err := New([]Rule{postpaid(100)}, Options{TopWindow: time.Second}) // a token every 36s
	if err != nil {
		t.Fatal(err)
	}
	check(l, t0, one("u", 150)) // 50 tokens of debt
	for _, d := range []time.Duration{10 * time.Second, time.Minute, 20 * 36 * time.Second} {
		l.Sweep(at(d))
	}
	if d, st := check(l, at(20*36*time.Second), admit("u")); d.Allowed || st[0].RetryAfter != 31*36*time.Second {
		t.Fatalf("after sweeps: allowed %v retry %v, want refused for 31 more tokens", d.Allowed, st[0].RetryAfter)
	}
	l.Sweep(at(3 * time.Hour)) // back to the default: forgotten
	if got := l.Stats()[0].Tracked; got != 0 {
		t.Errorf("%d values tracked after the debt was repaid and the bucket refilled, want 0", got)
	}
}
