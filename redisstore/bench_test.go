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
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/redis/go-redis/v9"
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
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rc := s.client.Load().c
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer gr.Close()
	ctx := context.Background()
	if err := gr.ScriptLoad(ctx, scriptSource).Err(); err != nil {
		b.Fatal(err)
	}

	type call func(ctx context.Context, i int) error
	clients := []struct {
		name string
		call call
	}{
		{"rueidis", func(ctx context.Context, i int) error {
			ops := benchOps(i)
			g := s.group(ops, s.keys(ops))[0]
			args := g.encode(benchOps(i), "", "n"+strconv.Itoa(i))
			return rc.Do(ctx, rc.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(g.keys))).Key(g.keys...).Arg(args...).Build()).Error()
		}},
		{"go-redis", func(ctx context.Context, i int) error {
			ops := benchOps(i)
			g := s.group(ops, s.keys(ops))[0]
			args := g.encode(benchOps(i), "", "n"+strconv.Itoa(i))
			a := make([]any, len(args))
			for j, v := range args {
				a[j] = v
			}
			return gr.EvalSha(ctx, s.sha, g.keys, a...).Err()
		}},
		{"store", func(ctx context.Context, i int) error {
			ops := benchOps(i)
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
