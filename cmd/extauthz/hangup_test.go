package main

// SIGHUP to the built binary: it never ends the process; it reloads the rules file and the
// TLS certificate.

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

const msgHangup = "SIGHUP: reloaded"

// hangup sends SIGHUP to p and waits for the n-th reload it logs.
func hangup(t *testing.T, p *proc, n int) map[string]any {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	eventually(t, "the SIGHUP reload logged", func() bool {
		got = entries(p, msgHangup)
		select {
		case <-p.Done():
			t.Fatalf("the process exited on SIGHUP: %v", p.Err())
		default:
		}
		return len(got) >= n
	})
	return got[n-1]
}

// entries are p's log lines with message msg, in order.
func entries(p *proc, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.LogText(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// SIGHUP, however often, leaves the process serving; each reloads the rules file: a changed
// file is applied by the signal (the file watcher is slower than the test), a broken one is
// rejected with the rules in force kept.
func TestBinarySIGHUP(t *testing.T) {
	dir := t.TempDir()
	rulesPath := writeFile(t, dir, "rules.yaml", rulesV1("serviceA"))
	cfgPath := writeFile(t, dir, "extauthz.yaml", binaryConfig)
	p := start(t, "--config", cfgPath, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	authz := authv3.NewAuthorizationClient(dial(t, p.GRPCAddr))

	for i := 1; i <= 3; i++ {
		e := hangup(t, p, i)
		if e["rules_version"] != float64(1) || e["error"] != nil {
			t.Errorf("SIGHUP #%d logged %v; want rules_version 1 and no error", i, e)
		}
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceA"); got != codes.OK {
		t.Errorf("Check after three SIGHUPs = %v, want OK", got)
	}

	writeAtomic(t, rulesPath, rulesV1("serviceB"))
	if e := hangup(t, p, 4); e["rules_version"] != float64(2) {
		t.Errorf("SIGHUP after a change logged %v; want rules_version 2", e)
	}
	if got := checkCode(t, authz, "GET", "/hello", "serviceB"); got != codes.OK {
		t.Errorf("Check serviceB after the reload = %v, want OK", got)
	}

	writeAtomic(t, rulesPath, "param_flow: [{resource: x, param: p, grade: qps, count: -1}]\n")
	if e := hangup(t, p, 5); e["rules_version"] != float64(2) || !strings.Contains(e["error"].(string), "count") {
		t.Errorf("SIGHUP after a broken file logged %v; want rules_version 2 and the error", e)
	}
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code after the SIGHUPs and SIGTERM = %d, want 0", code)
	}
}

// SIGHUP reloads a rotated TLS certificate at once, without waiting for a handshake to look at
// the files.
func TestBinarySIGHUPReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "extauthz test CA")
	a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "tls.crt", a.cert)
	keyFile := writeBytes(t, dir, "tls.key", a.key)
	cfg := writeFile(t, dir, "tls.yaml", "tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
	p := start(t, "serve", "--config", cfg, "--rules", "", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")

	replaceFile(t, keyFile, b.key)
	replaceFile(t, certFile, b.cert)
	rotated := time.Now()
	if e := hangup(t, p, 1); e["tls_reloaded"] != true {
		t.Errorf("SIGHUP after a rotation logged %v; want tls_reloaded true", e)
	}
	// No handshake was made since the rotation: the signal loaded it.
	if e := p.Entry(msgReloaded); e == nil || e["subject"] != "CN=extauthz-b" {
		t.Errorf("reload log = %v; want subject CN=extauthz-b", e)
	}
	testpki.StillServes(t, p.GRPCAddr, ca.Roots(), nil, b.leaf)
	if took := time.Since(rotated); took > 4*time.Second {
		t.Errorf("the rotated certificate took %v to be served after SIGHUP", took)
	}
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

// With rules from etcd, SIGHUP leaves them to their watch (a second reader would race it) and
// still never ends the process; the watch keeps applying changes.
func TestBinarySIGHUPWithEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(rules string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "/extauthz/rules.yaml", rules); err != nil {
			t.Fatal(err)
		}
	}
	put(rulesV1("serviceA"))
	p := testbin.Start(t, testbin.Options{Binary: binary(t),
		Args: []string{"--config", writeFile(t, t.TempDir(), "extauthz.yaml", binaryConfig),
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		Env: []string{"EXTAUTHZ_RULES_ETCD_ENDPOINTS=" + srv.Endpoint, "EXTAUTHZ_RULES_ETCD_KEYS=/extauthz/rules.yaml"}})
	if e := hangup(t, p, 1); e["rules"] == nil || e["error"] != nil {
		t.Errorf("SIGHUP with etcd rules logged %v; want them left to the watch", e)
	}
	put(rulesV1("serviceB"))
	authz := authv3.NewAuthorizationClient(dial(t, p.GRPCAddr))
	eventually(t, "the etcd change applied", func() bool {
		return checkCode(t, authz, "GET", "/hello", "serviceB") == codes.OK
	})
	hangup(t, p, 2)
	if code := p.Stop(t); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}
