package main

import (
	"context"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The gRPC listener refuses a request over grpc.max_recv_msg_size with ResourceExhausted, and
// goes on serving requests under it.
func TestBinaryMaxRecvMsgSize(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "extauthz.yaml", "grpc: {max_recv_msg_size: 4096}\n")
	p := start(t, "serve", "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	c := authv3.NewAuthorizationClient(dial(t, p.GRPCAddr))

	big := checkRequest("GET", "/hello", "a")
	big.Attributes.Request.Http.Headers["x-big"] = strings.Repeat("x", 8192)
	for _, tt := range []struct {
		name string
		req  *authv3.CheckRequest
		want codes.Code
	}{
		{"small", checkRequest("GET", "/hello", "a"), codes.OK},
		{"over the limit", big, codes.ResourceExhausted},
		{"small again", checkRequest("GET", "/hello", "a"), codes.OK},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Check(ctx, tt.req)
		cancel()
		if got := status.Code(err); got != tt.want {
			t.Errorf("%s: Check = %v (%v), want %v", tt.name, got, err, tt.want)
		}
	}
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}
