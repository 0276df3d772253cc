package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// servingAddrs returns the addresses of the "serving" log entry, once there is one.
func servingAddrs(log string) (grpcAddr, adminAddr string, ok bool) {
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Msg       string `json:"msg"`
			GRPCAddr  string `json:"grpc_addr"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "serving" {
			return e.GRPCAddr, e.AdminAddr, true
		}
	}
	return "", "", false
}

// run serves until its context ends, then returns nil (exit code 0); readiness follows.
func TestServeInProcess(t *testing.T) {
	rules := writeFile(t, t.TempDir(), "rules.yaml", "authority: []\n")
	vars := map[string]string{
		"EXTAUTHZ_GRPC_ADDR":      "127.0.0.1:0",
		"EXTAUTHZ_ADMIN_ADDR":     "127.0.0.1:0",
		"EXTAUTHZ_RULES_FILE":     rules,
		"EXTAUTHZ_SHUTDOWN_GRACE": "2s",
	}
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, env(vars), &bytes.Buffer{}, &stderr) }()

	var adminAddr string
	eventually(t, "serving", func() bool {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, stderr.String())
		default:
		}
		var ok bool
		_, adminAddr, ok = servingAddrs(stderr.String())
		return ok
	})
	resp, err := http.Get("http://" + adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of cancel")
	}
	if _, err := http.Get("http://" + adminAddr + "/healthz"); err == nil {
		t.Error("admin server still answers after run returned")
	}
}

// A port already in use is an error from run, not a hang.
func TestServeAddrInUse(t *testing.T) {
	var first syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--rules", ""}, env(nil), &bytes.Buffer{}, &first)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var grpcAddr string
	eventually(t, "first server serving", func() bool {
		var ok bool
		grpcAddr, _, ok = servingAddrs(first.String())
		return ok
	})
	var stderr syncBuffer
	err := run(context.Background(), []string{"--grpc-addr", grpcAddr, "--admin-addr", "127.0.0.1:0", "--rules", ""}, env(nil), &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "grpc_addr") {
		t.Errorf("second server on %s: %v, want a grpc_addr error", grpcAddr, err)
	}
}
