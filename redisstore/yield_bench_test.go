package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// BenchmarkEvalDistinct is Store.Eval of calls that each ask for a value of their own (no two
// calls share a key, so none is ever batched), 16 goroutines a processor, with the yield before
// a batch is sent and without it (side by side): what the yield costs where it cannot batch.
func BenchmarkEvalDistinct(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
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
			op := hotparam.RemoteOp{RuleID: "distinct-" + name, Count: 1000, Duration: time.Hour, Hits: 1}
			b.RunParallel(func(pb *testing.PB) {
				res := make([]hotparam.RemoteResult, 1)
				o := op
				for pb.Next() {
					o.Value = strconv.FormatUint(n.Add(1), 36)
					if err := s.Eval(context.Background(), []hotparam.RemoteOp{o}, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
