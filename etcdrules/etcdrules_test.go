package etcdrules

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/testpki"
	"github.com/extauthz/extauthz/rulestore"
)

func rules(count int) string {
	return "param_flow:\n  - {resource: \"GET:/items\", param: item_id, count: " + strconv.Itoa(count) + "}\n"
}

type events struct {
	mu  sync.Mutex
	all []rulestore.Event
}

func (e *events) add(ev rulestore.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func setup(t *testing.T, keys ...string) (*etcdtest.Server, *clientv3.Client, *rulestore.Store, *Watcher, *events) {
	t.Helper()
	srv := etcdtest.Start(t)
	cfg := Config{Endpoints: []string{srv.Endpoint}, Keys: keys, DialTimeout: 2 * time.Second, CheckInterval: 200 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cli, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ev := &events{}
	store, err := rulestore.New(rulestore.Options{Source: cfg.Source(), OnLoad: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	w := New(cli, cfg, store)
	w.Retry = 50 * time.Millisecond
	return srv, cli, store, w, ev
}

func put(t *testing.T, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, key, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func count(s *rulestore.Store) int64 {
	set := s.Current()
	if len(set.Rules.ParamFlow) == 0 {
		return -1
	}
	return set.Rules.ParamFlow[0].Count
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func run(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestWatchLifecycle: a put is applied with the key's revision as version; an update follows;
// a broken put is kept out and reported, the rules in force stay; etcd down keeps the rules;
// when etcd is back the watch resumes and the next put is applied.
func TestWatchLifecycle(t *testing.T) {
	srv, cli, store, w, _ := setup(t, "/extauthz/rules.yaml")
	rev := put(t, cli, "/extauthz/rules.yaml", rules(5))
	if err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := store.Current(); count(store) != 5 || got.Version != uint64(rev) || got.File != "etcd:/extauthz/rules.yaml" {
		t.Fatalf("after the first load: count %d, version %d, file %q; want 5, %d, etcd:/extauthz/rules.yaml", count(store), got.Version, got.File, rev)
	}
	run(t, w)

	rev = put(t, cli, "/extauthz/rules.yaml", rules(7))
	waitFor(t, "the update applied", func() bool { return count(store) == 7 })
	if v := store.Current().Version; v != uint64(rev) {
		t.Errorf("version %d after the update, want the key's revision %d", v, rev)
	}

	put(t, cli, "/extauthz/rules.yaml", "param_flow: [{resource: r, param: p, count: -1}]\n")
	waitFor(t, "the broken put reported", func() bool { return store.LastError() != nil })
	if !strings.Contains(store.LastError().Message, "count: must not be negative") {
		t.Errorf("LastError = %q, want the count problem", store.LastError().Message)
	}
	if count(store) != 7 || store.Current().Version != uint64(rev) {
		t.Errorf("the broken put changed the rules: count %d, version %d", count(store), store.Current().Version)
	}
	put(t, cli, "/extauthz/rules.yaml", "")
	waitFor(t, "the empty put reported", func() bool {
		return store.LastError() != nil && strings.Contains(store.LastError().Message, "empty")
	})
	if count(store) != 7 {
		t.Errorf("an empty value removed the rules: count %d", count(store))
	}

	srv.Stop()
	// the next check's read fails: the watcher has met etcd down, and records it
	waitFor(t, "etcd down recorded", func() bool {
		return store.LastError() != nil && strings.Contains(store.LastError().Message, "cannot read rules from etcd")
	})
	if count(store) != 7 {
		t.Errorf("etcd down changed the rules: count %d", count(store))
	}
	srv.Restart()
	rev = put(t, cli, "/extauthz/rules.yaml", rules(9))
	waitFor(t, "a put after etcd came back applied", func() bool { return count(store) == 9 })
	if store.LastError() != nil {
		t.Errorf("LastError after a good load = %+v, want nil", store.LastError())
	}
	if v := store.Current().Version; v != uint64(rev) {
		t.Errorf("version %d, want %d", v, rev)
	}
}

// TestKeyPerKind: one key per rule kind, in different formats, joined into one set; a missing
// key fails the load.
func TestKeyPerKind(t *testing.T) {
	_, cli, store, w, _ := setup(t, "/extauthz/param_flow.yaml", "/extauthz/authority.json")
	if err := w.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Load with missing keys = %v, want not found", err)
	}
	put(t, cli, "/extauthz/param_flow.yaml", rules(3))
	rev := put(t, cli, "/extauthz/authority.json", `[{"resource": "GET:/admin", "limitApp": "ops", "strategy": 0}]`)
	if err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	set := store.Current()
	if len(set.Rules.Authority) != 1 || count(store) != 3 || set.Version != uint64(rev) {
		t.Errorf("joined set: %d authority rules, count %d, version %d; want 1, 3, %d", len(set.Rules.Authority), count(store), set.Version, rev)
	}
	// Two replicas reading the same keys agree on the version.
	other, err := rulestore.New(rulestore.Options{Source: "etcd:x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := New(cli, w.cfg, other).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if other.Current().Version != set.Version {
		t.Errorf("second replica's version %d, want %d", other.Current().Version, set.Version)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c   Config
		bad string
	}{
		{Config{}, ""},
		{Config{Keys: []string{"/a"}}, "endpoints"},
		{Config{Endpoints: []string{"http://x:2379"}, DialTimeout: time.Second}, "keys"},
		{Config{Endpoints: []string{"http://x:2379"}, Keys: []string{"/a", "/a"}, DialTimeout: time.Second}, "keys[1]"},
		{Config{Endpoints: []string{"http://x:2379"}, Keys: []string{"/a"}}, "dial_timeout"},
		{Config{Endpoints: []string{"http://x:2379"}, Keys: []string{"/a"}, DialTimeout: time.Second}, ""},
	} {
		err := tc.c.Validate()
		if (err == nil) != (tc.bad == "") || err != nil && !strings.HasPrefix(err.Error(), tc.bad) {
			t.Errorf("Validate(%+v) = %v, want a problem with %q", tc.c, err, tc.bad)
		}
	}
}

// TestTLS: the watcher reads etcd over TLS with a client certificate (ca_file, cert_file,
// key_file); without its certificate etcd refuses it.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "etcd test CA")
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caFile := write("ca.pem", ca.PEM)
	sc, sk := ca.Issue(t, "etcd", x509.ExtKeyUsageServerAuth)
	cc, ck := ca.Issue(t, "extauthz", x509.ExtKeyUsageClientAuth)
	files := etcdtest.TLS{
		CertFile: write("server.pem", sc), KeyFile: write("server-key.pem", sk), ClientCAFile: caFile,
		ClientCert: write("client.pem", cc), ClientKey: write("client-key.pem", ck),
	}
	srv := etcdtest.StartTLS(t, files)
	cfg := Config{Endpoints: []string{srv.Endpoint}, Keys: []string{"/extauthz/rules.yaml"}, DialTimeout: 2 * time.Second,
		CAFile: caFile, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cli, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put(t, cli, "/extauthz/rules.yaml", rules(4))
	store, err := rulestore.New(rulestore.Options{Source: cfg.Source()})
	if err != nil {
		t.Fatal(err)
	}
	if err := New(cli, cfg, store).Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if count(store) != 4 {
		t.Errorf("count %d over TLS, want 4", count(store))
	}

	noCert := cfg
	noCert.CertFile, noCert.KeyFile = "", ""
	cli2, err := NewClient(noCert)
	if err == nil {
		defer cli2.Close()
		if err := New(cli2, noCert, store).Load(context.Background()); err == nil {
			t.Error("a client without a certificate read the rules")
		}
	}
}
