package main

// The harness of the binary tests (internal/testkit/testbin runs the process) and the calls they make.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// bin is the binary the tests of this package run, built on first use (never under -short).
var bin = &testbin.Lazy{ModuleRoot: "../.."}

// binary builds the extauthz binary once per test run; under -short it skips t.
func binary(t *testing.T) string {
	t.Helper()
	return bin.Path(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	bin.Close()
	os.Exit(code)
}

// proc is a running extauthz process.
type proc = testbin.Proc

// start runs the binary with args in an empty directory and waits until it logs that it serves.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startIn(t, t.TempDir(), args...)
}

// startIn is start in directory dir.
func startIn(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	return testbin.Start(t, testbin.Options{Binary: binary(t), Args: args, Dir: dir})
}

// rulesInfo is the part of /rules the tests read.
type rulesInfo struct {
	Version   uint64 `json:"version"`
	File      string `json:"file"`
	LastError *struct {
		Message string `json:"message"`
	} `json:"last_error"`
	Authority []struct {
		Origins []string `json:"origins"`
	} `json:"authority"`
}

// rulesOf reads /rules of p.
func rulesOf(t *testing.T, p *proc) rulesInfo {
	t.Helper()
	code, body := p.Get(t, "/rules")
	if code != http.StatusOK {
		t.Fatalf("GET /rules = %d %s", code, body)
	}
	var ri rulesInfo
	if err := json.Unmarshal([]byte(body), &ri); err != nil {
		t.Fatalf("decode /rules %s: %v", body, err)
	}
	return ri
}

// eventually polls cond until it holds or 15s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeAtomic replaces path with content in one rename, as config tooling does.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func checkRequest(method, path, origin string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.9.9.9", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 5555}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method:  method,
			Path:    path,
			Host:    "example.com",
			Headers: map[string]string{"x-origin": origin},
		}},
	}}
}

// checkCode calls Check and returns the gRPC status code in the answer.
func checkCode(t *testing.T, c authv3.AuthorizationClient, method, path, origin string) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, checkRequest(method, path, origin))
	if err != nil {
		t.Fatalf("Check %s %s from %q: %v", method, path, origin, err)
	}
	return codes.Code(resp.GetStatus().GetCode())
}

func rateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, resource, item string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, rlRequest(resource, item))
	if err != nil {
		t.Fatalf("ShouldRateLimit %s %s: %v", resource, item, err)
	}
	return resp.GetOverallCode()
}

func rlRequest(resource, item string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "resource", Value: resource},
			{Key: "origin", Value: "serviceA"},
			{Key: "item_id", Value: item},
		}}},
	}
}

// leased is one ShouldRateLimit call of one descriptor: resource, param = value and, when lease
// is not empty, the lease id under the default lease key. Release sends it as Envoy's
// stream-done release (is_negative_hits); Probe with an explicit hits_addend of 0.
type leased struct {
	resource, param, value, lease string
	release, probe                bool
}

func (l leased) send(t *testing.T, c rlsv3.RateLimitServiceClient) *rlsv3.RateLimitResponse {
	t.Helper()
	entries := []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "resource", Value: l.resource}, {Key: l.param, Value: l.value}}
	if l.lease != "" {
		entries = append(entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: "lease_id", Value: l.lease})
	}
	d := &rlcommonv3.RateLimitDescriptor{Entries: entries}
	switch {
	case l.release:
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
	case l.probe:
		d.HitsAddend = wrapperspb.UInt64(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}
