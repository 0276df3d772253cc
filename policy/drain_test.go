package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/audit"
	"github.com/extauthz/extauthz/rulestore"
)

// TestDrain: once the service drains, a throttled request whose turn comes after the deadline
// is refused (shutting_down, retry-after its turn), one whose turn comes before is held and
// allowed, and a later Drain with an earlier deadline refuses what is still held. The clock is
// fixed: turns are 1s apart from t0.
func TestDrain(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "T", Param: "u", Count: 1, Duration: time.Second, Behavior: hotparam.Throttle, MaxQueueingTime: time.Hour},
	})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	u := hotparam.Param{Name: "u", Values: []string{"a"}}
	req := func() *Request { return &Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("T", "o", u)}} }

	var v Verdict
	d.Decide(context.Background(), req(), &v) // turn 0: at once
	if v.Outcome != Allowed {
		t.Fatalf("first: kind %d, want allowed", v.Outcome)
	}
	// Turns 1s and 2s are held; the drain deadline 1500ms lets the first of them through.
	type result struct {
		v    Verdict
		a    audit.Decision
		took time.Duration // on the real clock, which paces the holds
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var v Verdict
			began := time.Now()
			d.Decide(ctx, req(), &v)
			a := v.Audit()
			results <- result{v, a, time.Since(began)}
		}()
	}
	waitFor(t, "two requests waiting", func() bool { return d.Waiting() == 2 })
	d.Drain(t0.Add(1500 * time.Millisecond))
	d.Drain(t0.Add(time.Hour)) // a later deadline changes nothing

	refused := <-results // the turn at 2s, refused at once
	if refused.v.Outcome != ShuttingDown || refused.v.Block.Reason != ReasonShuttingDown ||
		refused.v.Block.Rule != 0 || refused.v.Block.Param != "u" || refused.v.Block.Origin != "o" {
		t.Errorf("held past the deadline: outcome %v block %+v, want a shutting_down refusal by rule 0", refused.v.Outcome, refused.v.Block)
	}
	if got, want := refused.v.RetryAfter, 2*time.Second; got != want {
		t.Errorf("retry after %v, want %v (its turn)", got, want)
	}
	if refused.a.Result != "blocked" || refused.a.Reason != ReasonShuttingDown {
		t.Errorf("audit %+v, want blocked for shutting_down", refused.a)
	}
	allowed := <-results // the turn at 1s: allowed after its wait
	if allowed.v.Outcome != Throttled || allowed.v.Wait != time.Second {
		t.Errorf("held before the deadline: outcome %v wait %v, want allowed after 1s", allowed.v.Outcome, allowed.v.Wait)
	}
	// woken by the Drain, it went on waiting for its turn
	if allowed.took < time.Second {
		t.Errorf("held before the deadline: answered after %v, before its turn (1s)", allowed.took)
	}
	wg.Wait()

	// A new request whose turn (3s) is past the deadline is refused without being held.
	d.Decide(context.Background(), req(), &v)
	if v.Outcome != ShuttingDown || v.Block.Reason != ReasonShuttingDown {
		t.Errorf("new request after the drain: outcome %v block %+v, want shutting_down", v.Outcome, v.Block)
	}
	rec.mu.Lock()
	last, waits := rec.calls[len(rec.calls)-1], len(rec.waits)
	rec.mu.Unlock()
	if want := (call{APIRateLimit, "", "T", ShuttingDown}); last != want {
		t.Errorf("recorded %+v, want %+v", last, want)
	}
	if waits != 2 {
		t.Errorf("%d queue waits recorded, want 2 (the refused new request was never held)", waits)
	}
}

// TestDrainNow: Drain at the current instant refuses every request still held, however
// far its turn.
func TestDrainNow(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "T", Param: "u", Count: 1, Duration: time.Hour, Behavior: hotparam.Throttle, MaxQueueingTime: 2 * time.Hour},
	})
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }})
	u := hotparam.Param{Name: "u", Values: []string{"a"}}
	req := func() *Request { return &Request{API: APICheck, Entries: []descriptors.Entry{entry("T", "", u)}} }
	var v Verdict
	d.Decide(context.Background(), req(), &v)
	d.Drain(t0.Add(3 * time.Hour)) // the turn at 1h is within it: held
	done := make(chan Verdict, 1)
	go func() {
		var v Verdict
		d.Decide(context.Background(), req(), &v)
		done <- v
	}()
	waitFor(t, "the request held", func() bool { return d.Waiting() == 1 })
	d.Drain(t0)
	got := <-done
	if got.Outcome != ShuttingDown || got.Block.Reason != ReasonShuttingDown || got.RetryAfter != time.Hour {
		t.Errorf("held at Drain(now): outcome %v reason %q retry %v, want shutting_down, retry 1h", got.Outcome, got.Block.Reason, got.RetryAfter)
	}
}
