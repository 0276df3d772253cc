package main

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// etcd wiped and started again empty on the same address (its revision back at 1): the rules
// written after that apply, an emergency black list included, though a watch resuming from
// the old revision would never see them; the reset is logged, /rules shows the new rules
// and no error.
func TestBinaryEtcdWiped(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const key = "/extauthz/rules.yaml"
	put := func(value string) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Put(ctx, key, value)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	white := "authority:\n  - {resource: \"GET:/hello\", strategy: white, origins: [serviceA]}\n"
	for range 10 { // a history to lose
		put("authority: []\n")
	}
	put(white)
	cfg := writeFile(t, t.TempDir(), "extauthz.yaml", "authz: {origin: [{from: header, name: x-origin}]}\n")
	p := testbin.Start(t, testbin.Options{Binary: binary(t), Env: []string{"EXTAUTHZ_RULES_ETCD_ENDPOINTS=" + srv.Endpoint, "EXTAUTHZ_RULES_ETCD_KEYS=" + key,
		"EXTAUTHZ_RULES_ETCD_CHECK_INTERVAL=200ms"},
		Args: []string{"serve", "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	authz := authv3.NewAuthorizationClient(dial(t, p.GRPCAddr))
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.OK {
		t.Fatalf("serviceA before the wipe: %v, want OK", got)
	}
	before := rulesOf(t, p).Version

	srv.Wipe()
	srv.Restart()
	rev := put("authority:\n  - {resource: \"GET:/hello\", strategy: black, origins: [serviceA]}\n")
	if rev >= int64(before) {
		t.Fatalf("revision after the wipe %d, want below the version in force %d", rev, before)
	}
	p.WaitLog(t, "etcd revision went back; reading the rules keys again and watching from the new revision", 15*time.Second)
	eventually(t, "the black list applied", func() bool {
		return checkCode(t, authz, "GET", "/hello", "serviceA") == codes.PermissionDenied
	})
	ri := rulesOf(t, p)
	if ri.Version <= before || ri.LastError != nil || len(ri.Authority) != 1 {
		t.Errorf("/rules after the wipe: version %d (before %d), last_error %+v, %d authority rules; want a newer version, no error, 1 rule",
			ri.Version, before, ri.LastError, len(ri.Authority))
	}
	// the watch follows the new revisions
	put(white)
	eventually(t, "the next put applied", func() bool {
		return checkCode(t, authz, "GET", "/hello", "serviceA") == codes.OK
	})
}
