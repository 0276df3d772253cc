// Package otter compares the memory the hot-param store holds per tracked value with an otter
// W-TinyLFU cache holding the same per-value state, side by side in one run. It is a module of
// its own so that otter is not a dependency of the service.
package otter

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/extauthz/extauthz/hotparam"
)

const n = 1_000_000

// value is the per-value state a cache of pointers would hold: a lock, the limiter state (two
// int64 and a scale) and the Top counters (five uint32), 56 bytes, as the store keeps inline
// in its slots. Only its size matters here.
//
//lint:ignore U1000 the fields give the value its size
type value struct {
	mu       sync.Mutex
	state    [3]int64
	counters [5]uint32
}

// heapDelta runs fill and returns the heap it left allocated, per value.
func heapDelta(fill func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(after.HeapAlloc-before.HeapAlloc) / n
}

// key is the i-th 12-byte key, as in hotparam's BenchmarkMemoryPerValue.
func key(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], "item-"...), int64(1_000_000+i), 10)
}

// BenchmarkMemoryPerValue tracks 1,000,000 values in a hot-param rule and puts the same keys
// with a same-sized value in an otter cache, and reports both and their ratio.
func BenchmarkMemoryPerValue(b *testing.B) {
	for range b.N {
		store := heapDelta(func() any {
			l, err := hotparam.New([]hotparam.Rule{{Resource: "r", Param: "p", Count: 1 << 40,
				Duration: time.Second, Capacity: n}}, hotparam.Options{})
			if err != nil {
				b.Fatal(err)
			}
			e := []hotparam.Entry{{Resource: "r", Params: []hotparam.Param{{Name: "p", Values: []string{""}}}}}
			buf := make([]byte, 0, 32)
			at := time.Unix(1e9, 0)
			for i := range n {
				buf = key(buf, i)
				e[0].Params[0].Values[0] = string(buf)
				l.Check(context.Background(), at, e, hotparam.CheckOptions{}, nil)
			}
			if got := l.Stats()[0].Tracked; got != n {
				b.Fatalf("tracked %d of %d", got, n)
			}
			return l
		})
		var c *otter.Cache[string, *value]
		cache := heapDelta(func() any {
			c = otter.Must(&otter.Options[string, *value]{MaximumSize: n})
			buf := make([]byte, 0, 32)
			for i := range n {
				buf = key(buf, i)
				c.Set(string(buf), &value{})
			}
			c.CleanUp()
			return c
		})
		c.StopAllGoroutines()
		b.ReportMetric(store, "hotparam-bytes/value")
		b.ReportMetric(cache, "otter-bytes/value")
		b.ReportMetric(store/cache, "hotparam/otter")
	}
}
