package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
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
			distinctCalls(b, s, 16, "distinct-"+name)
		})
	}
}

// BenchmarkEvalDistinctRemote is BenchmarkEvalDistinct's calls (each a value of its own, with
// the yield) to a Redis at least 1 ms of round trip away (redistest.DelayProxy, 500µs each way;
// the timers' granularity adds to it: the median round trip of a PING is reported as rtt-µs),
// as one across a network is, at 2 and 32 goroutines: where a call queued behind the one in
// flight on its lane waits longer than on loopback, unless its BatchWait ends first (wait=-1:
// it waits for the call in flight; the default, side by side).
func BenchmarkEvalDistinctRemote(b *testing.B) {
	srv := redistest.Start(b)
	addr := redistest.DelayProxy(b, srv.Addr(), 500*time.Microsecond)
	rtt := pingRTT(b, addr)
	for _, wait := range []time.Duration{-1, DefaultBatchWait} {
		s := openStore(b, Config{Addrs: []string{addr}, Timeout: 5 * time.Second, BatchWait: wait})
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("wait=%v/goroutines=%d", wait, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				distinctCalls(b, s, par, fmt.Sprintf("remote-%v-%d", wait, par))
				b.ReportMetric(float64(rtt.Microseconds()), "rtt-µs")
			})
		}
	}
}

// pingRTT is the median round trip of a PING to the Redis at addr, of 21.
func pingRTT(b *testing.B, addr string) time.Duration {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var rtt []time.Duration
	for range 21 {
		t := time.Now()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			b.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
			b.Fatalf("PING: %q, %v", line, err)
		}
		rtt = append(rtt, time.Since(t))
	}
	slices.Sort(rtt)
	return rtt[len(rtt)/2]
}

// distinctCalls runs b's calls on s, par goroutines a processor, each call a value of its own of
// rule, and reports the calls' median and 99th-percentile latency.
func distinctCalls(b *testing.B, s *Store, par int, rule string) {
	b.ReportAllocs()
	b.SetParallelism(par)
	var n atomic.Uint64
	var mu sync.Mutex
	var lat []time.Duration
	op := hotparam.RemoteOp{RuleID: rule, Count: 1000, Duration: time.Hour, Hits: 1}
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
}

// benchStore is a Store on a redis-server of its own, closed when b ends.
func benchStore(b *testing.B) *Store {
	srv := redistest.Start(b)
	return openStore(b, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second})
}
