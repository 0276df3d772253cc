package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// grpc.max_concurrent_streams bounds the calls one connection has in flight: with 1, a call
// cannot start while a health Watch stream is open on the same connection, and starts as soon
// as it ends. With the default, both run at once.
func TestBinaryMaxConcurrentStreams(t *testing.T) {
	tests := []struct {
		name    string
		streams string // "" is the default
		blocked bool
	}{
		{"default", "", false},
		{"one", "1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := "grpc_addr: 127.0.0.1:0\nadmin_addr: 127.0.0.1:0\nrules_file: \"\"\n"
			if tt.streams != "" {
				cfg += "grpc: {max_concurrent_streams: " + tt.streams + "}\n"
			}
			p := startIn(t, dir, "--config", writeFile(t, dir, "extauthz.yaml", cfg))
			if got, want := p.Entry("starting extauthz")["max_concurrent_streams"], float64(1024); tt.streams == "" && got != want {
				t.Errorf("logged max_concurrent_streams = %v, want %v", got, want)
			}
			conn := dial(t, p.GRPCAddr)

			// Hold one stream open: a Watch that has answered is open on the server.
			watchCtx, stopWatch := context.WithCancel(context.Background())
			defer stopWatch()
			holdWatch(t, watchCtx, conn)

			client := authv3.NewAuthorizationClient(conn)
			// Blocked, the call can never start: a short deadline shows it. Free, it gets
			// ample time even on a loaded machine.
			limit := 5 * time.Second
			if tt.blocked {
				limit = 500 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			_, err := client.Check(ctx, checkRequest("GET", "/x", "a"))
			cancel()
			if tt.blocked {
				if status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("Check beside an open stream with max 1: %v, want DeadlineExceeded (no stream free)", err)
				}
			} else if err != nil {
				t.Fatalf("Check beside an open stream: %v", err)
			}

			// Once the stream ends, the next call goes through.
			stopWatch()
			if code := checkCode(t, client, "GET", "/x", "a"); code != codes.OK {
				t.Errorf("Check after the stream ended = %v, want OK", code)
			}
		})
	}
}

// With every stream worker busy (open Watch streams hold them), a call still runs at once, on a
// goroutine of its own; the start log says how many workers there are.
func TestBinaryStreamWorkers(t *testing.T) {
	for _, workers := range []string{"", "0", "1"} {
		t.Run("workers="+workers, func(t *testing.T) {
			dir := t.TempDir()
			cfg := "grpc_addr: 127.0.0.1:0\nadmin_addr: 127.0.0.1:0\nrules_file: \"\"\n"
			want := float64(64)
			if workers != "" {
				cfg += "grpc: {stream_workers: " + workers + "}\n"
				n, _ := strconv.Atoi(workers)
				want = float64(n)
			}
			p := startIn(t, dir, "--config", writeFile(t, dir, "extauthz.yaml", cfg))
			if got := p.Entry("starting extauthz")["stream_workers"]; got != want {
				t.Errorf("logged stream_workers = %v, want %v", got, want)
			}
			conn := dial(t, p.GRPCAddr)
			watchCtx, stopWatch := context.WithCancel(context.Background())
			defer stopWatch()
			for range 3 { // more open streams than one worker
				holdWatch(t, watchCtx, conn)
			}
			client := authv3.NewAuthorizationClient(conn)
			for range 20 {
				if code := checkCode(t, client, "GET", "/x", "a"); code != codes.OK {
					t.Fatalf("Check beside open streams = %v, want OK", code)
				}
			}
		})
	}
}

// holdWatch opens a health Watch on conn and waits for its first answer: the stream is then
// open on the server until ctx ends.
func holdWatch(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("watch: %v", err)
	}
}
