// Package etcdrules feeds a rulestore.Store from etcd v3 keys instead of the rules file: it
// reads the keys, puts their rules in force, and watches them, with the Store's validation,
// last-good-kept, last_error, versioning and metrics.
package etcdrules

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/rulestore"
)

// Config is the rules_etcd section of the service config.
type Config struct {
	// Endpoints are etcd's client URLs; none means the rules come from the file.
	Endpoints []string `json:"endpoints"`
	// Keys hold the rules: one key with a whole rules document, or one key per rule kind (say
	// a native param_flow document and a Sentinel authority list); their rules are joined, in
	// order. A key named *.json must hold JSON; any other holds YAML or JSON.
	Keys []string `json:"keys"`
	// DialTimeout bounds connecting and each read.
	DialTimeout time.Duration `json:"dial_timeout"`
	// Username and Password, when set, authenticate to etcd.
	Username string `json:"username"`
	Password string `json:"password"`
	// CAFile, when set, is the authority etcd's certificate must chain to (https endpoints);
	// CertFile and KeyFile, when set, are the client certificate etcd may ask for. All PEM.
	CAFile   string `json:"ca_file"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// DefaultDialTimeout is the DialTimeout of the default config.
const DefaultDialTimeout = 5 * time.Second

// Enabled reports whether rules come from etcd.
func (c Config) Enabled() bool { return len(c.Endpoints) > 0 }

// Validate reports the first problem with the section, naming its field.
func (c Config) Validate() error {
	if !c.Enabled() {
		if len(c.Keys) > 0 {
			return &ConfigError{Field: "endpoints", Reason: "required when keys are set"}
		}
		return nil
	}
	for i, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return &ConfigError{Field: fmt.Sprintf("endpoints[%d]", i), Reason: "must not be empty"}
		}
	}
	if len(c.Keys) == 0 {
		return &ConfigError{Field: "keys", Reason: "must name at least one key"}
	}
	seen := map[string]bool{}
	for i, k := range c.Keys {
		switch {
		case k == "":
			return &ConfigError{Field: fmt.Sprintf("keys[%d]", i), Reason: "must not be empty"}
		case seen[k]:
			return &ConfigError{Field: fmt.Sprintf("keys[%d]", i), Reason: fmt.Sprintf("%q is listed twice", k)}
		}
		seen[k] = true
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return &ConfigError{Field: "cert_file", Reason: "cert_file and key_file go together"}
	}
	if c.DialTimeout <= 0 {
		return &ConfigError{Field: "dial_timeout", Reason: fmt.Sprintf("must be > 0, not %v", c.DialTimeout)}
	}
	return nil
}

// ConfigError is a problem with one field of the section.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason }

// Source names the keys for messages and /rules: "etcd:/a,/b".
func (c Config) Source() string { return "etcd:" + strings.Join(c.Keys, ",") }

// NewClient connects to the configured etcd.
func NewClient(c Config) (*clientv3.Client, error) {
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		Username:    c.Username,
		Password:    c.Password,
		TLS:         tlsConfig,
		// No client log: read failures reach the Store and its log.
		Logger: zap.NewNop(),
	})
}

// tlsConfig is the client's TLS setup, or nil without ca_file and cert_file.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file: no PEM certificate in %s", c.CAFile)
		}
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file, key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Watcher keeps a Store loaded from etcd keys.
type Watcher struct {
	cli     *clientv3.Client
	cfg     Config
	store   *rulestore.Store
	lastErr string // the failure last recorded, so that one outage is recorded once
	// Retry is how long Run waits before reading again after a failure; 0 means 1s.
	Retry time.Duration
}

// New returns a Watcher of cfg.Keys through cli into store.
func New(cli *clientv3.Client, cfg Config, store *rulestore.Store) *Watcher {
	return &Watcher{cli: cli, cfg: cfg, store: store}
}

// Load reads the keys once and puts their rules in force; it returns the Store's error when
// the rules are refused, or the read's. The service calls it at start, where a failure is fatal.
func (w *Watcher) Load(ctx context.Context) error {
	_, readErr, err := w.load(ctx)
	if readErr != nil {
		return readErr
	}
	return err
}

// load reads the keys and hands them to the Store; it returns the revision read at, the read's
// error, or the Store's.
func (w *Watcher) load(ctx context.Context) (rev int64, readErr, loadErr error) {
	docs, version, rev, err := w.read(ctx)
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.store.Fail(err)
		}
		return 0, err, nil
	}
	w.lastErr = ""
	return rev, nil, w.store.LoadDocuments(docs, version)
}

// read gets every key at one revision. The version is the highest ModRevision of the keys: the
// same on every replica for the same content. A missing key is an error (like a missing file,
// it never means "no rules": put an empty document, {}, for that).
func (w *Watcher) read(ctx context.Context) ([]rulestore.Document, uint64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	defer cancel()
	ops := make([]clientv3.Op, len(w.cfg.Keys))
	for i, k := range w.cfg.Keys {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := w.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("cannot read rules from etcd: %w", err)
	}
	docs := make([]rulestore.Document, len(w.cfg.Keys))
	var version uint64
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, 0, 0, fmt.Errorf("cannot read rules from etcd: key %q not found", w.cfg.Keys[i])
		}
		docs[i] = rulestore.Document{Name: w.cfg.Keys[i], Data: kvs[0].Value}
		version = max(version, uint64(kvs[0].ModRevision))
	}
	return docs, version, resp.Header.Revision, nil
}

// Run watches the keys until ctx ends, loading them again on every change. While etcd cannot
// be reached, the rules in force stay (the failure is recorded once), and the watch resumes
// from the last revision seen when etcd is back, so that no change is missed; a watch that
// cannot resume (its revision compacted) reads the keys again. It returns nil when ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	retry := w.Retry
	if retry <= 0 {
		retry = time.Second
	}
	for ctx.Err() == nil {
		rev, readErr, _ := w.load(ctx) // a refused load is recorded by the Store
		if readErr != nil {
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		w.watch(ctx, rev+1)
	}
	return nil
}

// watch waits for a change to any key from revision from on, and returns when one came (or
// the watch ended: compaction, cancellation, ctx).
func (w *Watcher) watch(ctx context.Context, from int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	for _, k := range w.cfg.Keys {
		ch := w.cli.Watch(wctx, k, clientv3.WithRev(from))
		go func() {
			for resp := range ch {
				if resp.Err() != nil || len(resp.Events) > 0 || resp.Canceled {
					select {
					case changed <- struct{}{}:
					default:
					}
					if resp.Err() != nil || resp.Canceled {
						return
					}
				}
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}()
	}
	select {
	case <-ctx.Done():
	case <-changed:
	}
}
