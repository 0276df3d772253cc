// Package etcdrules feeds a rulestore.Store from etcd v3 keys instead of the rules file: it
// reads the keys, puts their rules in force, and watches them, with the Store's validation,
// last-good-kept, last_error, versioning and metrics.
package etcdrules

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config is the rules_etcd section of the service config.
type Config struct {
	// Endpoints are the etcd v3 client URLs; when set, the rules come from `rules_etcd.keys` instead of
	// `rules_file` (see [Rules from etcd](rules.md#rules-from-etcd)).
	Endpoints []string `json:"endpoints"`
	// Keys hold the rules: one key with a whole rules document, or one key per rule kind (say
	// a native param_flow document and a Sentinel authority list); their rules are joined, in
	// order. A key named *.json must hold JSON; any other holds YAML or JSON.
	Keys []string `json:"keys"`
	// DialTimeout bounds connecting and each read.
	DialTimeout time.Duration `json:"dial_timeout"`
	// CheckInterval is how often the keys are read besides the watch, to catch etcd restored from a
	// snapshot or recreated empty (its revision back), another cluster, a missed change; `0s` takes
	// the default.
	CheckInterval time.Duration `json:"check_interval"`
	// Username is the etcd user, when etcd has authentication on.
	Username string `json:"username"`
	// Password is the etcd user's password (never logged).
	Password string `json:"password"`
	// CAFile is the CA that etcd's certificate must chain to (PEM), for `https://` endpoints.
	CAFile string `json:"ca_file"`
	// CertFile is the client certificate for etcd (PEM), with `rules_etcd.key_file`, when etcd requires
	// one.
	CertFile string `json:"cert_file"`
	// KeyFile is the client certificate's private key (PEM).
	KeyFile string `json:"key_file"`
}

// Defaults of the default config.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultCheckInterval = 10 * time.Second
)

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
	if c.CheckInterval < 0 {
		return &ConfigError{Field: "check_interval", Reason: fmt.Sprintf("must not be negative, not %v", c.CheckInterval)}
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
