package policy

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

type unenforcedRecorder struct {
	recorder
	mu      sync.Mutex
	reports []string
}

func (r *unenforcedRecorder) ConcurrencyUnenforced(resource string, rule int, idle time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, resource+" "+time.Duration(rule).String()+" "+idle.String())
}

func (r *unenforcedRecorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reports...)
}

// TestConcurrencyUnenforced: a concurrency rule whose resource sees Check calls and no
// rate-limit call for a minute is reported once; a rate-limit call ends the watch, and a
// resource whose rate-limit calls keep coming is never reported; a reload keeps the state.
func TestConcurrencyUnenforced(t *testing.T) {
	rules := []hotparam.Rule{
		{Resource: "GET:/buy", Param: "item", Count: 5, Duration: time.Second},
		{Resource: "GET:/stream", Param: "user", Grade: hotparam.Concurrency, Count: 2, Duration: time.Second},
		{Resource: "GET:/both", Param: "user", Grade: hotparam.Concurrency, Count: 2, Duration: time.Second},
	}
	set := newSet(t, nil, rules)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	at := func(d time.Duration) { mu.Lock(); now = t0.Add(d); mu.Unlock() }
	rec := &unenforcedRecorder{}
	current := set
	d := New(Options{Rules: func() *rulestore.Set { return current }, Now: clock, Recorder: rec})
	user := hotparam.Param{Name: "user", Values: []string{"u1"}}
	check := func(resource string) {
		var v Verdict
		d.Decide(context.Background(), &Request{API: APICheck, SkipConcurrency: true, Entries: []descriptors.Entry{entry(resource, "", user)}}, &v)
	}
	rateLimit := func(resource string) {
		var v Verdict
		d.Decide(context.Background(), &Request{API: APIRateLimit, Entries: []descriptors.Entry{entry(resource, "", user)}}, &v)
	}
	a := "GET:/stream 1ns 1m0s" // rule 1, a minute after its first Check call
	b := "GET:/both 2ns 1m0s"   // rule 2, a minute after its first Check call since its last rate-limit call
	steps := []struct {
		at   time.Duration
		do   func(string)
		res  string
		want []string // every report so far
	}{
		{0, check, "GET:/stream", nil},
		{0, check, "GET:/both", nil},
		{0, rateLimit, "GET:/both", nil},
		{0, check, "GET:/buy", nil},
		{30 * time.Second, check, "GET:/stream", nil},
		{30 * time.Second, rateLimit, "GET:/both", nil},
		{59 * time.Second, check, "GET:/stream", nil},
		{60 * time.Second, check, "GET:/stream", []string{a}},
		{61 * time.Second, check, "GET:/stream", []string{a}}, // once
		{85 * time.Second, check, "GET:/both", []string{a}},   // its watch started at 85 s
		{89 * time.Second, check, "GET:/both", []string{a}},
		{120 * time.Second, check, "GET:/buy", []string{a}}, // a QPS rule: Check enforces it
		{145 * time.Second, check, "GET:/both", []string{a, b}},
		// A rate-limit call ends the watch; Check calls for a minute more report it again.
		{150 * time.Second, rateLimit, "GET:/stream", []string{a, b}},
		{151 * time.Second, check, "GET:/stream", []string{a, b}},
		{210 * time.Second, check, "GET:/stream", []string{a, b}},
		{211 * time.Second, check, "GET:/stream", []string{a, b, a}},
	}
	for i, s := range steps {
		if i == 10 {
			current = newSet(t, nil, rules) // a reload: the watches keep their state
		}
		at(s.at)
		s.do(s.res)
		if got := rec.got(); !reflect.DeepEqual(got, s.want) && len(got)+len(s.want) > 0 {
			t.Fatalf("step %d (%v %s): reports %q, want %q", i, s.at, s.res, got, s.want)
		}
	}
}

// TestConcurrencyUnenforcedNeedsRecorder: without an UnenforcedRecorder nothing is watched.
func TestConcurrencyUnenforcedNeedsRecorder(t *testing.T) {
	set := newSet(t, nil, []hotparam.Rule{{Resource: "r", Param: "user", Grade: hotparam.Concurrency, Count: 2, Duration: time.Second}})
	d := New(Options{Rules: func() *rulestore.Set { return set }, Now: func() time.Time { return t0 }, Recorder: &recorder{}})
	var v Verdict
	d.Decide(context.Background(), &Request{API: APICheck, SkipConcurrency: true, Entries: []descriptors.Entry{entry("r", "")}}, &v)
	if c := d.cache(set); c.unenforced != nil {
		t.Errorf("watches %v without an UnenforcedRecorder", c.unenforced)
	}
}
