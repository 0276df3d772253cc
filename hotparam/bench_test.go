package hotparam

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
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

// BenchmarkMemoryPerValue tracks 1,000,000 values (keys of 12 bytes) in one rule and reports
// the heap they hold and the process's resident memory, per value: right after they were
// tracked (heap garbage of the growth not yet returned) and at steady state, after a pass of
// checks over the tracked values and the runtime returning free memory to the OS, as its
// background scavenger does over time (target: 160 bytes of RSS a value).
func BenchmarkMemoryPerValue(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		debug.FreeOSMemory()
		runtime.ReadMemStats(&before)
		rss0 := rss(b)
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
		rss1 := rss(b)
		if got := l.Stats()[0].Tracked; got != n {
			b.Fatalf("tracked %d", got)
		}
		for i := range n { // steady state: tracked values checked again, nothing allocated
			buf = strconv.AppendInt(append(buf[:0], "item-"...), int64(1_000_000+i), 10)
			e[0].Params[0].Values[0] = unsafe.String(&buf[0], len(buf))
			l.Check(context.Background(), t0, e, CheckOptions{}, nil)
		}
		debug.FreeOSMemory()
		rss2 := rss(b)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/value")
		b.ReportMetric(float64(rss1-rss0)/n, "rss-bytes/value-after-load")
		b.ReportMetric(float64(rss2-rss0)/n, "rss-bytes/value-steady")
		b.ReportMetric(160, "target-rss-bytes/value")
		runtime.KeepAlive(l)
	}
}

// rss is the process's resident memory in bytes.
func rss(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
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
