// Package config is the service configuration: one struct composed of the libraries' own
// config types, its defaults, its loading from a YAML file, EXTAUTHZ_* environment variables
// and command-line overrides, and its validation.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/internal/memlimit"
	"github.com/extauthz/extauthz/internal/observe"
	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/redact"
	"github.com/extauthz/extauthz/redisstore"
)

// DefaultRulesFile is read when present and no rules file is configured.
const DefaultRulesFile = "rules.yaml"

// Config is the whole service configuration. Its keys are the json names of its fields (or,
// for a field without one, the field name in snake case: CAFile is ca_file), joined with dots;
// each key's environment variable is EXTAUTHZ_ and the key upper-cased with dots as
// underscores (see Keys). The zero value is not usable: start from Default or Load.
type Config struct {
	GRPCAddr  string `json:"grpc_addr"`
	AdminAddr string `json:"admin_addr"`
	// RulesFile is the rules file, watched and reloaded on change; "" means no rules.
	RulesFile string `json:"rules_file"`
	// RulesOptional is set by Load when RulesFile is the built-in default, which nobody named:
	// a missing file then means an empty rule set rather than an error.
	RulesOptional bool             `json:"-"`
	Admin         AdminConfig      `json:"admin"`
	Log           LogConfig        `json:"log"`
	TLS           tlsreload.Config `json:"tls"`
	GRPC          GRPCConfig       `json:"grpc"`
	// ShutdownGrace is how long in-flight calls get to finish on shutdown.
	ShutdownGrace time.Duration `json:"shutdown_grace"`
	// SweepInterval is how often the hot-param state forgets idle values (hotparam's Sweep).
	SweepInterval time.Duration `json:"sweep_interval"`
	// HotParam bounds the hot-param state kept of evicted values.
	HotParam HotParamConfig `json:"hot_param"`
	// MemoryLimit is the Go runtime's soft memory limit: "" takes 90% of the container's
	// cgroup limit (none without one, or when GOMEMLIMIT is set), "off" sets none, and a size
	// like 512MiB sets that (see memlimit).
	MemoryLimit string `json:"memory_limit"`
	// Mapping turns Envoy's requests into resources, origins and params; its keys (authz,
	// ratelimit) sit at the top level.
	Mapping descriptors.Config `json:",inline"`
	// ParamNames resolves Sentinel's paramIdx in Sentinel-format rule files.
	ParamNames []string    `json:"param_names"`
	Store      StoreConfig `json:"store"`
	// RulesEtcd, when its endpoints are set, is where the rules come from instead of the file.
	RulesEtcd etcdrules.Config `json:"rules_etcd"`
	// Sensitive says which params' values are shown only as a keyed hash.
	Sensitive SensitiveConfig `json:"sensitive"`
	// DecisionLog is the log of each call's decision.
	DecisionLog DecisionLogConfig `json:"decision_log"`
	// Tracing sends a span per decision to an OpenTelemetry collector.
	Tracing TracingConfig `json:"tracing"`
	// Decision tunes the decision path: the cap on throttled requests waiting, dry run.
	Decision policy.Config `json:"decision"`
	// SentinelDashboard makes the service a machine of a Sentinel dashboard (package dashboard).
	SentinelDashboard dashboard.Config `json:"sentinel_dashboard"`
}

// HotParamConfig bounds the states kept of the values a hot-param rule evicted while not back
// to their default (16 bytes each; see hotparam's flood.go): StateBudget over all rules,
// RuleStateBudget for each rule (sizes like 128MiB). Overflow is what a rule does past them:
// forget (the states that end soonest: a forgotten value gets its allowance back) or refuse
// (new values, until states end: no limit is exceeded).
type HotParamConfig struct {
	StateBudget     string `json:"state_budget"`
	RuleStateBudget string `json:"rule_state_budget"`
	Overflow        string `json:"overflow"`
}

// TracingConfig is the OTLP/gRPC export of spans (package tracing): off while Endpoint is "".
type TracingConfig struct {
	Endpoint    string  `json:"endpoint"`     // collector, host:port
	Insecure    bool    `json:"insecure"`     // plaintext instead of TLS
	SampleRatio float64 `json:"sample_ratio"` // share of calls without Envoy's decision traced
}

// DecisionLogConfig says which decisions are logged (package internal/observe): every block
// when Enabled, and one allowed call in AllowedEvery (0: none), at most MaxPerSecond lines a
// second (the others are counted and reported in one line a second).
type DecisionLogConfig struct {
	Enabled      bool `json:"enabled"`
	AllowedEvery int  `json:"allowed_every"`
	MaxPerSecond int  `json:"max_per_second"`
}

// SensitiveConfig marks params whose values are secrets (package redact): besides the params
// named like a credential, those listed in Params; their values are shown as HMAC-SHA256
// hashes under Key (at least redact.MinKeyLen bytes; "" means a random key per process).
type SensitiveConfig struct {
	Params []string `json:"params"`
	Key    string   `json:"key"`
}

// AdminConfig tunes the admin HTTP listener (its address is AdminAddr).
type AdminConfig struct {
	// PProf serves Go's profiles under /debug/pprof/. Off by default: a CPU profile or an
	// execution trace costs the service while it runs, and the admin listener has no auth.
	PProf bool `json:"pprof"`
	// HotWindow is the window of /hot's and the console's counts: a value's passed and blocked
	// requests in the current window and the one before. 0 means each rule's own duration (a
	// second for concurrency rules); at least a second either way.
	HotWindow time.Duration `json:"hot_window"`
	// Hosts are the names, besides loopback names (localhost) and IP addresses, that the admin
	// listener answers to in a request's Host header; any other name is refused, so that a
	// page whose name a DNS rebinding points at the listener cannot read it. A name
	// "*.example.org" accepts every name below example.org.
	Hosts []string `json:"hosts"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `json:"level"`  // debug | info | warn | error
	Format string `json:"format"` // json | console
}

// GRPCConfig tunes the gRPC server.
type GRPCConfig struct {
	// MaxRecvMsgSize is the largest request, in bytes.
	MaxRecvMsgSize int `json:"max_recv_msg_size"`
	// MaxConcurrentStreams is the most calls one client connection may have in flight (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS); a client opens more only as earlier ones finish.
	MaxConcurrentStreams int `json:"max_concurrent_streams"`
	// StreamWorkers is how many long-lived goroutines run calls; a call that finds them all
	// busy runs on a goroutine of its own. 0: every call on a goroutine of its own.
	StreamWorkers int             `json:"stream_workers"`
	Keepalive     KeepaliveConfig `json:"keepalive"`
}

// KeepaliveConfig is the server's keepalive pings and its enforcement on clients.
type KeepaliveConfig struct {
	Time    time.Duration `json:"time"`     // ping a client idle this long; 0 means never
	Timeout time.Duration `json:"timeout"`  // close a connection whose ping is unanswered this long
	MinTime time.Duration `json:"min_time"` // shortest ping interval allowed to clients
}

// StoreConfig selects where the state of cluster rules lives; without Redis addresses it is
// in memory.
type StoreConfig struct {
	Redis RedisConfig `json:"redis"`
}

// RedisConfig is the shared store of `cluster: true` rules: the Redis store's own Config (its
// keys sit in this section) and what the rules do while Redis fails.
type RedisConfig struct {
	redisstore.Config `json:",inline"`
	// Fallback is what cluster rules do while Redis fails: local, allow or deny.
	Fallback string `json:"fallback"`
	// Replicas divides the counts of cluster rules enforced locally while Redis is down.
	Replicas int `json:"replicas"`
	// RequireNoeviction refuses to start when a Redis master's maxmemory-policy may evict keys
	// (any but noeviction): an evicted key gives a depleted value its full count again.
	// Without it an evicting policy is a warning.
	RequireNoeviction bool `json:"require_noeviction"`
}

// Enabled reports whether a Redis store is configured.
func (c RedisConfig) Enabled() bool { return len(c.Addrs) > 0 }

// DefaultStreamWorkers is grpc.stream_workers unless set: enough for the calls in flight of a
// busy replica in Redis mode (each waits one round trip), few enough that idle workers hold
// little memory (a parked goroutine and its stack, typically 8–16 KB each).
const DefaultStreamWorkers = 64

// MaxStreamWorkers bounds grpc.stream_workers: workers are started at once and never idle out.
const MaxStreamWorkers = 65536

// Default is the built-in configuration: gRPC on :9001, admin HTTP on loopback, no rules file
// named (Load then picks DefaultRulesFile when present), in-memory state.
func Default() Config {
	return Config{
		GRPCAddr:  ":9001",
		AdminAddr: "127.0.0.1:9002",
		Log:       LogConfig{Level: "info", Format: "json"},
		GRPC: GRPCConfig{
			MaxRecvMsgSize:       4 << 20,
			MaxConcurrentStreams: 1024,
			StreamWorkers:        DefaultStreamWorkers,
			Keepalive:            KeepaliveConfig{Time: 2 * time.Hour, Timeout: 20 * time.Second, MinTime: 10 * time.Second},
		},
		ShutdownGrace: 15 * time.Second,
		SweepInterval: time.Minute,
		HotParam:      HotParamConfig{StateBudget: "256MiB", RuleStateBudget: "128MiB", Overflow: "forget"},
		Mapping: descriptors.Config{
			Authz: descriptors.AuthzConfig{Resource: descriptors.DefaultResource},
			RateLimit: descriptors.RateLimitConfig{
				ResourceKey: descriptors.DefaultResourceKey,
				OriginKey:   descriptors.DefaultOriginKey,
				LeaseKey:    descriptors.DefaultLeaseKey,
			},
		},
		ParamNames: []string{},
		Store: StoreConfig{Redis: RedisConfig{
			Config: redisstore.Config{
				Addrs:           []string{},
				Mode:            redisstore.ModeStandalone,
				Timeout:         redisstore.DefaultTimeout,
				Prefix:          redisstore.DefaultPrefix,
				BreakerFailures: redisstore.DefaultBreakerFailures,
				BreakerCooldown: redisstore.DefaultBreakerCooldown,
				BlockedCache:    redisstore.DefaultBlockedCache,
				SampleInterval:  redisstore.DefaultSampleInterval,
			},
			Fallback: "local",
			Replicas: 1,
		}},
		RulesEtcd: etcdrules.Config{Endpoints: []string{}, Keys: []string{}, DialTimeout: etcdrules.DefaultDialTimeout,
			CheckInterval: etcdrules.DefaultCheckInterval},
		Sensitive:   SensitiveConfig{Params: []string{}},
		DecisionLog: DecisionLogConfig{Enabled: true, MaxPerSecond: observe.DefaultMaxPerSecond},
		Tracing:     TracingConfig{SampleRatio: 1},
		Decision:    policy.Config{MaxWaiting: policy.DefaultMaxWaiting},
		SentinelDashboard: dashboard.Config{Addrs: []string{}, App: dashboard.DefaultApp,
			HeartbeatInterval: dashboard.DefaultHeartbeatInterval, AllowedCallers: []string{}},
	}
}

// Validate checks every setting, each library its own section, and returns Errors naming
// every bad one, or nil.
func (c *Config) Validate() error {
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	checkAddr := func(field, addr string) {
		if addr == "" {
			add(field, "must not be empty")
			return
		}
		if _, port, err := net.SplitHostPort(addr); err != nil {
			add(field, "must be host:port, not %q", addr)
		} else if port == "" {
			add(field, "missing port in %q", addr)
		}
	}
	checkAddr("grpc_addr", c.GRPCAddr)
	checkAddr("admin_addr", c.AdminAddr)
	if c.Admin.HotWindow < 0 {
		add("admin.hot_window", "must not be negative, not %s", c.Admin.HotWindow)
	}
	for i, h := range c.Admin.Hosts {
		if !validHostName(strings.TrimPrefix(h, "*.")) {
			add(fmt.Sprintf("admin.hosts[%d]", i), "must be a host name (or *. and a host name), without a port, not %q", h)
		}
	}

	oneOf := func(field, value string, allowed ...string) {
		for _, a := range allowed {
			if value == a {
				return
			}
		}
		add(field, "must be %s, not %q%s", orList(allowed), value, suggest(value, allowed))
	}
	oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	oneOf("log.format", c.Log.Format, "json", "console")

	// The TLS files validate themselves.
	for _, e := range leaves(c.TLS.Validate()) {
		var te *tlsreload.ConfigError
		if errors.As(e, &te) {
			add("tls."+te.Field, "%s", te.Reason)
		}
	}

	if c.GRPC.MaxRecvMsgSize <= 0 {
		add("grpc.max_recv_msg_size", "must be > 0 bytes, not %d", c.GRPC.MaxRecvMsgSize)
	}
	if n := c.GRPC.MaxConcurrentStreams; n <= 0 || int64(n) > math.MaxUint32 {
		add("grpc.max_concurrent_streams", "must be between 1 and %d, not %d", uint32(math.MaxUint32), n)
	}
	if n := c.GRPC.StreamWorkers; n < 0 || n > MaxStreamWorkers {
		add("grpc.stream_workers", "must be between 0 and %d, not %d", MaxStreamWorkers, n)
	}
	if c.GRPC.Keepalive.Time < 0 {
		add("grpc.keepalive.time", "must not be negative, not %v", c.GRPC.Keepalive.Time)
	}
	if c.GRPC.Keepalive.Timeout <= 0 {
		add("grpc.keepalive.timeout", "must be > 0, not %v", c.GRPC.Keepalive.Timeout)
	}
	if c.GRPC.Keepalive.MinTime < 0 {
		add("grpc.keepalive.min_time", "must not be negative, not %v", c.GRPC.Keepalive.MinTime)
	}
	if c.ShutdownGrace <= 0 {
		add("shutdown_grace", "must be > 0, not %v", c.ShutdownGrace)
	}
	if c.SweepInterval <= 0 {
		add("sweep_interval", "must be > 0, not %v", c.SweepInterval)
	}
	for key, v := range map[string]string{"hot_param.state_budget": c.HotParam.StateBudget, "hot_param.rule_state_budget": c.HotParam.RuleStateBudget} {
		if _, err := memlimit.ParseSize(v); err != nil {
			add(key, "%v", strings.TrimSuffix(err.Error(), ", or off"))
		}
	}
	if o := c.HotParam.Overflow; o != "forget" && o != "refuse" {
		add("hot_param.overflow", "must be forget or refuse, not %q", o)
	}
	if err := memlimit.CheckSetting(c.MemoryLimit); err != nil {
		add("memory_limit", "%v", err)
	}

	// The mapping validates itself: descriptors.New reports every problem, each by field.
	if _, err := descriptors.New(c.Mapping); err != nil {
		for _, e := range leaves(err) {
			var ce *descriptors.ConfigError
			if errors.As(e, &ce) {
				add(ce.Field, "%s", ce.Reason)
			} else {
				add("authz", "%v", e)
			}
		}
	}

	for i, name := range c.ParamNames {
		if strings.TrimSpace(name) == "" {
			add(fmt.Sprintf("param_names[%d]", i), "must not be empty")
		}
	}

	// The decision section validates itself.
	for _, e := range leaves(c.Decision.Validate()) {
		var de *policy.ConfigError
		if errors.As(e, &de) {
			add("decision."+de.Field, "%s", de.Reason)
		}
	}

	r := c.Store.Redis
	oneOf("store.redis.fallback", r.Fallback, "local", "allow", "deny")
	if r.Replicas < 0 {
		add("store.redis.replicas", "must not be negative, not %d", r.Replicas)
	}
	if r.Enabled() {
		// The Redis store validates its own section.
		if err := r.Config.Validate(); err != nil {
			var ce *redisstore.ConfigError
			if errors.As(err, &ce) {
				add("store.redis."+ce.Field, "%v", ce.Err)
			} else {
				add("store.redis", "%v", err)
			}
		}
	} else if r.Username != "" || r.Password != "" || r.TLS || r.CAFile != "" {
		add("store.redis.addrs", "required when other store.redis connection settings are set")
	}

	if err := c.RulesEtcd.Validate(); err != nil {
		var ce *etcdrules.ConfigError
		if errors.As(err, &ce) {
			add("rules_etcd."+ce.Field, "%s", ce.Reason)
		}
	}
	if c.RulesEtcd.Enabled() && c.RulesFile != "" && !c.RulesOptional {
		add("rules_etcd.endpoints", "the rules come from rules_file or from rules_etcd, not both: unset rules_file")
	}
	for i, p := range c.Sensitive.Params {
		if strings.TrimSpace(p) == "" {
			add(fmt.Sprintf("sensitive.params[%d]", i), "must not be empty")
		}
	}
	if k := c.Sensitive.Key; k != "" && len(k) < redact.MinKeyLen {
		// The key itself is never repeated in an error.
		add("sensitive.key", "must be at least %d bytes, not %d", redact.MinKeyLen, len(k))
	}

	if c.Tracing.Endpoint != "" {
		checkAddr("tracing.endpoint", c.Tracing.Endpoint)
	}
	if r := c.Tracing.SampleRatio; !(r >= 0 && r <= 1) {
		add("tracing.sample_ratio", "must be from 0 to 1, not %v", r)
	}
	if c.DecisionLog.AllowedEvery < 0 {
		add("decision_log.allowed_every", "must not be negative, not %d", c.DecisionLog.AllowedEvery)
	}
	c.validateDashboard(add)
	if c.DecisionLog.MaxPerSecond < 1 {
		add("decision_log.max_per_second", "must be at least 1, not %d", c.DecisionLog.MaxPerSecond)
	}

	if len(errs) == 0 {
		return nil
	}
	return errs
}

// leaves flattens errors.Join trees into their single errors; nil has none.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// orList words a list of choices: "a, b or c".
func orList(choices []string) string {
	if len(choices) == 1 {
		return choices[0]
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// validateDashboard checks the sentinel_dashboard section, and that a push can be written
// where the rules come from.
func (c *Config) validateDashboard(add func(field, format string, args ...any)) {
	d := c.SentinelDashboard
	for _, e := range d.Validate() {
		add("sentinel_dashboard."+e.Field, "%s", e.Reason)
	}
	if k := d.EtcdKey; k != "" && !slices.Contains(c.RulesEtcd.Keys, k) {
		add("sentinel_dashboard.etcd_key", "must be one of rules_etcd.keys, not %q", k)
	}
	if d.Enabled() && d.EtcdKey == "" && len(c.RulesEtcd.Keys) > 1 {
		add("sentinel_dashboard.etcd_key", "required with more than one of rules_etcd.keys: the key the dashboard's pushes are written to")
	}
}
