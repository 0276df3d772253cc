package policy

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/proccpu"
	"github.com/extauthz/extauthz/rulestore"
)

// BenchmarkHold10kPerSecond holds 10,000 requests a second: one throttle rule spaces the
// requests of one value 100µs apart, and 500 callers ask again as soon as each is answered, so
// that every request is held (about 50ms). It reports the process's CPU per held request
// (the decision, the hold and the wake-up) and how late each answer came after its turn
// (late-us-p50, late-us-p99, late-us-max); "early" counts answers before their turn (never).
func BenchmarkHold10kPerSecond(b *testing.B) {
	list, err := authority.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	rules := []hotparam.Rule{{Resource: "r", Param: "k", Count: 10000, Duration: time.Second,
		Behavior: hotparam.Throttle, MaxQueueingTime: time.Second}}
	lim, err := hotparam.New(rules, hotparam.Options{})
	if err != nil {
		b.Fatal(err)
	}
	set := &rulestore.Set{Version: 1, Authority: list, ParamFlow: lim, Rules: rulestore.Rules{ParamFlow: rules}}
	d := New(Options{Rules: func() *rulestore.Set { return set }})
	var mu sync.Mutex
	var late []time.Duration
	early := 0
	b.SetParallelism(250) // 500 callers on two cores
	b.ResetTimer()
	cpu0 := proccpu.Used(b)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		req := Request{API: APIRateLimit, Domain: "d", Entries: []descriptors.Entry{
			entry("r", "", hotparam.Param{Name: "k", Values: []string{"v"}})}}
		var v Verdict
		var mine []time.Duration
		myEarly := 0
		for pb.Next() {
			began := time.Now()
			d.Decide(ctx, &req, &v)
			if v.Outcome != Allowed && v.Outcome != Throttled {
				b.Errorf("verdict %v, want let through (allowed or throttled)", v.Outcome)
				return
			}
			// began is no later than the Decider's start, so began+Wait is at or before the turn:
			// an answer before it came early.
			if l := time.Since(began) - v.Wait; l >= 0 {
				mine = append(mine, l)
			} else {
				myEarly++
			}
		}
		mu.Lock()
		late = append(late, mine...)
		early += myEarly
		mu.Unlock()
	})
	cpu := proccpu.Used(b) - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-us/held")
	b.ReportMetric(float64(early), "early")
	if len(late) > 0 {
		slices.Sort(late)
		at := func(q float64) float64 { return float64(late[int(q*float64(len(late)-1))].Microseconds()) }
		b.ReportMetric(at(0.5), "late-us-p50")
		b.ReportMetric(at(0.99), "late-us-p99")
		b.ReportMetric(at(1), "late-us-max")
	}
}
