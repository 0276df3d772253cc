package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// freeAddr returns a loopback address that is free now.
func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// benchService runs a service in this process with rules, in Redis mode when redisAddr is set,
// with the settings of extra (environment variables) on top, and returns its gRPC address.
func benchService(b *testing.B, rules, redisAddr string, extra map[string]string) string {
	b.Helper()
	rf := filepath.Join(b.TempDir(), "rules.yaml")
	if err := os.WriteFile(rf, []byte(rules), 0o600); err != nil {
		b.Fatal(err)
	}
	addr := freeAddr(b)
	vars := map[string]string{
		"EXTAUTHZ_GRPC_ADDR":  addr,
		"EXTAUTHZ_ADMIN_ADDR": freeAddr(b),
		"EXTAUTHZ_RULES_FILE": rf,
	}
	if redisAddr != "" {
		vars["EXTAUTHZ_STORE_REDIS_ADDRS"] = redisAddr
		vars["EXTAUTHZ_STORE_REDIS_TIMEOUT"] = "1s"
		vars["EXTAUTHZ_STORE_REDIS_FALLBACK"] = "deny"
	}
	maps.Copy(vars, extra)
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addConfigFlags(fs)
	cfg, err := loadConfig(fs, env(vars))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := newService(cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("service: %v", err)
		}
		svc.close()
	})
	conn, err := grpcClient(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{})
		hcancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("service on %s not serving within 10s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchRule is the rule of the service benchmarks: a limit no benchmark reaches, in memory or,
// with cluster true, in Redis.
func benchRule(cluster bool) string {
	return fmt.Sprintf(`param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 1000000000, duration: 1s, cluster: %t}
`, cluster)
}

// benchModes starts one service with a rule in memory and one with the same rule in Redis (a
// local redis-server), and returns a client of each (memory first) and requests to send.
func benchModes(b *testing.B) ([2]rlsv3.RateLimitServiceClient, []*rlsv3.RateLimitRequest) {
	srv := redistest.Start(b)
	return benchPair(b, [2]string{
		benchService(b, benchRule(false), "", nil),
		benchService(b, benchRule(true), srv.Addr(), nil),
	})
}

// benchPair returns a client of each of the services at addrs, warmed up, and requests to send.
func benchPair(b *testing.B, addrs [2]string) ([2]rlsv3.RateLimitServiceClient, []*rlsv3.RateLimitRequest) {
	var clients [2]rlsv3.RateLimitServiceClient
	for i, a := range addrs {
		conn, err := grpcClient(a)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = rlRequest("POST:/order", "item-"+strconv.Itoa(i))
	}
	for _, c := range clients { // warm up: connections, script loaded
		for _, r := range reqs[:10] {
			if _, err := c.ShouldRateLimit(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	}
	return clients, reqs
}

// BenchmarkShouldRateLimitRedisVsMemory sends the same calls, one at a time, alternately to a
// service with the rule in memory and to one with it in Redis, so that both see the same
// machine load. It reports each mode's throughput and p99 latency and their ratio.
func BenchmarkShouldRateLimitRedisVsMemory(b *testing.B) {
	clients, reqs := benchModes(b)
	ctx := context.Background()
	lat := [2][]time.Duration{make([]time.Duration, 0, b.N/2+1), make([]time.Duration, 0, b.N/2+1)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		mode := i % 2
		begin := time.Now()
		resp, err := clients[mode].ShouldRateLimit(ctx, reqs[(i/2)%len(reqs)])
		lat[mode] = append(lat[mode], time.Since(begin))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatalf("call %d mode %d: %v %v", i, mode, resp.GetOverallCode(), err)
		}
	}
	b.StopTimer()
	var spent [2]time.Duration
	for m := range lat {
		for _, d := range lat[m] {
			spent[m] += d
		}
	}
	reportModes(b, lat, spent)
}

// BenchmarkShouldRateLimitRedisVsMemoryParallel is the same comparison under load: 32 clients
// at once, in alternating batches to the in-memory and to the Redis service.
func BenchmarkShouldRateLimitRedisVsMemoryParallel(b *testing.B) {
	clients, reqs := benchModes(b)
	b.ReportAllocs()
	b.ResetTimer()
	lat, spent := alternateParallel(b, clients, reqs)
	b.StopTimer()
	reportModes(b, lat, spent)
}

// alternateParallel sends b.N calls from 32 clients at once, in alternating batches of 2,000 to
// clients[0] and to clients[1], so that both see the same machine load, and returns each one's
// call latencies and the time spent on its batches.
func alternateParallel(b *testing.B, clients [2]rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest) (lat [2][]time.Duration, spent [2]time.Duration) {
	const workers, batch = 32, 2000
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for mode := range 2 {
			var next atomic.Int64
			var mu sync.Mutex
			var wg sync.WaitGroup
			begin := time.Now()
			for range workers {
				wg.Go(func() {
					var mine []time.Duration
					for {
						i := int(next.Add(1)) - 1
						if i >= n {
							break
						}
						t := time.Now()
						resp, err := clients[mode].ShouldRateLimit(context.Background(), reqs[(done+i)%len(reqs)])
						mine = append(mine, time.Since(t))
						if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
							b.Errorf("mode %d: %v %v", mode, resp.GetOverallCode(), err)
							return
						}
					}
					mu.Lock()
					lat[mode] = append(lat[mode], mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			spent[mode] += time.Since(begin)
		}
	}
	return lat, spent
}

// reportModes reports, per mode (memory, redis), the calls per second of time spent in that
// mode, the p99 latency, and the throughput ratio.
func reportModes(b *testing.B, lat [2][]time.Duration, spent [2]time.Duration) {
	reportPair(b, [2]string{"memory", "redis"}, lat, spent)
}

// reportPair reports, for each of two services named names, the calls per second of time spent
// on it, the p99 latency, and the throughput of the second over the first's.
func reportPair(b *testing.B, names [2]string, lat [2][]time.Duration, spent [2]time.Duration) {
	var rps, p99 [2]float64
	for m := range lat {
		if len(lat[m]) == 0 || spent[m] <= 0 {
			return
		}
		rps[m] = float64(len(lat[m])) / spent[m].Seconds()
		slices.Sort(lat[m])
		p99[m] = float64(lat[m][len(lat[m])*99/100].Microseconds())
	}
	for m, name := range names {
		b.ReportMetric(rps[m], name+"-calls/s")
		b.ReportMetric(p99[m], name+"-p99-µs")
	}
	b.ReportMetric(rps[1]/rps[0], names[1]+"/"+names[0]+"-throughput")
}

func grpcClient(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// BenchmarkStreamWorkers compares, side by side, a service with gRPC stream workers off
// (grpc.stream_workers 0: each call on a goroutine of its own) and one with the default, in
// memory mode and in Redis mode (a local redis-server), 32 clients at once in alternating
// batches. It reports each one's throughput and p99, and workers/none-throughput.
func BenchmarkStreamWorkers(b *testing.B) {
	for _, redis := range []bool{false, true} {
		name := "memory"
		if redis {
			name = "redis"
		}
		b.Run(name, func(b *testing.B) {
			addr := ""
			if redis {
				addr = redistest.Start(b).Addr()
			}
			clients, reqs := benchPair(b, [2]string{
				benchService(b, benchRule(redis), addr, map[string]string{"EXTAUTHZ_GRPC_STREAM_WORKERS": "0"}),
				benchService(b, benchRule(redis), addr, nil),
			})
			b.ReportAllocs()
			b.ResetTimer()
			lat, spent := alternateParallel(b, clients, reqs)
			b.StopTimer()
			reportPair(b, [2]string{"none", "workers"}, lat, spent)
		})
	}
}
