package policy

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// TestDomainScopesRules: a rate-limit call is decided by its domain's rules and the rules
// without a domain; a Check call, which has no domain, by the latter alone. The domain is
// recorded and audited.
func TestDomainScopesRules(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "R", Param: "u", Count: 3, Duration: time.Minute},                 // every domain
		{Resource: "R", Domain: "free", Param: "u", Count: 1, Duration: time.Minute}, // domain free
	})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	u := hotparam.Param{Name: "u", Values: []string{"a"}}
	steps := []struct {
		api, domain string
		want        Outcome
		rule        int // the blocking rule, when refused
	}{
		{APIRateLimit, "free", Allowed, 0},
		{APIRateLimit, "free", ParamFlow, 1}, // its domain's rule: one a minute
		{APIRateLimit, "paid", Allowed, 0},   // the shared rule's second token
		{APICheck, "", Allowed, 0},           // the shared rule's third
		{APICheck, "", ParamFlow, 0},         // the shared rule is spent, for every domain
		{APIRateLimit, "paid", ParamFlow, 0},
	}
	for i, s := range steps {
		ctx := context.Background()
		var v Verdict
		d.Decide(ctx, &Request{API: s.api, Domain: s.domain, Entries: []descriptors.Entry{entry("R", "", u)}}, &v)
		a := v.Audit()
		if v.Outcome != s.want || (v.Outcome == ParamFlow && v.Block.Rule != s.rule) {
			t.Fatalf("step %d (%s, domain %q): outcome %v block %+v; want outcome %v by rule %d", i, s.api, s.domain, v.Outcome, v.Block, s.want, s.rule)
		}
		if a.Domain != s.domain {
			t.Errorf("step %d: audited domain %q, want %q", i, a.Domain, s.domain)
		}
		if got := rec.calls[len(rec.calls)-1]; got.domain != s.domain || got.resource != "R" {
			t.Errorf("step %d: recorded %+v, want domain %q and resource R", i, got, s.domain)
		}
	}
}

// TestMaxWaitingByDomain: while the throttle queues are full, a request is refused for
// queue_full only if a throttle rule applies to its domain; a domain's throttle rule does not
// refuse the calls of another domain.
func TestMaxWaitingByDomain(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "T", Domain: "slow", Param: "u", Count: 1, Duration: time.Second, Behavior: hotparam.Throttle, MaxQueueingTime: time.Hour},
	})
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 },
		Config: Config{MaxWaiting: 1}})
	u := hotparam.Param{Name: "u", Values: []string{"a"}}
	req := func(domain string) *Request {
		return &Request{API: APIRateLimit, Domain: domain, Entries: []descriptors.Entry{entry("T", "", u)}}
	}
	var v Verdict
	d.Decide(context.Background(), req("slow"), &v) // passes at once, the next waits a second
	if v.Outcome != Allowed || v.Wait != 0 {
		t.Fatalf("first: outcome %v wait %v, want allowed at once", v.Outcome, v.Wait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var v Verdict
		d.Decide(ctx, req("slow"), &v)
	}()
	waitFor(t, "one request waiting", func() bool { return d.Waiting() == 1 })

	d.Decide(context.Background(), req("slow"), &v)
	if v.Outcome != QueueFull || v.Block.Reason != ReasonQueueFull || v.Block.Rule != 0 {
		t.Errorf("domain slow while the queues are full: outcome %v block %+v, want queue_full by rule 0", v.Outcome, v.Block)
	}
	for _, domain := range []string{"fast", ""} {
		d.Decide(context.Background(), req(domain), &v)
		if v.Outcome != Allowed || v.Wait != 0 {
			t.Errorf("domain %q while the queues are full: outcome %v wait %v block %+v, want allowed at once", domain, v.Outcome, v.Wait, v.Block)
		}
	}
	cancel()
	<-done
}
