package hotparam

import (
	"context"
	"testing"
	"time"
)

// checkIn runs one Check of entries at now in domain.
func checkIn(l *Limiter, now time.Time, domain string, entries ...Entry) (Decision, []Status) {
	st := make([]Status, len(entries))
	d := l.Check(context.Background(), now, entries, CheckOptions{Domain: domain}, st)
	return d, st
}

func inDomain(r Rule, domain string) Rule {
	r.Domain = domain
	return r
}

// A rule with a domain limits the calls of that domain only; the calls of another domain and
// those without one pass it untouched.
func TestDomainRuleScopesCalls(t *testing.T) {
	l := mustNew(t, inDomain(qps(1, time.Second), "a"))
	steps := []struct {
		domain string
		want   bool
	}{
		{"a", true}, {"a", false}, // the domain's allowance: one a second
		{"b", true}, {"b", true}, {"", true}, {"", true}, // no rule for them
		{"A", true}, // domains are compared exactly
	}
	for i, s := range steps {
		d, st := checkIn(l, t0, s.domain, one("v", 1))
		if d.Allowed != s.want {
			t.Fatalf("step %d (domain %q): allowed = %v, want %v", i, s.domain, d.Allowed, s.want)
		}
		wantRule := -1
		if s.domain == "a" {
			wantRule = 0
		}
		if st[0].Rule != wantRule {
			t.Fatalf("step %d (domain %q): status rule = %d, want %d", i, s.domain, st[0].Rule, wantRule)
		}
	}
}

// A rule without a domain is one state for every domain: what one domain's calls take, the
// others' calls no longer have.
func TestRuleWithoutDomainSharedByDomains(t *testing.T) {
	l := mustNew(t, qps(3, time.Second), inDomain(qps(100, time.Second), "a"))
	for i, domain := range []string{"a", "b", ""} {
		if d, _ := checkIn(l, t0, domain, one("v", 1)); !d.Allowed {
			t.Fatalf("call %d (domain %q) refused: %+v", i, domain, d.Block)
		}
	}
	for _, domain := range []string{"a", "b", "", "c"} {
		d, _ := checkIn(l, t0, domain, one("v", 1))
		if d.Allowed || d.Block.Rule != 0 {
			t.Fatalf("domain %q: allowed = %v, block rule %d; want refused by the shared rule 0", domain, d.Allowed, d.Block.Rule)
		}
	}
}

// A call of a domain is decided by the domain's rules and the rules without a domain, all or
// nothing: refused by the domain's rule, it takes nothing from the shared one.
func TestDomainCallAllOrNothing(t *testing.T) {
	l := mustNew(t, qps(2, time.Second), inDomain(qps(1, time.Second), "a"), inDomain(qps(5, time.Second), "b"))
	if d, _ := checkIn(l, t0, "a", one("v", 1)); !d.Allowed {
		t.Fatalf("first call of a refused: %+v", d.Block)
	}
	d, st := checkIn(l, t0, "a", one("v", 1))
	if d.Allowed || d.Block.Rule != 1 {
		t.Fatalf("second call of a: allowed = %v, block rule %d; want refused by rule 1", d.Allowed, d.Block.Rule)
	}
	if st[0].Rule != 1 || st[0].Remaining != 0 {
		t.Fatalf("second call of a: status %+v, want rule 1 with 0 remaining", st[0])
	}
	// The refused call took nothing from rule 0: one token of its two is left, for domain b.
	if d, st := checkIn(l, t0, "b", one("v", 1)); !d.Allowed || st[0].Rule != 0 || st[0].Remaining != 0 {
		t.Fatalf("call of b: allowed = %v, status %+v; want allowed with rule 0 at 0 remaining", d.Allowed, st[0])
	}
}

// Rules of one resource in several domains, and several rules of one domain, keep the set's
// order: the first rule (by index) that blocks is the one reported.
func TestDomainRulesKeepSetOrder(t *testing.T) {
	l := mustNew(t,
		inDomain(qps(1, time.Second), "a"), // 0
		qps(1, time.Second),                // 1
		inDomain(qps(1, time.Second), "a"), // 2
	)
	if d, _ := checkIn(l, t0, "a", one("v", 1)); !d.Allowed {
		t.Fatalf("first call refused: %+v", d.Block)
	}
	if d, _ := checkIn(l, t0, "a", one("v", 1)); d.Allowed || d.Block.Rule != 0 {
		t.Fatalf("second call: allowed = %v, block rule %d; want refused by rule 0", d.Allowed, d.Block.Rule)
	}
	if d, _ := checkIn(l, t0, "", one("v", 1)); d.Allowed || d.Block.Rule != 1 {
		t.Fatalf("call without a domain: allowed = %v, block rule %d; want refused by rule 1", d.Allowed, d.Block.Rule)
	}
}

// A reload keeps the state of a rule whose domain is unchanged; moving a rule to another
// domain is another rule, with fresh state.
func TestDomainReloadKeepsState(t *testing.T) {
	l := mustNew(t, inDomain(qps(1, time.Second), "a"))
	if d, _ := checkIn(l, t0, "a", one("v", 1)); !d.Allowed {
		t.Fatal("first call refused")
	}
	same, err := l.Reload([]Rule{inDomain(qps(1, time.Second), "a")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := checkIn(same, t0, "a", one("v", 1)); d.Allowed {
		t.Fatal("after a reload with the same rule, the spent value was allowed again")
	}
	moved, err := same.Reload([]Rule{inDomain(qps(1, time.Second), "b")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := checkIn(moved, t0, "b", one("v", 1)); !d.Allowed {
		t.Fatal("the rule moved to domain b has the state of domain a's")
	}
	if d, _ := checkIn(moved, t0, "a", one("v", 1)); !d.Allowed {
		t.Fatal("domain a is still limited after its rule moved to b")
	}
}

// The shared store's rule IDs of rules without a domain are those of before domains existed
// (their keys in Redis are unchanged); a rule with a domain has its own.
func TestDomainRuleID(t *testing.T) {
	r := qps(5, time.Second)
	if got, want := ruleID(r, 0), `"r"|"p"|0|0|1000000000|0`; got != want {
		t.Fatalf("ruleID without a domain = %s, want %s", got, want)
	}
	if got, want := ruleID(inDomain(r, "llm"), 0), `"r"|"p"|0|0|1000000000|0|d"llm"`; got != want {
		t.Fatalf("ruleID in domain llm = %s, want %s", got, want)
	}
}

// A cluster rule with a domain goes to the Remote only for the calls of its domain.
func TestDomainClusterRule(t *testing.T) {
	f := &fakeRemote{eval: allowAll}
	r := inDomain(qps(5, time.Second), "a")
	r.Cluster = true
	l, err := New([]Rule{r}, Options{Remote: f})
	if err != nil {
		t.Fatal(err)
	}
	checkIn(l, t0, "b", one("v", 1))
	checkIn(l, t0, "", one("v", 1))
	if n := len(f.calls); n != 0 {
		t.Fatalf("calls of other domains reached the Remote %d times", n)
	}
	checkIn(l, t0, "a", one("v", 1))
	if len(f.calls) != 1 || len(f.calls[0]) != 1 || f.calls[0][0].RuleID != ruleID(r, 0) {
		t.Fatalf("the call of domain a sent %+v, want one op of rule %s", f.calls, ruleID(r, 0))
	}
}
