package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// BenchmarkEval is the Store.Eval path alone, one op and a typical request.
func BenchmarkEval(b *testing.B) {
	s := benchStore(b)
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ops := redistest.TypicalOps(0)[:n]
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]hotparam.RemoteResult, n)
				for pb.Next() {
					if err := s.Eval(ctx, ops, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkEvalDistinct is Store.Eval of calls that each ask for a value of their own (no two
// calls share a key; they share a lane, so those queued behind a call in flight go together),
// 16 goroutines a processor, with the yield before a batch is sent and without it (side by
// side). Besides the time a call it reports the calls' median and 99th-percentile latency, what
// a call pays for waiting behind the one in flight.
func BenchmarkEvalDistinct(b *testing.B) {
	s := benchStore(b)
	for _, yield := range []bool{true, false} {
		name := "yield"
		if !yield {
			name = "no-yield"
		}
		b.Run(name, func(b *testing.B) {
			if !yield {
				s.yield = func() {}
			}
			b.ReportAllocs()
			b.SetParallelism(16)
			var n atomic.Uint64
			var mu sync.Mutex
			var lat []time.Duration
			op := hotparam.RemoteOp{RuleID: "distinct-" + name, Count: 1000, Duration: time.Hour, Hits: 1}
			b.RunParallel(func(pb *testing.PB) {
				res := make([]hotparam.RemoteResult, 1)
				o := op
				var mine []time.Duration
				for pb.Next() {
					o.Value = strconv.FormatUint(n.Add(1), 36)
					t := time.Now()
					if err := s.Eval(context.Background(), []hotparam.RemoteOp{o}, res); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

// benchStore is a Store on a redis-server of its own, closed when b ends.
func benchStore(b *testing.B) *Store {
	srv := redistest.Start(b)
	return openStore(b, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
}
