package hotparam

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func benchLimiter(b *testing.B, capacity int) *Limiter {
	b.Helper()
	r := Rule{Resource: "r", Param: "p", Grade: QPS, Count: 1 << 40, Duration: time.Second, Capacity: capacity}
	l, err := New([]Rule{r}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkCheckTracked checks values already tracked: the hot path.
func BenchmarkCheckTracked(b *testing.B) {
	l := benchLimiter(b, DefaultCapacity)
	checkTracked(b, l)
}

// BenchmarkCheckNewValue checks values seen for the first time, below the capacity (no
// eviction). The allocations are the key's: the benchmark's own string and the store's copy.
func BenchmarkCheckNewValue(b *testing.B) {
	checkNewValues(b, benchLimiter(b, 1<<23), new(atomic.Int64), "new-")
}

// BenchmarkCheckEvicting checks new values at capacity: every check evicts one.
func BenchmarkCheckEvicting(b *testing.B) {
	l := benchLimiter(b, 10000)
	var seq atomic.Int64
	for range 20000 {
		l.Check(context.Background(), t0, []Entry{one("warm-"+strconv.FormatInt(seq.Add(1), 10), 1)}, CheckOptions{}, nil)
	}
	warm := l.Stats()[0].Evictions // the warm-up's, not the benchmark's
	checkNewValues(b, l, &seq, "ev-")
	b.ReportMetric(float64(l.Stats()[0].Evictions-warm)/float64(b.N), "evictions/op")
}

// BenchmarkMemoryPerValue tracks 1,000,000 values (keys of 12 bytes) in one rule and reports the
// heap they hold, per value.
func BenchmarkMemoryPerValue(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := benchLimiter(b, n)
		e := []Entry{one("", 1)}
		buf := make([]byte, 0, 32)
		for i := range n {
			buf = strconv.AppendInt(append(buf[:0], "item-"...), int64(1_000_000+i), 10)
			e[0].Params[0].Values[0] = string(buf)
			l.Check(context.Background(), t0, e, CheckOptions{}, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := l.Stats()[0].Tracked; got != n {
			b.Fatalf("tracked %d", got)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/value")
		runtime.KeepAlive(l)
	}
}

// BenchmarkCheckMultiRule checks one entry against three rules of different kinds and two
// values, all tracked.
func BenchmarkCheckMultiRule(b *testing.B) {
	rules := []Rule{
		{Resource: "r", Param: "p", Count: 1 << 40, Duration: time.Second},
		{Resource: "r", Param: "q", Count: 1 << 30, Duration: time.Minute, Burst: 10},
		{Resource: "r", Param: "p", Behavior: Throttle, Count: 1 << 40, Duration: time.Second, MaxQueueingTime: time.Second},
	}
	l, err := New(rules, Options{})
	if err != nil {
		b.Fatal(err)
	}
	e := []Entry{{Resource: "r", Params: []Param{{Name: "p", Values: []string{"a"}}, {Name: "q", Values: []string{"b"}}}}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		st := make([]Status, 1)
		for pb.Next() {
			l.Check(ctx, t0, e, CheckOptions{}, st)
		}
	})
}

// allowRemote allows every op at once; it is safe for concurrent use.
type allowRemote struct{}

func (allowRemote) Eval(_ context.Context, ops []RemoteOp, res []RemoteResult) error {
	return allowAll(ops, res)
}

// BenchmarkCheckCluster checks tracked values of a local rule together with a cluster rule,
// against a Remote that answers at once: the cost of the cluster path itself (its locks are
// taken twice, around the Remote call).
func BenchmarkCheckCluster(b *testing.B) {
	rules := []Rule{
		{Resource: "r", Param: "p", Count: 1 << 40, Duration: time.Second},
		{Resource: "r", Param: "p", Count: 1 << 40, Duration: time.Second, Cluster: true},
	}
	l, err := New(rules, Options{Remote: allowRemote{}})
	if err != nil {
		b.Fatal(err)
	}
	checkTracked(b, l)
}

// checkTracked checks 4096 values, tracked before the timer starts, from parallel goroutines.
func checkTracked(b *testing.B, l *Limiter) {
	const n = 4096
	entries := make([][]Entry, n)
	for i := range entries {
		entries[i] = []Entry{one("value-"+strconv.Itoa(i), 1)}
		l.Check(context.Background(), t0, entries[i], CheckOptions{}, nil)
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 997)
		st := make([]Status, 1)
		ctx := context.Background()
		now := t0
		for pb.Next() {
			i++
			now = now.Add(time.Microsecond)
			if d := l.Check(ctx, now, entries[i%n], CheckOptions{}, st); !d.Allowed {
				b.Fatal("blocked")
			}
		}
	})
}

// checkNewValues checks values never seen before (prefix and a number from seq) from parallel
// goroutines.
func checkNewValues(b *testing.B, l *Limiter, seq *atomic.Int64, prefix string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		e := []Entry{one("", 1)}
		buf := make([]byte, 0, 32)
		for pb.Next() {
			buf = strconv.AppendInt(append(buf[:0], prefix...), seq.Add(1), 10)
			e[0].Params[0].Values[0] = string(buf)
			l.Check(ctx, t0, e, CheckOptions{}, nil)
		}
	})
}
