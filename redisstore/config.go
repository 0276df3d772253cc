package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Defaults applied by New to fields left zero.
const (
	DefaultTimeout         = 5 * time.Millisecond
	DefaultPrefix          = "extauthz"
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = time.Second
	DefaultBatchWait       = time.Millisecond
)

// Modes of Config.Mode.
const (
	ModeStandalone = "standalone"
	ModeCluster    = "cluster"
)

// Config configures a Store. The zero value of every field but Addrs takes a default.
type Config struct {
	// Addrs are the Redis addresses for `cluster: true` rules; empty means no shared store (cluster rules are
	// refused).
	Addrs []string
	// Mode is `standalone` (one address) or `cluster`.
	Mode string
	// Username is the Redis ACL user.
	Username string
	// Password is the Redis password (never logged).
	Password string
	// TLS turns on TLS to Redis.
	TLS bool
	// CAFile is a PEM file of the certificate authorities that sign the server's certificate
	// (a private CA); "" means the system's. It requires TLS.
	CAFile string
	// Timeout is the deadline of one check, all its round trips included: give it two round
	// trips to Redis (a check of a value whose call is in flight waits for that call first).
	Timeout time.Duration
	// BatchWait is the longest a call waits for the call in flight on its lane (the whole Redis, or
	// one slot in cluster mode) to return and take it in its next batch: after it, the calls
	// waiting go as a batch of their own, but for those of a value and rule in flight, which wait
	// for its answer. Negative (say -1s): until the call in flight returns.
	BatchWait time.Duration
	// Prefix is the key prefix (no braces).
	Prefix string
	// BreakerFailures is how many consecutive failed calls suspend calls to Redis.
	BreakerFailures int
	// BreakerCooldown is the time between probes while suspended.
	BreakerCooldown time.Duration
	// BlockedCache is how many values a replica remembers as refused by Redis until they may pass, refusing
	// them again without a call (never admits); negative: off.
	BlockedCache int
	// BookAhead is how far ahead a replica books the tokens of a value over its limit whose calls
	// it refuses: the call that takes the last token takes those of that span too, and the
	// replica gives them out itself as they come due, one script call for up to 64 tokens where
	// there would be one a token. It needs the cache of blocked values. It changes which replica
	// gets a token, never how many are given nor when (see "Booking ahead" in
	// [Cluster mode](cluster-mode.md)). At most 1s; 0: off.
	BookAhead time.Duration
	// SampleInterval is how often `INFO` is read from every Redis node to count evictions and
	// restarts (`extauthz_redis_evicted_keys_total`, `extauthz_redis_restarts_total`).
	SampleInterval time.Duration
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "redis config: " + e.Field + ": " + e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }

// Validate reports the first invalid field of c, as a *ConfigError.
func (c Config) Validate() error {
	if len(c.Addrs) == 0 {
		return &ConfigError{"addrs", errors.New("at least one address is required")}
	}
	for i, a := range c.Addrs {
		if !strings.Contains(a, ":") {
			return &ConfigError{fmt.Sprintf("addrs[%d]", i), fmt.Errorf("%q is not host:port", a)}
		}
	}
	switch c.Mode {
	case "", ModeStandalone:
		if len(c.Addrs) != 1 {
			return &ConfigError{"addrs", fmt.Errorf("standalone mode takes one address, got %d", len(c.Addrs))}
		}
	case ModeCluster:
	default:
		return &ConfigError{"mode", fmt.Errorf("%q is not standalone or cluster", c.Mode)}
	}
	if c.CAFile != "" && !c.TLS {
		return &ConfigError{"ca_file", errors.New("requires tls")}
	}
	if c.Timeout < 0 {
		return &ConfigError{"timeout", fmt.Errorf("%v is negative", c.Timeout)}
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return &ConfigError{"prefix", fmt.Errorf("%q contains a brace", c.Prefix)}
	}
	if c.BreakerFailures < 0 {
		return &ConfigError{"breaker_failures", fmt.Errorf("%d is negative", c.BreakerFailures)}
	}
	if c.BreakerCooldown < 0 {
		return &ConfigError{"breaker_cooldown", fmt.Errorf("%v is negative", c.BreakerCooldown)}
	}
	if c.SampleInterval < 0 {
		return &ConfigError{"sample_interval", fmt.Errorf("%v is negative", c.SampleInterval)}
	}
	if c.BookAhead < 0 || c.BookAhead > MaxBookAhead {
		return &ConfigError{"book_ahead", fmt.Errorf("%v is not between 0 and %v", c.BookAhead, MaxBookAhead)}
	}
	if c.BookAhead > 0 && c.BlockedCache < 0 {
		return &ConfigError{"book_ahead", errors.New("requires the cache of blocked values (blocked_cache)")}
	}
	return nil
}

// MaxBookAhead is the longest Config.BookAhead: a booking refuses the value on the other
// replicas while it runs.
const MaxBookAhead = time.Second

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeStandalone
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.BatchWait == 0 {
		c.BatchWait = DefaultBatchWait
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
	}
	if c.BlockedCache == 0 {
		c.BlockedCache = DefaultBlockedCache
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	return c
}

func clientOption(c Config) (rueidis.ClientOption, error) {
	o := rueidis.ClientOption{
		InitAddress:       c.Addrs,
		Username:          c.Username,
		Password:          c.Password,
		ForceSingleClient: c.Mode == ModeStandalone,
		DisableCache:      true,
		DisableRetry:      true,
		Dialer:            net.Dialer{Timeout: max(c.Timeout, time.Second)},
		ConnWriteTimeout:  max(20*c.Timeout, time.Second),
		// a lone call too: sent synchronously, a call that timed out would close its connection,
		// and the next call there, connecting first, take two round trips (a Redis farther than
		// half the timeout away would then time out on it for good)
		AlwaysPipelining: true,
	}
	if c.TLS {
		host, _, _ := net.SplitHostPort(c.Addrs[0])
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return o, &ConfigError{"ca_file", err}
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, &ConfigError{"ca_file", fmt.Errorf("%s holds no PEM certificate", c.CAFile)}
			}
			o.TLSConfig.RootCAs = pool
		}
	}
	return o, nil
}
