// Package config is the service configuration: one struct composed of the libraries' own
// config types, its defaults, its loading from a YAML file, EXTAUTHZ_* environment variables
// and command-line overrides, and its validation.
package config

import (
	"time"

	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/internal/observe"
	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/policy"
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
	// like 512MiB sets that (see memlimit). Under a limit, and unless GOGC is set, the
	// collector lets garbage grow by a 32nd of the limit past the live heap between
	// collections (between a quarter and 4x the live heap).
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
	// FleetInterval is how often, with store.redis, a replica publishes its per-second counts
	// to Redis for the console's fleet view; from 1s to 10s.
	FleetInterval time.Duration `json:"fleet_interval"`
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
		Admin:     AdminConfig{FleetInterval: 5 * time.Second},
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
