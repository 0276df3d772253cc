package main

import (
	"context"
	"fmt"
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

	"github.com/extauthz/extauthz/internal/redistest"
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
// and returns its gRPC address.
func benchService(b *testing.B, rules, redisAddr string) string {
	b.Helper()
	rf := filepath.Join(b.TempDir(), "rules.yaml")
	if err := os.WriteFile(rf, []byte(rules), 0o600); err != nil {
		b.Fatal(err)
	}
	addr := freeAddr(b)
	env := map[string]string{
		"EXTAUTHZ_GRPC_ADDR":  addr,
		"EXTAUTHZ_ADMIN_ADDR": freeAddr(b),
		"EXTAUTHZ_RULES_FILE": rf,
	}
	if redisAddr != "" {
		env["EXTAUTHZ_STORE_REDIS_ADDRS"] = redisAddr
		env["EXTAUTHZ_STORE_REDIS_TIMEOUT"] = "1s"
		env["EXTAUTHZ_STORE_REDIS_FALLBACK"] = "deny"
	}
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addConfigFlags(fs)
	cfg, err := loadConfig(fs, func(k string) string { return env[k] })
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

// benchModes starts one service with a rule in memory and one with the same rule in Redis (a
// local redis-server), and returns a client of each (memory first) and requests to send.
func benchModes(b *testing.B) ([2]rlsv3.RateLimitServiceClient, []*rlsv3.RateLimitRequest) {
	srv := redistest.Start(b)
	const rule = `param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 1000000000, duration: 1s%s}
`
	addrs := [2]string{
		benchService(b, fmt.Sprintf(rule, ""), ""),
		benchService(b, fmt.Sprintf(rule, ", cluster: true"), srv.Addr()),
	}
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
	const workers, batch = 32, 2000
	clients, reqs := benchModes(b)
	var lat [2][]time.Duration
	var spent [2]time.Duration
	b.ReportAllocs()
	b.ResetTimer()
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
	b.StopTimer()
	reportModes(b, lat, spent)
}

// reportModes reports, per mode (memory, redis), the calls per second of time spent in that
// mode, the p99 latency, and the throughput ratio.
func reportModes(b *testing.B, lat [2][]time.Duration, spent [2]time.Duration) {
	var rps, p99 [2]float64
	for m := range lat {
		if len(lat[m]) == 0 || spent[m] <= 0 {
			return
		}
		rps[m] = float64(len(lat[m])) / spent[m].Seconds()
		slices.Sort(lat[m])
		p99[m] = float64(lat[m][len(lat[m])*99/100].Microseconds())
	}
	b.ReportMetric(rps[0], "memory-calls/s")
	b.ReportMetric(rps[1], "redis-calls/s")
	b.ReportMetric(p99[0], "memory-p99-µs")
	b.ReportMetric(p99[1], "redis-p99-µs")
	b.ReportMetric(rps[1]/rps[0], "redis/memory-throughput")
}

func grpcClient(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}
