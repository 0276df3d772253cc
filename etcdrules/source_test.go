package etcdrules

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/extauthz/extauthz/internal/testkit/etcdtest"
	"github.com/extauthz/extauthz/internal/testkit/sourcetest"
	"github.com/extauthz/extauthz/rulestore"
)

// suiteKeys is how many keys the shared suite's rules are spread over, and chunk the most a
// Put writes to one: etcd refuses a request over 1.5 MiB by default, so an oversized document
// (over rulestore.MaxFileSize in all) is written across the keys. Any other document is in the
// first key, the others holding an empty rule set.
const (
	suiteKeys = 20
	chunk     = 1 << 20
)

// etcdEnv is the shared suite's world for the etcd source: a real etcd of its own, and the
// rules in suiteKeys keys.
type etcdEnv struct {
	srv  *etcdtest.Server
	cli  *clientv3.Client
	keys []string
}

func newEtcdEnv(t *testing.T) sourcetest.Env {
	srv := etcdtest.Start(t)
	cli, err := NewClient(Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	e := &etcdEnv{srv: srv, cli: cli}
	for i := range suiteKeys {
		e.keys = append(e.keys, fmt.Sprintf("/extauthz/rules/%02d.yaml", i))
	}
	return e
}

func (e *etcdEnv) put(t *testing.T, key string, value []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.cli.Put(ctx, key, string(value)); err != nil {
		t.Fatal(err)
	}
}

// Put writes the keys from the last to the first, so that the first key, which holds the
// rules, changes last: no state between two puts is a document the Store would take.
func (e *etcdEnv) Put(t *testing.T, data []byte) {
	t.Helper()
	for i := len(e.keys) - 1; i >= 0; i-- {
		part := []byte("{}")
		switch {
		case len(data) <= chunk && i == 0:
			part = data
		case len(data) > chunk:
			part = data[min(i*chunk, len(data)):min((i+1)*chunk, len(data))]
		}
		e.put(t, e.keys[i], part)
	}
}

// Down stops etcd; Up starts it again on the same data.
func (e *etcdEnv) Down(t *testing.T) { e.srv.Stop() }
func (e *etcdEnv) Up(t *testing.T)   { e.srv.Restart() }

func (e *etcdEnv) Start(t *testing.T, opts rulestore.Options) (*rulestore.Store, sourcetest.Source, error) {
	cfg := Config{Endpoints: []string{e.srv.Endpoint}, Keys: e.keys, DialTimeout: 2 * time.Second, CheckInterval: 200 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cli, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	opts.Source = cfg.Source()
	store, err := rulestore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	w := New(cli, cfg, store)
	w.Retry = 50 * time.Millisecond
	if err := w.Load(context.Background()); err != nil {
		return nil, nil, err
	}
	return store, w, nil
}

func TestSourceSuite(t *testing.T) {
	sourcetest.Run(t, newEtcdEnv)
}
