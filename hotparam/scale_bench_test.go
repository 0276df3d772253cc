package hotparam

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// manyRules is n rules of distinct resources, of every kind, some with exception items.
func manyRules(n int) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		r := Rule{Resource: "GET:/api/v1/resource-" + strconv.Itoa(i), Param: "user", Count: 100, Duration: time.Second}
		switch i % 4 {
		case 1:
			r.Behavior, r.MaxQueueingTime = Throttle, 500*time.Millisecond
		case 2:
			r.Grade, r.Duration = Concurrency, 0
		case 3:
			r.Burst, r.Items = 10, map[string]int64{"vip": 1000}
		}
		rules[i] = r
	}
	return rules
}

// BenchmarkRuleMemory loads 50,000 rules and reports the heap each holds with no traffic
// (target: at most 1 KB a rule).
func BenchmarkRuleMemory(b *testing.B) {
	const n = 50_000
	rules := manyRules(n)
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l, err := New(rules, Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/rule")
		b.ReportMetric(1024, "target-bytes/rule")
		runtime.KeepAlive(l)
	}
}

// BenchmarkReload reloads a set of 50,000 rules in which 500 changed threshold and 500 are
// new, with values tracked (target: at most 250ms and 50 MB allocated).
func BenchmarkReload(b *testing.B) {
	const n = 50_000
	rules := manyRules(n)
	l, err := New(rules, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 50 {
		l.Check(context.Background(), t0, []Entry{{Resource: rules[i].Resource, Params: []Param{{Name: "user", Values: []string{"u"}}}}}, CheckOptions{}, nil)
	}
	next := make([]Rule, n)
	copy(next, rules)
	for i := 0; i < 500; i++ {
		next[i*100].Count = 200
		next[i*100+1].Resource += "-new"
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		set := next
		if i%2 == 1 {
			set = rules
		}
		if l, err = l.Reload(set, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/reload")
	b.ReportMetric(250, "target-ms/reload")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MB-allocated/reload")
	b.ReportMetric(50, "target-MB/reload")
}

// BenchmarkCheckEntries checks 1 and 10 entries of tracked values in one call, each entry on
// its own rule (target: 10 entries cost close to 10 single ones, with no allocation per
// entry).
func BenchmarkCheckEntries(b *testing.B) {
	rules := make([]Rule, 10)
	for i := range rules {
		rules[i] = Rule{Resource: "r" + strconv.Itoa(i), Param: "p", Count: 1 << 40, Duration: time.Second}
	}
	l, err := New(rules, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var single float64 // ns per entry of the 1-entry run
	for _, n := range []int{1, 10} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			es := make([]Entry, n)
			for i := range es {
				es[i] = Entry{Resource: "r" + strconv.Itoa(i), Params: []Param{{Name: "p", Values: []string{"value"}}}}
			}
			st := make([]Status, n)
			ctx := context.Background()
			b.ReportAllocs()
			now := t0
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if d := l.Check(ctx, now, es, CheckOptions{}, st); !d.Allowed {
					b.Fatal("blocked")
				}
			}
			perEntry := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(n)
			b.ReportMetric(perEntry, "ns/entry")
			if n == 1 {
				single = perEntry
			} else if single > 0 {
				// target: close to 1 (the sum of single calls), allocations 0 as for one entry
				b.ReportMetric(perEntry/single, "per-entry-vs-single")
			}
		})
	}
}
