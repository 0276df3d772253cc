package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// BenchmarkShouldRateLimitRedisVsMemory runs one service with the rule in memory and one with it
// in Redis (a local redis-server), and the same gRPC client loop alternates between them, so
// that both see the same machine load. It reports each mode's throughput and p99 latency and
// their ratio.
func BenchmarkShouldRateLimitRedisVsMemory(b *testing.B) {
	srv := redistest.Start(b)
	const rule = `param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: 1000000000, duration: 1s%s}
`
	addrs := []string{
		benchService(b, fmt.Sprintf(rule, ""), ""),
		benchService(b, fmt.Sprintf(rule, ", cluster: true"), srv.Addr()),
	}
	var clients []rlsv3.RateLimitServiceClient
	for _, a := range addrs {
		conn, err := grpcClient(a)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = rlRequest("POST:/order", "item-"+strconv.Itoa(i))
	}
	ctx := context.Background()
	for _, c := range clients { // warm up: connections, script loaded
		for _, r := range reqs[:10] {
			if _, err := c.ShouldRateLimit(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
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
	var rps, p99 [2]float64
	for m := range lat {
		if len(lat[m]) == 0 {
			return
		}
		var sum time.Duration
		for _, d := range lat[m] {
			sum += d
		}
		rps[m] = float64(len(lat[m])) / sum.Seconds()
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
