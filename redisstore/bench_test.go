package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/redistest"
)

// benchOps is a typical request: a QPS rule and a concurrency rule on one value, and a QPS rule
// on a second value. Counts are high so every call commits.
func benchOps(i int) []hotparam.RemoteOp {
	v := strconv.Itoa(i % 1000)
	return []hotparam.RemoteOp{
		{RuleID: "q", Value: "u" + v, Count: 1e9, Duration: time.Second, Hits: 1},
		{RuleID: "c", Value: "u" + v, Grade: hotparam.Concurrency, Count: 1e6, Lease: time.Second, Hits: 1},
		{RuleID: "i", Value: "i" + v, Count: 1e9, Duration: time.Second, Hits: 1},
	}
}

// BenchmarkEval is the Store.Eval path alone, one op and a typical request.
func BenchmarkEval(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			ops := benchOps(0)[:n]
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
