package policy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// TestCancelledHoldGivesItsTurnBack: one request every 10s per user (the clock stands still, so
// every turn is a wait). A request given up during its wait gives its turn back when no turn
// is queued behind it; one given up with a turn behind it gives it back once that one is
// given up too. The waits the queue records show each next request's turn.
func TestCancelledHoldGivesItsTurnBack(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{
		{Resource: "T", Param: "u", Count: 1, Duration: 10 * time.Second, Behavior: hotparam.Throttle, MaxQueueingTime: time.Hour},
	})
	rec := &recorder{}
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: rec})
	req := &Request{API: APIRateLimit, Entries: []descriptors.Entry{entry("T", "", hotparam.Param{Name: "u", Values: []string{"a"}})}}
	var v Verdict
	d.Decide(context.Background(), req, &v)
	if v.Outcome != Allowed || v.Wait != 0 {
		t.Fatalf("first: outcome %v wait %v, want allowed at once", v.Outcome, v.Wait)
	}
	type held struct {
		cancel context.CancelFunc
		done   chan Outcome
	}
	start := func() held { // a request held until cancelled
		n := d.Waiting()
		ctx, cancel := context.WithCancel(context.Background())
		h := held{cancel, make(chan Outcome, 1)}
		go func() {
			var v Verdict
			d.Decide(ctx, req, &v)
			h.done <- v.Outcome
		}()
		waitFor(t, "a request held", func() bool { return d.Waiting() == n+1 })
		return h
	}
	stop := func(h held) {
		h.cancel()
		if k := <-h.done; k != Cancelled {
			t.Fatalf("a request given up: kind %d, want cancelled", k)
		}
	}
	b, c := start(), start() // turns at 10s and 20s
	stop(b)                  // c is queued behind it: nothing given back yet
	stop(start())            // 30s, the latest: given back
	stop(c)                  // given back, and b's with it
	stop(start())            // 10s again
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 10 * time.Second}; !slices.Equal(rec.waits, want) {
		t.Errorf("queue waits %v, want %v", rec.waits, want)
	}
	cancelled := 0
	for _, c := range rec.calls {
		if c.result == Cancelled {
			cancelled++
		}
	}
	if cancelled != 4 {
		t.Errorf("%d calls recorded cancelled, want 4: %v", cancelled, rec.calls)
	}
}
