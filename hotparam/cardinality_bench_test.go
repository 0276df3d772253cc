package hotparam

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkCheckCardinality checks values already tracked, in random order, with 1,000 and
// with 1,000,000 of them tracked by one rule (its capacity raised to hold them all), side by
// side: what the working set's size does to a decision (cache misses in the value store). The
// 1e6 run reports the ratio to the 1e3 run of the same process (target <= 3).
func BenchmarkCheckCardinality(b *testing.B) {
	var small float64
	for _, n := range []int{1_000, 1_000_000} {
		b.Run("values="+strconv.Itoa(n), func(b *testing.B) {
			r := Rule{Resource: "r", Param: "p", Grade: QPS, Count: 1 << 40, Duration: time.Second, Capacity: n}
			l, err := New([]Rule{r}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "item-" + strconv.Itoa(1_000_000+i)
				l.Check(ctx, t0, []Entry{one(keys[i], 1)}, CheckOptions{}, nil)
			}
			// A random order of the keys, walked in turn: every check a value the ones before
			// it did not warm. The key is written into one buffer, as a request's value arrives
			// in the request: in cache, whatever the number of values tracked.
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			es := []Entry{one("", 1)}
			buf := make([]byte, 0, 32)
			b.ReportAllocs()
			i := 0
			start := time.Now()
			for b.Loop() {
				buf = strconv.AppendInt(append(buf[:0], "item-"...), int64(1_000_000+order[i]), 10)
				es[0].Params[0].Values[0] = unsafe.String(unsafe.SliceData(buf), len(buf))
				if i++; i == n {
					i = 0
				}
				if d := l.Check(ctx, t0, es, CheckOptions{}, nil); !d.Allowed {
					b.Fatal("refused")
				}
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			if n == 1_000 {
				small = ns
			} else if small > 0 {
				b.ReportMetric(ns/small, "x-of-1e3")
				b.ReportMetric(3, "target-x")
			}
		})
	}
}
