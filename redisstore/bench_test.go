package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

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
