package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/rulestore"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type call struct {
	api, domain, resource string
	result                Outcome
}

type recorder struct {
	mu    sync.Mutex
	calls []call
	waits []time.Duration
}

func (r *recorder) Decision(api, domain, resource string, result Outcome, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{api, domain, resource, result})
}

func (r *recorder) QueueWait(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
}

func newSet(t *testing.T, auth []authority.Rule, params []hotparam.Rule) *rulestore.Set {
	t.Helper()
	list, err := authority.New(auth)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := hotparam.New(params, hotparam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &rulestore.Set{Version: 1, Authority: list, ParamFlow: lim,
		Rules: rulestore.Rules{Authority: auth, ParamFlow: params}}
}

func entry(resource, origin string, params ...hotparam.Param) descriptors.Entry {
	return descriptors.Entry{Entry: hotparam.Entry{Resource: resource, Params: params}, Origin: origin}
}

// TestDecideRecordsOnceAndAudits: every outcome is recorded once, and the verdict's audit
// record says it in that record's terms.
func TestDecideRecordsOnceAndAudits(t *testing.T) {
	set := newSet(t,
		[]authority.Rule{{Resource: "GET:/admin", Strategy: authority.White, Origins: []string{"ops"}}},
		[]hotparam.Rule{
			{Resource: "GET:/buy", Param: "item", Count: 1, Duration: time.Minute},
			{Resource: "GET:/peek", Param: "user", Count: 1, Duration: time.Minute, Shadow: true},
		})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	item := hotparam.Param{Name: "item", Values: []string{"7"}}
	user := hotparam.Param{Name: "user", Values: []string{"u1"}}

	tests := []struct {
		name      string
		req       Request
		wantKind  Outcome
		wantCall  call
		wantAudit audit.Decision
	}{
		{"no rule", Request{API: APICheck, RequestID: "r1", Entries: []descriptors.Entry{entry("GET:/x", "web")}},
			Allowed, call{APICheck, "", "", Allowed},
			audit.Decision{API: "check", RequestID: "r1", Resource: "GET:/x", Origin: "web", Result: "allowed"}},
		{"authority", Request{API: APIRateLimit, Domain: "edge", Entries: []descriptors.Entry{entry("GET:/x", ""), entry("GET:/admin", "web")}},
			Authority, call{APIRateLimit, "edge", "GET:/admin", Authority},
			audit.Decision{API: "ratelimit", Domain: "edge", Resource: "GET:/admin", Origin: "web", Result: "blocked", Reason: "authority", Rule: "authority[0]"}},
		{"allowed, shadow would block", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/peek", "web", user)}},
			Allowed, call{APICheck, "", "GET:/peek", Allowed}, // a shadow rule names its resource too
			audit.Decision{API: "check", Resource: "GET:/peek", Origin: "web", Result: "allowed"}},
		{"first token", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/buy", "web", item)}},
			Allowed, call{APICheck, "", "GET:/buy", Allowed},
			audit.Decision{API: "check", Resource: "GET:/buy", Origin: "web", Result: "allowed"}},
		{"qps", Request{API: APICheck, Entries: []descriptors.Entry{entry("GET:/buy", "web", item)}},
			ParamFlow, call{APICheck, "", "GET:/buy", ParamFlow},
			audit.Decision{API: "check", Resource: "GET:/buy", Origin: "web", Result: "blocked", Reason: "qps", Rule: "param_flow[0]", Param: "item", Value: "7"}},
		{"invalid", Request{API: APICheck, Err: &descriptors.RequestError{Descriptor: -1, Err: descriptors.ErrNoAttributes}},
			Invalid, call{APICheck, "", "", Invalid},
			audit.Decision{API: "check", Result: "invalid", Reason: "invalid"}},
	}
	for i, tt := range tests {
		ctx := context.Background()
		var v Verdict
		d.Decide(ctx, &tt.req, &v)
		a := v.Audit()
		if v.Outcome != tt.wantKind {
			t.Errorf("%s: kind %d, want %d", tt.name, v.Outcome, tt.wantKind)
		}
		if len(rec.calls) != i+1 {
			t.Fatalf("%s: %d records after %d calls, want one per call", tt.name, len(rec.calls), i+1)
		}
		if got := rec.calls[i]; got != tt.wantCall {
			t.Errorf("%s: recorded %+v, want %+v", tt.name, got, tt.wantCall)
		}
		if tt.name == "allowed, shadow would block" {
			// The first call on u1 spends its only token; the shadow rule would block the second.
			if a != tt.wantAudit {
				t.Errorf("%s: first call audit %+v, want %+v", tt.name, a, tt.wantAudit)
			}
			ctx = context.Background()
			d.Decide(ctx, &tt.req, &v)
			a = v.Audit()
			if !v.Shadow || !a.Shadow || a.Rule != "param_flow[1]" || a.Param != "user" || a.Value != "u1" || a.Result != "allowed" {
				t.Errorf("%s: second call verdict shadow=%v, audit %+v; want a shadow block by param_flow[1] on user=u1", tt.name, v.Shadow, a)
			}
			if got, want := rec.calls[len(rec.calls)-1], (call{APICheck, "", "GET:/peek", Shadow}); got != want {
				t.Errorf("%s: recorded %+v, want %+v", tt.name, got, want)
			}
			rec.calls = rec.calls[:i+1]
			continue
		}
		if a != tt.wantAudit {
			t.Errorf("%s: audit %+v, want %+v", tt.name, a, tt.wantAudit)
		}
	}
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMaxWaiting: while MaxWaiting requests are held in throttle queues, a request a throttle
// rule names is refused at once with reason queue_full, and takes no place in a queue; once
// the waits end, requests are held again.
func TestMaxWaiting(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "T", Param: "u", Count: 1, Duration: time.Second, Behavior: hotparam.Throttle, MaxQueueingTime: time.Hour},
	})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 },
		Recorder: rec, Config: Config{MaxWaiting: 2}})
	u := hotparam.Param{Name: "u", Values: []string{"a"}}
	req := func() *Request {
		return &Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("T", "", u)}}
	}
	var v Verdict
	d.Decide(context.Background(), req(), &v) // the first passes at once
	if v.Outcome != Allowed || v.Wait != 0 {
		t.Fatalf("first: outcome %v wait %v, want allowed at once", v.Outcome, v.Wait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 { // held 1s and 2s (the clock does not move)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v Verdict
			d.Decide(ctx, req(), &v)
		}()
	}
	waitFor(t, "two requests waiting", func() bool { return d.Waiting() == 2 })

	d.Decide(context.Background(), req(), &v)
	if v.Outcome != QueueFull || v.Block.Reason != ReasonQueueFull || v.Block.Rule != 0 || v.Block.Param != "u" {
		t.Errorf("third waiter: outcome %v block %+v, want a queue_full refusal by rule 0", v.Outcome, v.Block)
	}
	if got := v.Audit(); got.Result != "blocked" || got.Reason != ReasonQueueFull {
		t.Errorf("audit %+v, want blocked for queue_full", got)
	}
	rec.mu.Lock()
	last := rec.calls[len(rec.calls)-1]
	rec.mu.Unlock()
	if want := (call{APIRateLimit, "", "T", QueueFull}); last != want {
		t.Errorf("recorded %+v, want %+v", last, want)
	}
	// Another resource is not affected.
	d.Decide(context.Background(), &Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("other", "", u)}}, &v)
	if v.Outcome != Allowed {
		t.Errorf("unthrottled resource while the queues are full: kind %d, want allowed", v.Outcome)
	}

	cancel()
	wg.Wait()
	if n := d.Waiting(); n != 0 {
		t.Fatalf("%d waiting after the waits ended, want 0", n)
	}
	// The refused request took no place, and the two cancelled gave theirs back: the next one
	// waits 1s (the slot after the first's), not 4s (behind a slot at 3s the refused one took).
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan Verdict)
	go func() {
		var v Verdict
		d.Decide(ctx2, req(), &v)
		done <- v
	}()
	waitFor(t, "the next request waiting", func() bool { return d.Waiting() == 1 })
	cancel2()
	if v := <-done; v.Outcome != Cancelled {
		t.Errorf("next request: kind %d, want held (then cancelled)", v.Outcome)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if w := rec.waits; len(w) != 3 || w[2] != time.Second {
		t.Errorf("queue waits %v, want the next request held 1s", w)
	}
}

// TestAllowedCountedUnderTheirResource: an allowed request is recorded under its resource
// when any rule names it (an authority rule alone included), and under "" otherwise.
func TestAllowedCountedUnderTheirResource(t *testing.T) {
	set := newSet(t,
		[]authority.Rule{{Resource: "A", Strategy: authority.White, Origins: []string{"ops"}}},
		[]hotparam.Rule{{Resource: "P", Param: "p", Count: 9, Duration: time.Second}})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	var v Verdict
	for _, tt := range []struct {
		entries []descriptors.Entry
		want    string
	}{
		{[]descriptors.Entry{entry("A", "ops")}, "A"},
		{[]descriptors.Entry{entry("P", "")}, "P"}, // no value of p: the rule named it, did not apply
		{[]descriptors.Entry{entry("none", ""), entry("A", "ops")}, "A"},
		{[]descriptors.Entry{entry("none", "")}, ""},
	} {
		d.Decide(context.Background(), &Request{API: APIRateLimit, Entries: tt.entries}, &v)
		if got := rec.calls[len(rec.calls)-1]; got.result != Allowed || got.resource != tt.want {
			t.Errorf("entries %+v: recorded %+v, want ok under %q", tt.entries, got, tt.want)
		}
	}
}

// TestShadowAuthority: a shadow authority rule never refuses, and reports what it would have.
func TestShadowAuthority(t *testing.T) {
	set := newSet(t, []authority.Rule{
		{Resource: "S", Strategy: authority.Black, Origins: []string{"bad"}, Shadow: true},
		{Resource: "S", Strategy: authority.White, Origins: []string{"bad", "good"}},
	}, nil)
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	ctx := context.Background()
	var v Verdict
	d.Decide(ctx, &Request{API: APICheck, Entries: []descriptors.Entry{entry("S", "bad")}}, &v)
	a := v.Audit()
	if v.Outcome != Shadow || !v.Shadow || v.ShadowBlock.Rule != 0 || v.ShadowBlock.Reason != "in_black_list" {
		t.Errorf("shadow black list: outcome %v shadow %v %+v, want allowed, shadow block by rule 0", v.Outcome, v.Shadow, v.ShadowBlock)
	}
	if got, want := rec.calls[0], (call{APICheck, "", "S", Shadow}); got != want {
		t.Errorf("recorded %+v, want %+v", got, want)
	}
	if !a.Shadow || a.Result != "allowed" || a.Rule != "authority[0]" || a.Reason != "authority" {
		t.Errorf("audit %+v, want allowed with a shadow authority[0]", a)
	}
	// The enforcing rule still refuses; the shadow rule does not hide it.
	d.Decide(context.Background(), &Request{API: APICheck, Entries: []descriptors.Entry{entry("S", "ugly")}}, &v)
	if v.Outcome != Authority || v.Block.Rule != 1 {
		t.Errorf("white list: outcome %v block %+v, want refused by rule 1", v.Outcome, v.Block)
	}
	d.Decide(context.Background(), &Request{API: APICheck, Entries: []descriptors.Entry{entry("S", "good")}}, &v)
	if v.Outcome != Allowed || v.Shadow {
		t.Errorf("good origin: outcome %v shadow %v, want allowed, no shadow block", v.Outcome, v.Shadow)
	}
}

// TestAuthorityEachPair: the descriptors of one request are each checked against the
// authority rules; one whose resource and origin repeat the descriptor before takes its answer,
// but a change of either is checked again, and a release is never refused.
func TestAuthorityEachPair(t *testing.T) {
	set := newSet(t, []authority.Rule{
		{Resource: "A", Strategy: authority.White, Origins: []string{"good"}},
		{Resource: "B", Strategy: authority.Black, Origins: []string{"good"}},
	}, nil)
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }})
	release := entry("A", "bad")
	release.Release = true
	for _, c := range []struct {
		name    string
		entries []descriptors.Entry
		at      int // the refused entry, -1 for none
	}{
		{"same pair", []descriptors.Entry{entry("A", "good"), entry("A", "good"), entry("A", "good")}, -1},
		{"origin changes", []descriptors.Entry{entry("A", "good"), entry("A", "good"), entry("A", "bad")}, 2},
		{"resource changes", []descriptors.Entry{entry("A", "good"), entry("B", "good")}, 1},
		{"back to a refused pair", []descriptors.Entry{entry("A", "good"), release, entry("A", "bad")}, 2},
		{"release between", []descriptors.Entry{entry("B", "bad"), release, entry("B", "bad")}, -1},
	} {
		var v Verdict
		d.Decide(context.Background(), &Request{API: APIRateLimit, Entries: c.entries}, &v)
		switch {
		case c.at < 0 && v.Outcome != Allowed:
			t.Errorf("%s: outcome %v at %d, want allowed", c.name, v.Outcome, v.At)
		case c.at >= 0 && (v.Outcome != Authority || v.At != c.at):
			t.Errorf("%s: outcome %v at %d, want refused by authority at %d", c.name, v.Outcome, v.At, c.at)
		}
	}
}

// TestDryRun: with DryRun every rule is evaluated and reported, nothing is refused or held.
func TestDryRun(t *testing.T) {
	set := newSet(t,
		[]authority.Rule{{Resource: "A", Strategy: authority.White, Origins: []string{"ops"}}},
		[]hotparam.Rule{
			{Resource: "B", Param: "p", Count: 1, Duration: time.Minute},
			{Resource: "C", Param: "p", Count: 1, Duration: time.Hour, Behavior: hotparam.Throttle, MaxQueueingTime: 2 * time.Hour},
		})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec,
		Config: Config{DryRun: true}})
	p := hotparam.Param{Name: "p", Values: []string{"v"}}
	type want struct {
		dryRun   bool
		call     call
		reason   string
		auditRes string
	}
	steps := []struct {
		name string
		req  Request
		want want
	}{
		{"authority", Request{API: APICheck, Entries: []descriptors.Entry{entry("A", "web", p)}},
			want{true, call{APICheck, "", "A", DryRun}, "authority", "dry_run"}},
		{"first token", Request{API: APICheck, Entries: []descriptors.Entry{entry("B", "", p)}},
			want{false, call{APICheck, "", "B", Allowed}, "", "allowed"}},
		{"qps", Request{API: APICheck, Entries: []descriptors.Entry{entry("B", "", p)}},
			want{true, call{APICheck, "", "B", DryRun}, "qps", "dry_run"}},
		{"invalid", Request{API: APIRateLimit, Err: &descriptors.RequestError{Descriptor: -1, Err: descriptors.ErrNoDescriptors}},
			want{true, call{APIRateLimit, "", "", DryRun}, "invalid", "dry_run"}},
		{"throttle first", Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("C", "", p)}},
			want{false, call{APIRateLimit, "", "C", Allowed}, "", "allowed"}},
		// Would wait an hour: let through at once.
		{"throttle held", Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("C", "", p)}},
			want{false, call{APIRateLimit, "", "C", Allowed}, "", "allowed"}},
	}
	for i, st := range steps {
		ctx := context.Background()
		var v Verdict
		began := time.Now()
		d.Decide(ctx, &st.req, &v)
		a := v.Audit()
		if time.Since(began) > time.Second {
			t.Errorf("%s: held %v, want no wait in a dry run", st.name, time.Since(began))
		}
		if !v.Outcome.Allows() || v.DryRun != st.want.dryRun || (v.Outcome == DryRun) != st.want.dryRun {
			t.Errorf("%s: outcome %v dry run %v, want allowed, dry run %v", st.name, v.Outcome, v.DryRun, st.want.dryRun)
		}
		if got := rec.calls[i]; got != st.want.call {
			t.Errorf("%s: recorded %+v, want %+v", st.name, got, st.want.call)
		}
		if a.Result != st.want.auditRes || a.Reason != st.want.reason {
			t.Errorf("%s: audit %+v, want result %s reason %q", st.name, a, st.want.auditRes, st.want.reason)
		}
	}
}
