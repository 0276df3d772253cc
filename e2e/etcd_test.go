package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// startEtcdService runs the binary with the shipped config, its rules from etcd key, and env.
func startEtcdService(t *testing.T, endpoint, key string, env ...string) *service {
	t.Helper()
	config, err := filepath.Abs(extauthzYAML)
	if err != nil {
		t.Fatal(err)
	}
	return startServiceWith(t, config, "", append([]string{"EXTAUTHZ_RULES_ETCD_ENDPOINTS=" + endpoint, "EXTAUTHZ_RULES_ETCD_KEYS=" + key}, env...)...)
}

// startServiceWith runs the binary with config (an absolute path), rules (a path, or "" for
// none) and env, for t.
func startServiceWith(t *testing.T, config, rules string, env ...string) *service {
	t.Helper()
	logs := &syncBuffer{}
	p := testbin.Start(t, testbin.Options{
		Binary: binary,
		Args: []string{"serve", "--config", config, "--rules", rules,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env:    env,
		Output: logs,
		Ready:  15 * time.Second,
	})
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &service{proc: p, cmd: p.Cmd, grpcAddr: p.GRPCAddr, adminURL: "http://" + p.AdminAddr, rules: rules, logs: logs,
		exited: make(chan struct{}), conn: conn, authz: authv3.NewAuthorizationClient(conn), rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// TestRulesFromEtcd: the service takes its rules from an etcd key: the shipped rules put there
// are enforced; an update applies; a broken put is kept out and shown in /rules; etcd going
// down keeps the rules, and when it is back the watch resumes.
func TestRulesFromEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(value []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "/extauthz/rules.yaml", string(value)); err != nil {
			t.Fatal(err)
		}
	}
	rules := readRules(t)
	put(rules)
	// a check of the keys every second, each read given 2s: the service meets etcd down
	// within seconds
	s := startEtcdService(t, srv.Endpoint, "/extauthz/rules.yaml",
		"EXTAUTHZ_RULES_ETCD_CHECK_INTERVAL=1s", "EXTAUTHZ_RULES_ETCD_DIAL_TIMEOUT=2s")
	if info := s.rulesInfo(t); info.File != "etcd:/extauthz/rules.yaml" {
		t.Errorf("/rules file = %q, want etcd:/extauthz/rules.yaml", info.File)
	}
	if strangerAllowed(t, s) {
		t.Fatal("stranger allowed by the white list read from etcd")
	}

	opened := bytes.Replace(rules, []byte("origins: [web, mobile]"), []byte("origins: [web, mobile, stranger]"), 1)
	put(opened)
	if !eventually(10*time.Second, func() bool { return strangerAllowed(t, s) }) {
		t.Fatalf("etcd update not applied within 10s\n%s", s.logs)
	}
	v := s.rulesInfo(t).Version

	put([]byte("authority: [{resource: r, strategy: grey, origins: [a]}]\n"))
	if !eventually(10*time.Second, func() bool { return len(s.rulesInfo(t).LastError) > 4 }) {
		t.Fatalf("broken put not reported in /rules within 10s\n%s", s.logs)
	}
	mustContain(t, "/rules last_error", string(s.rulesInfo(t).LastError), "strategy")
	if !strangerAllowed(t, s) || s.rulesInfo(t).Version != v {
		t.Error("a broken put changed the rules in force")
	}

	srv.Stop()
	if !eventually(15*time.Second, func() bool {
		return bytes.Contains(s.rulesInfo(t).LastError, []byte("cannot read rules from etcd"))
	}) {
		t.Fatalf("etcd down not shown in /rules last_error within 15s: %s\n%s", s.rulesInfo(t).LastError, s.logs)
	}
	if !strangerAllowed(t, s) {
		t.Error("etcd going down changed the rules in force")
	}
	srv.Restart()
	put(rules)
	if !eventually(15*time.Second, func() bool { return !strangerAllowed(t, s) }) {
		t.Fatalf("put after etcd came back not applied within 15s\n%s", s.logs)
	}
	if le := string(s.rulesInfo(t).LastError); le != "null" {
		t.Errorf("/rules last_error after a good load = %s, want null", le)
	}
}
