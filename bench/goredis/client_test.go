// Package goredis compares Redis clients on the store's script: rueidis, which the service uses
// (auto pipelining over one connection), and go-redis (a connection pool). It is a module of its
// own so that go-redis stays out of the service's dependencies.
package goredis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
	"github.com/extauthz/extauthz/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// latencies collects per-call latencies from parallel goroutines, for percentiles.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	p := func(q float64) float64 { return float64(l.all[int(q*float64(len(l.all)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), "p50-us")
	b.ReportMetric(p(0.99), "p99-us")
}

// BenchmarkClient runs the same script, with the same keys and arguments, through rueidis (auto
// pipelining, one connection) and go-redis (a connection pool) against one redis-server, at a
// few levels of concurrency. "store" is the full Store.Eval path on rueidis.
func BenchmarkClient(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true,
		ForceSingleClient: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer gr.Close()
	ctx := context.Background()
	src, _, _ := redisstore.Script(redisstore.DefaultPrefix, redistest.TypicalOps(0), 0)
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if err := gr.ScriptLoad(ctx, src).Err(); err != nil {
		b.Fatal(err)
	}

	type call func(ctx context.Context, i int) error
	clients := []struct {
		name string
		call call
	}{
		{"rueidis", func(ctx context.Context, i int) error {
			_, keys, args := redisstore.Script(redisstore.DefaultPrefix, redistest.TypicalOps(i), uint64(i))
			return rc.Do(ctx, rc.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).Error()
		}},
		{"go-redis", func(ctx context.Context, i int) error {
			_, keys, args := redisstore.Script(redisstore.DefaultPrefix, redistest.TypicalOps(i), uint64(i))
			a := make([]any, len(args))
			for j, v := range args {
				a[j] = v
			}
			return gr.EvalSha(ctx, sha, keys, a...).Err()
		}},
		{"store", func(ctx context.Context, i int) error {
			ops := redistest.TypicalOps(i)
			return s.Eval(ctx, ops, make([]hotparam.RemoteResult, len(ops)))
		}},
	}
	for _, par := range []int{1, 8, 64} {
		for _, c := range clients {
			b.Run(fmt.Sprintf("%s/goroutines=%d", c.name, par*2), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(par)
				var seq atomic.Int64
				var lat latencies
				b.RunParallel(func(pb *testing.PB) {
					local := make([]time.Duration, 0, 1024)
					for pb.Next() {
						i := int(seq.Add(1))
						start := time.Now()
						if err := c.call(ctx, i); err != nil {
							b.Error(err)
							return
						}
						local = append(local, time.Since(start))
					}
					lat.add(local)
				})
				lat.report(b)
			})
		}
	}
}
